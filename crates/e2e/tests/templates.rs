//! The clusterctl flavors under `templates/` (book: Templates and ClusterClass) render with
//! `clusterctl generate cluster --from` / `generate yaml --from` and the variables the book lists,
//! a missing required variable fails the render, and the rendered objects keep the book's
//! promises. No cluster is needed: clusterctl renders offline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use e2e::clusterctl::{Clusterctl, template};

use serde_json::Value;

const REQUIRED: [(&str, &str); 4] = [
    ("TERRAFORM_IDENTITY_NAME", "aws-prod"),
    (
        "TERRAFORM_CLUSTER_IMAGE",
        "registry.example/noop-cluster:v0.1.0",
    ),
    (
        "TERRAFORM_MACHINE_IMAGE",
        "registry.example/noop-machine:v0.1.0",
    ),
    (
        "TERRAFORM_MACHINEPOOL_IMAGE",
        "registry.example/noop-machinepool:v0.1.0",
    ),
];

/// clusterctl with its (empty) config in a per-process scratch directory.
fn bare() -> Clusterctl {
    let dir = std::env::temp_dir().join(format!("captf-templates-{}", std::process::id()));
    Clusterctl::new(&dir).unwrap()
}

fn clusterctl(skip: Option<&str>) -> Clusterctl {
    let mut c = bare();
    for (k, v) in REQUIRED {
        if Some(k) != skip {
            c = c.var(k, v);
        }
    }
    c
}

fn docs(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(Value::is_object)
        .collect()
}

