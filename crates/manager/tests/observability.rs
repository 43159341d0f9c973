//! The alerts of `config/prometheus/rules.yaml` and the dashboard of `config/grafana/` against the
//! manager's metric registry (INTERFACE-FACTS §3 "Metrics and alerts", docs/src/reference/
//! metrics.md): every alert expression passes its `promtool test rules` cases on synthetic series
//! (config/prometheus/tests/rules_test.yaml), every alert has cases, and every series an alert or
//! a dashboard panel reads is one the manager exports. The metrics table of the book's manager
//! reference lists exactly the registry's families, and what the book lists as not recorded, not
//! set or not emitted yet is used nowhere in the code.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use manager::runtime::metrics::Metrics;
use serde_json::Value;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A registry with one sample in every family: the exposition leaves empty families out.
fn every_family_recorded() -> Metrics {
    let m = Metrics::new();
    let (k, op, ns, n) = ("TerraformMachine", "apply", "default", "m-0");
    m.job_finished(k, op, "succeeded", 1.0);
    m.job_error(k, op, "step", "plan");
    m.job_attempts(k, op, 1);
    m.job_step_duration(k, op, "plan", 1.0);
    m.job_queue(k, op, 1.0);
    m.job_create_delay(k, op, 1.0);
    m.set_jobs_active(k, op, 1);
    m.resources_changed(k, op, "add", 1);
    m.drift_resources(k, "change", 1);
    m.op_decision(k, op, "InputsChanged");
    m.state_read_error(k, "corrupt");
    m.outputs_invalid(k, "OutputsMissing");
    m.lease_wait(k, "run_lease");
    m.identity_denied("notfound");
    m.image_inspect_error("registry");
    m.inputs_hash_change(k);
    m.lock_force_unlock(k);
    m.remediation_request("requested");
    m.destructive_approval_consumed(k);
    m.state_backups(k, "taken", 1);
    m.state_restore(k, "succeeded");
    m.plan_approval(k, "approved");
    m.set_ready(k, ns, n, 1);
    m.set_infrastructure_healthy(k, ns, n, 1);
    m.set_drift_detected(k, ns, n, 0);
    m.set_state_resources(k, ns, n, 1);
    m.set_state_bytes(k, ns, n, 1);
    m.set_inputs_bytes(k, ns, n, 1);
    m.set_last_success(k, ns, n, "drift", 1);
    m.set_unhealthy_samples(ns, n, 1);
    m.reconcile("terraformmachine", "success", 0.1);
    m.reconcile_error("terraformmachine");
    m
}

/// The series names the manager's registry exposes, from its exposition's `# TYPE` lines:
/// counters as `<name>_total`, histograms as `<name>_bucket`, `_sum` and `_count`, gauges as
/// named.
/// Each registered family's name and type (`counter`, `gauge`, `histogram`).
fn families() -> Vec<(String, String)> {
    every_family_recorded()
        .encode()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|rest| {
            let (name, kind) = rest.split_once(' ').expect("`# TYPE name kind`");
            (name.to_owned(), kind.to_owned())
        })
        .collect()
}

fn exported_series() -> BTreeSet<String> {
    let text = every_family_recorded().encode();
    let mut series = BTreeSet::new();
    let mut families = 0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("`# TYPE name kind`");
        families += 1;
        match kind {
            "counter" => {
                series.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    series.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                series.insert(name.to_owned());
            }
        }
    }
    // Every family the registry declares (crates/manager/src/runtime/metrics.rs) is recorded above.
    let registered = include_str!("../src/runtime/metrics.rs")
        .matches("r.register(")
        .count();
    assert_eq!(
        families, registered,
        "every_family_recorded misses a family of metrics.rs: {series:?}"
    );
    series
}

/// The metric names a PromQL expression reads: its identifiers in CAPTF's and controller-runtime's
/// namespaces (`captf_`, `controller_runtime_`). Label names inside `{...}` and `by (...)` never
/// start with those.
fn metrics_in(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut ident = String::new();
    let mut in_string = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            in_string = !in_string;
            ident.clear();
            continue;
        }
        if !in_string && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            ident.push(c);
            continue;
        }
        if ident.starts_with("captf_") || ident.starts_with("controller_runtime_") {
            names.insert(std::mem::take(&mut ident));
        }
        ident.clear();
    }
    names
}

