// Pins the modules whose CRDs the manifest tests install for the third-party kinds config/ uses:
// cert-manager (Certificate, Issuer; deploy/crds) and the Prometheus Operator (ServiceMonitor;
// example/prometheus-operator-crd). Only downloaded (`go mod download`), never built; see
// crates/testenv/src/third_party.rs.
module captf.dev/hack/crds

go 1.26

require (
	github.com/cert-manager/cert-manager v1.19.2
	github.com/prometheus-operator/prometheus-operator v0.85.0
)