fn kinds(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .map(|d| d["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn render(flavor: &str, skip: Option<&str>) -> anyhow::Result<Vec<Value>> {
    let out = clusterctl(skip).generate_cluster("my-cluster", &template(flavor), "team-a", 1, 2)?;
    Ok(docs(&out))
}

fn kcp_promises(kcp: &Value) {
    let spec = if kcp["kind"] == "KubeadmControlPlaneTemplate" {
        &kcp["spec"]["template"]["spec"]
    } else {
        &kcp["spec"]
    };
    assert_eq!(spec["remediation"]["maxRetry"], 3);
    assert_eq!(spec["remediation"]["retryPeriodSeconds"], 300);
    let init = &spec["kubeadmConfigSpec"]["initConfiguration"]["localAPIEndpoint"]["bindPort"];
    let join = &spec["kubeadmConfigSpec"]["joinConfiguration"]["controlPlane"]["localAPIEndpoint"]
        ["bindPort"];
    assert_eq!((init, join), (&Value::from(6443), &Value::from(6443)));
}

#[test]
fn the_default_flavor_renders_with_the_books_variables() {
    let docs = render("cluster-template.yaml", None).unwrap();
    assert_eq!(
        kinds(&docs),
        [
            "Cluster",
            "TerraformCluster",
            "KubeadmControlPlane",
            "TerraformMachineTemplate",
            "MachineDeployment",
            "TerraformMachineTemplate",
            "KubeadmConfigTemplate",
            "MachineHealthCheck",
            "MachineHealthCheck"
        ]
    );
    assert!(docs.iter().all(|d| d["metadata"]["namespace"] == "team-a"));
    assert_eq!(docs[0]["spec"]["clusterNetwork"]["apiServerPort"], 6443);
    assert_eq!(docs[1]["spec"]["source"]["image"], REQUIRED[1].1);
    assert_eq!(docs[1]["spec"]["identityRef"]["name"], "aws-prod");
    assert_eq!(docs[2]["spec"]["replicas"], 1);
    assert_eq!(docs[2]["spec"]["version"], "v1.36.3");
    kcp_promises(&docs[2]);
    assert_eq!(docs[4]["spec"]["replicas"], 2);
    assert_eq!(docs[7]["spec"]["checks"]["nodeStartupTimeoutSeconds"], 1800);
}

#[test]
fn the_machinepool_flavor_renders_a_pool_on_a_terraform_machine_pool() {
    let docs = render("cluster-template-machinepool.yaml", None).unwrap();
    let pool = docs.iter().find(|d| d["kind"] == "MachinePool").unwrap();
    assert_eq!(pool["spec"]["replicas"], 2);
    assert_eq!(
        pool["spec"]["template"]["spec"]["infrastructureRef"]["kind"],
        "TerraformMachinePool"
    );
    let tmp = docs
        .iter()
        .find(|d| d["kind"] == "TerraformMachinePool")
        .unwrap();
    assert_eq!(tmp["spec"]["source"]["image"], REQUIRED[3].1);
    assert!(!kinds(&docs).contains(&"MachineDeployment".to_owned()));
    kcp_promises(
        docs.iter()
            .find(|d| d["kind"] == "KubeadmControlPlane")
            .unwrap(),
    );
}

#[test]
fn the_clusterclass_flavor_sets_the_three_topology_variables() {
    let docs = render("cluster-template-clusterclass.yaml", None).unwrap();
    assert_eq!(kinds(&docs), ["Cluster"]);
    let topology = &docs[0]["spec"]["topology"];
    assert_eq!(topology["classRef"]["name"], "noop");
    let vars: Vec<(String, String)> = topology["variables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_owned(),
                v["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        vars,
        [
            ("identityName".to_owned(), REQUIRED[0].1.to_owned()),
            ("clusterImage".to_owned(), REQUIRED[1].1.to_owned()),
            ("machineImage".to_owned(), REQUIRED[2].1.to_owned())
        ]
    );
    assert_eq!(topology["workers"]["machineDeployments"][0]["replicas"], 2);
}

#[test]
fn the_noop_clusterclass_has_no_variables_placeholder_images_and_no_identity() {
    let text = std::fs::read_to_string(template("clusterclass-noop.yaml")).unwrap();
    assert!(
        !text.contains("${"),
        "clusterclass-noop.yaml carries no clusterctl variables"
    );
    let docs = docs(&text);
    assert!(docs.iter().all(|d| d["metadata"]["namespace"].is_null()));
    for d in docs.iter().filter(|d| {
        d["kind"]
            .as_str()
            .is_some_and(|k| k.starts_with("Terraform"))
    }) {
        assert_eq!(
            d["spec"]["template"]["spec"]["source"]["image"],
            "example.invalid/captf/set-by-clusterclass:unset"
        );
    }
    // The identity comes from the class's identity patch alone: the template names none (only a
    // TerraformCluster must), so no placeholder identity can reach a cluster.
    let cluster_template = docs
        .iter()
        .find(|d| d["kind"] == "TerraformClusterTemplate")
        .unwrap();
    assert!(
        cluster_template["spec"]["template"]["spec"]["identityRef"].is_null(),
        "{cluster_template:#}"
    );
    assert!(!text.contains("name: set-by-clusterclass"));
    let class = docs.iter().find(|d| d["kind"] == "ClusterClass").unwrap();
    let required: Vec<&str> = class["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["required"] == true)
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(required, ["identityName", "clusterImage", "machineImage"]);
    kcp_promises(
        docs.iter()
            .find(|d| d["kind"] == "KubeadmControlPlaneTemplate")
            .unwrap(),
    );
}

#[test]
fn a_missing_required_variable_fails_the_render() {
    for (flavor, vars) in [
        ("cluster-template.yaml", &REQUIRED[..3]),
        ("cluster-template-clusterclass.yaml", &REQUIRED[..3]),
        ("cluster-template-machinepool.yaml", &REQUIRED[..]),
    ] {
        for (name, _) in vars {
            let err = render(flavor, Some(name)).unwrap_err().to_string();
            assert!(err.contains(name), "{flavor} without {name}: {err}");
        }
    }
}

#[test]
fn the_identity_template_renders_a_secret_and_an_identity_for_the_namespace() {
    let out = clusterctl(None)
        .var("NAMESPACE", "team-a")
        .generate_yaml(&template("identity.yaml"))
        .unwrap();
    let docs = docs(&out);
    assert_eq!(kinds(&docs), ["Secret", "TerraformClusterIdentity"]);
    assert_eq!(docs[0]["metadata"]["namespace"], "captf-system");
    assert_eq!(docs[1]["spec"]["secretRef"]["name"], "aws-prod");
    assert_eq!(docs[1]["spec"]["allowedNamespaces"]["list"][0], "team-a");
    let err = bare()
        .var("NAMESPACE", "team-a")
        .generate_yaml(&template("identity.yaml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("TERRAFORM_IDENTITY_NAME"), "{err}");
}

#[test]
fn the_keyless_identity_template_renders_an_opted_in_account_and_a_keyless_identity() {
    let out = clusterctl(None)
        .var("NAMESPACE", "team-a")
        .var("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/captf")
        .generate_yaml(&template("identity-keyless.yaml"))
        .unwrap();
    let docs = docs(&out);
    assert_eq!(kinds(&docs), ["ServiceAccount", "TerraformClusterIdentity"]);
    assert_eq!(docs[0]["metadata"]["name"], "captf-cloud");
    assert_eq!(docs[0]["metadata"]["namespace"], "team-a");
    assert_eq!(docs[0]["metadata"]["labels"]["captf.io/runner"], "true");
    let identity: api::identity::TerraformClusterIdentity =
        serde_json::from_value(docs[1].clone()).unwrap();
    let keyless = identity.spec.workload_identity.as_ref().unwrap();
    assert!(identity.spec.secret_ref.is_none());
    assert_eq!(keyless.service_account_name, "captf-cloud");
    assert_eq!(keyless.audience, "sts.amazonaws.com");
    assert_eq!(
        keyless.aws.as_ref().unwrap().role_arn,
        "arn:aws:iam::123456789012:role/captf"
    );
    assert_eq!(
        identity.spec.allowed_namespaces.unwrap().list.unwrap(),
        ["team-a"]
    );
    let err = clusterctl(None)
        .var("NAMESPACE", "team-a")
        .generate_yaml(&template("identity-keyless.yaml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("AWS_ROLE_ARN"), "{err}");
}