#[test]
fn metric_names_are_read_from_expressions() {
    assert_eq!(
        metrics_in(
            r#"histogram_quantile(0.9, sum by (kind, le) (rate(captf_job_queue_seconds_bucket{op="captf_x"}[5m]))) > 1"#
        ),
        BTreeSet::from(["captf_job_queue_seconds_bucket".to_owned()])
    );
    assert_eq!(
        metrics_in("time() - captf_last_success_timestamp_seconds > 0"),
        BTreeSet::from(["captf_last_success_timestamp_seconds".to_owned()])
    );
}

/// The PrometheusRule's `spec` (the rule groups promtool reads).
fn rule_spec() -> Value {
    let rule: Value = serde_saphyr::from_str(&read(&repo("config/prometheus/rules.yaml")))
        .expect("config/prometheus/rules.yaml parses");
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"].clone()
}

fn alerts(spec: &Value) -> Vec<(String, String)> {
    spec["groups"]
        .as_array()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("a group's rules").iter())
        .map(|r| {
            (
                r["alert"]
                    .as_str()
                    .expect("every rule is an alert")
                    .to_owned(),
                r["expr"]
                    .as_str()
                    .expect("every rule has an expr")
                    .to_owned(),
            )
        })
        .collect()
}

#[test]
fn alerts_read_only_exported_metrics_and_each_has_promtool_cases() {
    let series = exported_series();
    let cases = read(&repo("config/prometheus/tests/rules_test.yaml"));
    let alerts = alerts(&rule_spec());
    assert_eq!(alerts.len(), 11, "INTERFACE-FACTS documents 11 alerts");
    for (alert, expr) in &alerts {
        let read = metrics_in(expr);
        assert!(!read.is_empty(), "{alert} reads no CAPTF metric: {expr}");
        for name in read {
            assert!(
                series.contains(&name),
                "{alert} reads {name}, which the manager does not export"
            );
        }
        assert!(
            cases.contains(&format!("alertname: {alert}\n")),
            "{alert} has no promtool case in config/prometheus/tests/rules_test.yaml"
        );
    }
}

/// Where the book's sources are published: every `runbook_url` starts with it.
const BOOK_SOURCE: &str = "https://github.com/captf-io/cluster-api-provider-terraform/blob/main/";

/// Each alert's `runbook_url` names, by absolute address, a page of the book that exists: its runbook, which names the
/// alert (the book's runbooks: job-failures, size-limits, slow-jobs, reconcile-errors, and the
/// state runbooks), or its section of the Alerts reference when it has none. Every alert has a
/// section of the reference too.
#[test]
fn each_alert_names_its_runbook() {
    let page = read(&repo("docs/src/reference/alerts.md"));
    let spec = rule_spec();
    let rules = spec["groups"][0]["rules"].as_array().expect("the rules");
    for rule in rules {
        let alert = rule["alert"].as_str().expect("an alert");
        assert!(
            page.contains(&format!("\n### {alert}\n")),
            "docs/src/reference/alerts.md has no section {alert}"
        );
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{alert} has no runbook_url annotation"));
        // Absolute, so Alertmanager and its receivers can link it: the book's source on GitHub.
        let url = url.strip_prefix(BOOK_SOURCE).unwrap_or_else(|| {
            panic!("{alert}'s runbook_url {url} is not an absolute address under {BOOK_SOURCE}")
        });
        let (path, anchor) = url.split_once('#').unwrap_or((url, ""));
        assert!(
            path.starts_with("docs/src/") && Path::new(path).extension().is_some_and(|e| e == "md"),
            "{alert}'s runbook_url {url} is not a page of the book"
        );
        let target = std::fs::read_to_string(repo(path))
            .unwrap_or_else(|e| panic!("{alert}'s runbook_url {url}: {e}"));
        if path.starts_with("docs/src/runbooks/") {
            assert!(
                anchor.is_empty(),
                "{alert}'s runbook_url {url} names a whole runbook"
            );
            assert!(target.contains(alert), "{url} does not name {alert}");
        } else {
            assert_eq!(
                url,
                format!("docs/src/reference/alerts.md#{}", alert.to_lowercase()),
                "{alert} without a runbook links its own section"
            );
        }
    }
}

