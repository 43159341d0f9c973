//! The webhook's Prometheus metrics, served on `--diagnostics-address` at `/metrics`:
//!
//! | metric | type | labels |
//! | --- | --- | --- |
//! | `captf_webhook_requests_total` | counter | kind, operation, result (`allowed`, `denied`) |
//! | `captf_webhook_denials_total` | counter | kind, rule (one per distinct rule a denial broke) |
//! | `captf_webhook_request_duration_seconds` | histogram | kind, operation |
//! | `captf_webhook_certificate_reloads_total` | counter | result (`succeeded`, `failed`) |
//! | `captf_build_info` | gauge | version, commit, contract |

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::rules::Rule;

/// Labels of `captf_webhook_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The kind the path validates.
    pub kind: &'static str,
    /// `create`, `update`, `delete`, `connect`, or `unknown` for an unreadable request.
    pub operation: &'static str,
    /// `allowed` or `denied`.
    pub result: &'static str,
}

/// Labels of `captf_webhook_denials_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DenialLabels {
    /// The kind the path validates.
    pub kind: &'static str,
    /// The broken rule's label.
    pub rule: &'static str,
}

/// Labels of `captf_webhook_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    /// The kind the path validates.
    pub kind: &'static str,
    /// The operation.
    pub operation: &'static str,
}

/// Labels of `captf_webhook_certificate_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `succeeded` or `failed`.
    pub result: &'static str,
}

/// Labels of `captf_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The crate version.
    pub version: &'static str,
    /// The commit, when the build knew it.
    pub commit: &'static str,
    /// The module contract version.
    pub contract: &'static str,
}

fn latency_histogram() -> Histogram {
    // 0.25 ms .. ~4 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 15))
}

/// Every metric, and the registry that encodes them.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Family<RequestLabels, Counter>,
    denials: Family<DenialLabels, Counter>,
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    reloads: Family<ReloadLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let denials = Family::<DenialLabels, Counter>::default();
        let latency = Family::<LatencyLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        let build = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "captf_webhook_requests",
            "Admission requests answered, by kind, operation and result",
            requests.clone(),
        );
        registry.register(
            "captf_webhook_denials",
            "Denied admission requests, by kind and broken rule",
            denials.clone(),
        );
        registry.register(
            "captf_webhook_request_duration_seconds",
            "Time to answer one admission request",
            latency.clone(),
        );
        registry.register(
            "captf_webhook_certificate_reloads",
            "Serving certificate reloads after the files changed",
            reloads.clone(),
        );
        registry.register(
            "captf_build_info",
            "Build information, always 1",
            build.clone(),
        );
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                commit: option_env!("CAPTF_COMMIT").unwrap_or("unknown"),
                contract: api::CONTRACT_VERSION,
            })
            .set(1);
        Self {
            registry: Arc::new(registry),
            requests,
            denials,
            latency,
            reloads,
        }
    }

    /// Records one answered request.
    pub fn record(
        &self,
        kind: &'static str,
        operation: &'static str,
        rules: &[Rule],
        seconds: f64,
    ) {
        let result = if rules.is_empty() {
            "allowed"
        } else {
            "denied"
        };
        self.requests
            .get_or_create(&RequestLabels {
                kind,
                operation,
                result,
            })
            .inc();
        let mut distinct: Vec<Rule> = rules.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        for rule in distinct {
            self.denials
                .get_or_create(&DenialLabels {
                    kind,
                    rule: rule.label(),
                })
                .inc();
        }
        self.latency
            .get_or_create(&LatencyLabels { kind, operation })
            .observe(seconds);
    }

    /// Records one certificate reload.
    pub fn record_reload(&self, ok: bool) {
        let result = if ok { "succeeded" } else { "failed" };
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_count_each_distinct_rule_once() {
        let m = Metrics::new();
        m.record(
            "TerraformMachine",
            "update",
            &[
                Rule::MachineImmutable,
                Rule::MachineImmutable,
                Rule::JobsEnv,
            ],
            0.001,
        );
        m.record("TerraformMachine", "create", &[], 0.001);
        let text = m.encode();
        assert!(text.contains(
            r#"captf_webhook_denials_total{kind="TerraformMachine",rule="machine-immutable"} 1"#
        ));
        assert!(
            text.contains(
                r#"captf_webhook_denials_total{kind="TerraformMachine",rule="jobs-env"} 1"#
            )
        );
        assert!(text.contains(
            r#"captf_webhook_requests_total{kind="TerraformMachine",operation="create",result="allowed"} 1"#
        ));
        assert!(text.contains("captf_webhook_request_duration_seconds_bucket"));
        assert!(text.contains("captf_build_info{"));
    }
}