#[test]
fn alerts_pass_their_promtool_tests() {
    let promtool = testenv::testbin::path("promtool").expect("promtool (make testbin)");
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        dir.path().join("rules.json"),
        serde_json::to_vec_pretty(&rule_spec()).expect("the rules as JSON"),
    )
    .expect("writing rules.json");
    std::fs::copy(
        repo("config/prometheus/tests/rules_test.yaml"),
        dir.path().join("rules_test.yaml"),
    )
    .expect("copying rules_test.yaml");
    let out = Command::new(&promtool)
        .args(["test", "rules", "rules_test.yaml"])
        .current_dir(dir.path())
        .output()
        .expect("running promtool");
    assert!(
        out.status.success(),
        "promtool test rules failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn dashboard_exprs(dashboard: &Value) -> Vec<(String, String)> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("every panel has a title");
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().expect("a panel's targets");
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for t in targets {
            let expr = t["expr"].as_str().expect("every target has an expr");
            exprs.push((title.to_owned(), expr.to_owned()));
        }
    }
    exprs
}

#[test]
fn the_dashboard_is_json_and_charts_only_exported_metrics() {
    let path = repo("config/grafana/captf.json");
    let dashboard: Value = serde_json::from_str(&read(&path))
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    assert!(dashboard["uid"].is_string() && dashboard["title"].is_string());
    let series = exported_series();
    let exprs = dashboard_exprs(&dashboard);
    let mut charted = BTreeSet::new();
    for (title, expr) in &exprs {
        let read = metrics_in(expr);
        assert!(!read.is_empty(), "panel {title:?} reads no metric: {expr}");
        for name in read {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name);
            assert!(
                series.contains(&name),
                "panel {title:?} reads {name}, which the manager does not export"
            );
            charted.insert(base.to_owned());
        }
    }
    for needed in [
        "captf_ready",
        "captf_jobs_total",
        "captf_job_queue_seconds",
        "captf_job_step_duration_seconds",
        "captf_job_create_delay_seconds",
        "captf_state_bytes",
    ] {
        assert!(charted.contains(needed), "the dashboard charts no {needed}");
    }
}

#[test]
fn the_metrics_reference_lists_exactly_the_registered_families() {
    let page = read(&repo("docs/src/reference/manager.md"));
    let table = page
        .split("\n## Metrics\n")
        .nth(1)
        .expect("docs/src/reference/manager.md has a Metrics section");
    let table = table.split("\n## ").next().unwrap_or(table);
    let documented: BTreeSet<(String, String)> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| {
            let (name, rest) = l.split_once('`').expect("| `name` | type | labels |");
            let kind = rest
                .trim_start_matches(" |")
                .split('|')
                .next()
                .unwrap_or("");
            (name.to_owned(), kind.trim().to_owned())
        })
        .collect();
    // The book names counters as scraped (`_total`), histograms and gauges as registered.
    let registered: BTreeSet<(String, String)> = families()
        .into_iter()
        .map(|(name, kind)| match kind.as_str() {
            "counter" => (format!("{name}_total"), kind),
            _ => (name, kind),
        })
        .collect();
    let missing: Vec<_> = registered.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&registered).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/src/reference/manager.md's Metrics table differs from the registry:\n\
         registered, not documented (or another type): {missing:?}\n\
         documented, not registered: {unknown:?}"
    );
}

// The book's "Not built yet" page (docs/src/not-built-yet.md) and the reference pages' "Defined,
// not ..." sections against the product's code: every metric the page lists as registered but
// never recorded, every condition reason listed as defined but not set, and every event reason
// listed as defined but not emitted is really unused by the binaries that write to the API
// server: the manager, the webhook and the runner. (`contract` may already compute a reason for
// a kind that is not reconciled yet, e.g. a pool's `InstancesTruncated`: pure logic sets
// nothing.) A name that becomes used must leave those lists, and the page must say what is
// built, or this test fails.

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = read(&path);
            out.push((path, text));
        }
    }
}

/// The product's code that records a metric, sets a condition or emits an event.
fn product_sources() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for dir in [
        "crates/manager/src",
        "crates/webhook/src",
        "crates/runner/src",
    ] {
        sources(&repo(dir), &mut out);
    }
    out
}

/// The backticked words of `text`.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The text of the list item of `page` that starts with `**title**`.
fn item<'a>(page: &'a str, title: &str) -> &'a str {
    let start = page
        .find(&format!("- **{title}**"))
        .unwrap_or_else(|| panic!("no item {title:?} on the page"));
    let rest = &page[start + 2..];
    let end = rest
        .find("\n- ")
        .or_else(|| rest.find("\n\n"))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The section of `page` under `## title`, up to the next heading.
fn section<'a>(page: &'a str, title: &str) -> &'a str {
    let start = page
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("no section {title:?}"));
    let rest = &page[start + title.len() + 5..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// Like [`section`], but empty when the page has no such section (nothing listed under it).
fn section_or_empty<'a>(page: &'a str, title: &str) -> &'a str {
    if page.contains(&format!("\n## {title}\n")) {
        section(page, title)
    } else {
        ""
    }
}

/// The methods of `crates/manager/src/runtime/metrics.rs` that record the family registered as `name`
/// (its field of `Inner`, then every `pub fn` whose body reaches that field to create a series;
/// removing one records nothing).
fn recorders(metrics_rs: &str, name: &str) -> Vec<String> {
    let registered = metrics_rs
        .find(&format!("\"{name}\","))
        .unwrap_or_else(|| panic!("{name} is not registered in metrics.rs"));
    let after = &metrics_rs[registered..];
    let field = after
        .split("inner.")
        .nth(1)
        .and_then(|r| r.split(".clone()").next())
        .unwrap_or_else(|| panic!("no field registered as {name}"))
        .to_owned();
    metrics_rs
        .split("    pub fn ")
        .skip(1)
        .filter(|body| {
            let body = &body[..body.find("\n    }\n").unwrap_or(body.len())];
            (body.contains(&format!(".{field}\n")) || body.contains(&format!(".{field}.")))
                && body.contains("get_or_create")
        })
        .map(|body| body.split('(').next().unwrap_or("").to_owned())
        .collect()
}

/// Whether a product source (not metrics.rs itself) calls one of `methods`.
fn calls_any(code: &[(PathBuf, String)], methods: &[String]) -> bool {
    code.iter().any(|(path, text)| {
        let _ = path;
        methods.iter().any(|m| text.contains(&format!(".{m}(")))
    })
}

#[test]
fn metrics_listed_as_never_recorded_are_exactly_the_unrecorded_families() {
    let page = read(&repo("docs/src/not-built-yet.md"));
    let listed_text = if page.contains("- **Registered but never recorded.**") {
        item(&page, "Registered but never recorded.")
    } else {
        ""
    };
    let listed: BTreeSet<String> = backticked(listed_text)
        .into_iter()
        .filter(|n| n.starts_with("captf_"))
        .map(|n| n.strip_suffix("_total").unwrap_or(n).to_owned())
        .collect();
    let metrics_rs = read(&repo("crates/manager/src/runtime/metrics.rs"));
    let code = product_sources();
    let families: Vec<String> = families()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("captf_"))
        .collect();
    assert!(families.len() >= 30, "the registry has {families:?}");
    for name in &listed {
        assert!(
            families.contains(name),
            "{name} is listed but not registered"
        );
    }
    for family in families {
        let methods = recorders(&metrics_rs, &family);
        if methods.is_empty() {
            // Set once at start (build info) or counted at scrape time (jobs active): recorded.
            assert!(
                !listed.contains(&family),
                "{family} is recorded at start or scrape"
            );
            continue;
        }
        let recorded = calls_any(&code, &methods);
        assert_eq!(
            recorded,
            !listed.contains(&family),
            "{family}: recorded by the code = {recorded} ({methods:?}), but not-built-yet.md \
             lists it as never recorded = {}",
            listed.contains(&family)
        );
    }
}

/// The Rust constant of `module` in crates/api/src/constants.rs whose value is `value`.
fn constant(constants: &str, module: &str, value: &str) -> Option<String> {
    let body = constants.split(&format!("pub mod {module} {{")).nth(1)?;
    let body = &body[..body.find("\n}\n").unwrap_or(body.len())];
    body.lines().find_map(|l| {
        let l = l.trim().strip_prefix("pub const ")?;
        let (ident, rest) = l.split_once(':')?;
        rest.contains(&format!("= \"{value}\";"))
            .then(|| ident.trim().to_owned())
    })
}

/// The `(IDENT, value)` string constants of `pub mod {module}` in crates/api/src/constants.rs,
/// up to `end`.
fn declared<'a>(constants: &'a str, module: &str, end: &str) -> Vec<(&'a str, &'a str)> {
    let body = constants
        .split(&format!("pub mod {module} {{"))
        .nth(1)
        .unwrap_or_else(|| panic!("api::constants has no {module} module"));
    let body = &body[..body.find(end).unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("pub const ")?;
            let (ident, rest) = l.split_once(':')?;
            Some((ident.trim(), rest.split('"').nth(1)?))
        })
        .collect()
}

/// Asserts that every constant of `api::constants::reasons` is named (`reasons::IDENT`) or
/// spelled quoted by one of `code`'s sources.
fn every_reason_is_used(code: &[(PathBuf, String)], constants: &str) {
    let consts = declared(constants, "reasons", "\n}\n");
    assert!(consts.len() > 50, "{} reasons read", consts.len());
    for (ident, value) in consts {
        let named = format!("reasons::{ident}");
        let quoted = format!("\"{value}\"");
        assert!(
            code.iter()
                .any(|(_, text)| text.contains(&named) || text.contains(&quoted)),
            "the conditions page says every reason is set, but nothing sets {value}"
        );
    }
}

/// Asserts that no product source names `module::IDENT` for `value`, nor spells `value` quoted.
fn unused(code: &[(PathBuf, String)], constants: &str, module: &str, alias: &str, value: &str) {
    let ident = constant(constants, module, value)
        .unwrap_or_else(|| panic!("{value} is not a constant of api::constants::{module}"));
    for (path, text) in code {
        for used in [
            format!("{module}::{ident}"),
            format!("{alias}::{ident}"),
            format!("\"{value}\""),
        ] {
            assert!(
                !text.contains(&used),
                "{value} is listed as not used yet, but {} has {used}",
                path.display()
            );
        }
    }
}

#[test]
fn reasons_defined_but_not_set_and_events_not_emitted_are_used_nowhere() {
    let constants = read(&repo("crates/api/src/constants.rs"));
    let code = product_sources();
    let conditions = read(&repo("docs/src/reference/conditions.md"));
    let reasons: BTreeSet<&str> = section(&conditions, "Defined, not set yet")
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| backticked(l.split('|').nth(2).unwrap_or("")))
        .collect();
    if reasons.is_empty() {
        // The page says every reason is set: then every reason constant is used by the product
        // (the contract crate's output checks included).
        assert!(
            section(&conditions, "Defined, not set yet")
                .contains("Every condition and reason `crates/api` defines is set"),
            "the conditions page lists no reason, and does not say that every reason is set"
        );
        let mut setters = code.clone();
        sources(&repo("crates/contract/src"), &mut setters);
        every_reason_is_used(&setters, &constants);
    }
    for reason in reasons {
        unused(&code, &constants, "reasons", "reasons", reason);
    }
    let events = read(&repo("docs/src/reference/events.md"));
    let names: BTreeSet<&str> = backticked(section_or_empty(&events, "Defined, not emitted yet"))
        .into_iter()
        .filter(|n| n.starts_with(|c: char| c.is_ascii_uppercase()))
        .collect();
    for name in &names {
        // crates/manager/src/pass/conditions.rs imports the event reasons as `reason`.
        unused(&code, &constants, "events", "reason", name);
    }
    // The other way: a manager event reason no product source uses must be listed as not
    // emitted yet.
    let declared = declared(&constants, "events", "pub mod runner");
    assert!(declared.len() >= 20, "events: {declared:?}");
    for (ident, value) in declared {
        let used = code.iter().any(|(_, text)| {
            text.contains(&format!("events::{ident}"))
                || text.contains(&format!("reason::{ident}"))
                || text.contains(&format!("\"{value}\""))
        });
        assert!(
            used || names.contains(value),
            "the event {value} is emitted nowhere, but events.md does not list it as not emitted"
        );
    }
}
