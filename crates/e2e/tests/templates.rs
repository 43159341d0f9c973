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

/// The objects of the default flavor, in order; the libvirt flavor has the same.
const DEFAULT_FLAVOR_KINDS: [&str; 9] = [
    "Cluster",
    "TerraformCluster",
    "KubeadmControlPlane",
    "TerraformMachineTemplate",
    "MachineDeployment",
    "TerraformMachineTemplate",
    "KubeadmConfigTemplate",
    "MachineHealthCheck",
    "MachineHealthCheck",
];

#[test]
fn the_default_flavor_renders_with_the_books_variables() {
    let docs = render("cluster-template.yaml", None).unwrap();
    assert_eq!(kinds(&docs), DEFAULT_FLAVOR_KINDS);
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
        ("cluster-template-libvirt.yaml", &REQUIRED[..3]),
        ("cluster-template-docker.yaml", &REQUIRED[..3]),
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

/// The names of the `variable` blocks a module under `modules/` declares.
fn module_variables(module: &str) -> Vec<String> {
    let path = testenv::env::repo_root()
        .join("modules")
        .join(module)
        .join("variables.tf");
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("variable \""))
        .map(|l| l.split('"').next().unwrap().to_owned())
        .collect()
}

/// The inline `spec.variables` a flavor sets on a Terraform object: accepted by admission's rule
/// for the role, and every one declared by the flavor's module of that role.
fn module_flavor_variables(spec: &Value, kind: contract::names::ObjectKind, module: &str) -> Value {
    let vars = spec["variables"].clone();
    contract::variables::check_inline_variables(kind, &vars).unwrap();
    let declared = module_variables(module);
    for name in vars.as_object().unwrap().keys() {
        assert!(
            declared.contains(name),
            "{module} declares no variable {name}"
        );
    }
    vars
}

/// The kubelet of every node the libvirt and docker flavors boot registers as its Machine's name
/// with the providerID the flavor's machine module reports (`<scheme>:///<instance id>`), both
/// read from the NoCloud seed the module writes (instance-id and local-hostname).
fn registers_with_the_seeds_ids(registration: &Value, scheme: &str) {
    assert_eq!(registration["name"], "{{ ds.meta_data.local_hostname }}");
    let value = format!("{scheme}:///{{{{ ds.meta_data.instance_id }}}}");
    assert_eq!(
        registration["kubeletExtraArgs"],
        serde_json::json!([{ "name": "provider-id", "value": value }])
    );
}

#[test]
fn the_libvirt_flavor_renders_on_the_libvirt_modules_with_its_defaults() {
    let docs = render("cluster-template-libvirt.yaml", None).unwrap();
    assert_eq!(kinds(&docs), DEFAULT_FLAVOR_KINDS);
    assert!(docs.iter().all(|d| d["metadata"]["namespace"] == "team-a"));
    assert_eq!(docs[0]["spec"]["clusterNetwork"]["apiServerPort"], 6443);
    assert_eq!(
        docs[0]["spec"]["clusterNetwork"]["pods"]["cidrBlocks"][0],
        "192.168.0.0/16"
    );

    // The objects are the API's own kinds (this deserialises them as the manager does).
    let cluster: api::cluster::TerraformCluster = serde_json::from_value(docs[1].clone()).unwrap();
    assert_eq!(cluster.spec.workspace.source.image, REQUIRED[1].1);
    assert_eq!(
        cluster.spec.workspace.identity_ref.unwrap().name,
        "aws-prod"
    );
    let vars = module_flavor_variables(
        &docs[1]["spec"],
        contract::names::ObjectKind::Cluster,
        "libvirt/cluster",
    );
    assert_eq!(
        vars,
        serde_json::json!({ "network_cidr": "10.77.0.0/24", "pool_root": "/var/lib/libvirt/captf" })
    );

    let kcp = &docs[2];
    assert_eq!(kcp["spec"]["replicas"], 1);
    assert_eq!(kcp["spec"]["version"], "v1.36.3");
    kcp_promises(kcp);
    let kubeadm = &kcp["spec"]["kubeadmConfigSpec"];
    registers_with_the_seeds_ids(&kubeadm["initConfiguration"]["nodeRegistration"], "libvirt");
    registers_with_the_seeds_ids(&kubeadm["joinConfiguration"]["nodeRegistration"], "libvirt");
    registers_with_the_seeds_ids(
        &docs[6]["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"],
        "libvirt",
    );
    assert_eq!(
        docs[6]["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]["imagePullPolicy"],
        "IfNotPresent"
    );

    for (i, vcpu, memory) in [(3, 2, 4096), (5, 2, 4096)] {
        let template: api::machine::TerraformMachineTemplate =
            serde_json::from_value(docs[i].clone()).unwrap();
        assert_eq!(
            template.spec.template.spec.workspace.source.image,
            REQUIRED[2].1
        );
        let vars = module_flavor_variables(
            &docs[i]["spec"]["template"]["spec"],
            contract::names::ObjectKind::Machine,
            "libvirt/machine",
        );
        assert_eq!(
            vars,
            serde_json::json!({
                "vcpu": vcpu, "memory_mib": memory, "disk_gib": 20, "base_volume_pool": "default"
            })
        );
    }
    assert_eq!(docs[4]["spec"]["replicas"], 2);
    assert_eq!(docs[7]["spec"]["checks"]["nodeStartupTimeoutSeconds"], 1800);

    // The machine module reports exactly the providerID the kubelet registers with.
    let machine =
        std::fs::read_to_string(testenv::env::repo_root().join("modules/libvirt/machine/main.tf"))
            .unwrap();
    assert!(machine.contains(r#"provider_id = "libvirt:///${local.instance_id}""#));
    assert!(machine.contains(r#""instance-id"    = local.instance_id"#));
    assert!(machine.contains(r#""local-hostname" = var.machine_name"#));
}

#[test]
fn the_libvirt_flavors_variables_override_its_defaults() {
    let out = clusterctl(None)
        .var("LIBVIRT_NETWORK_CIDR", "10.78.0.0/24")
        .var("LIBVIRT_POOL_ROOT", "/srv/libvirt")
        .var("LIBVIRT_BASE_VOLUME_POOL", "images")
        .var("LIBVIRT_CONTROL_PLANE_VCPU", "4")
        .var("LIBVIRT_CONTROL_PLANE_MEMORY_MIB", "8192")
        .var("LIBVIRT_WORKER_VCPU", "3")
        .var("LIBVIRT_WORKER_MEMORY_MIB", "6144")
        .var("LIBVIRT_DISK_GIB", "40")
        .generate_cluster(
            "my-cluster",
            &template("cluster-template-libvirt.yaml"),
            "team-a",
            3,
            1,
        )
        .unwrap();
    let docs = docs(&out);
    assert_eq!(
        docs[1]["spec"]["variables"],
        serde_json::json!({ "network_cidr": "10.78.0.0/24", "pool_root": "/srv/libvirt" })
    );
    assert_eq!(
        docs[3]["spec"]["template"]["spec"]["variables"],
        serde_json::json!({ "vcpu": 4, "memory_mib": 8192, "disk_gib": 40, "base_volume_pool": "images" })
    );
    assert_eq!(
        docs[5]["spec"]["template"]["spec"]["variables"],
        serde_json::json!({ "vcpu": 3, "memory_mib": 6144, "disk_gib": 40, "base_volume_pool": "images" })
    );
    assert_eq!(docs[2]["spec"]["replicas"], 3);
}

fn libvirt_identity(skip: Option<&str>) -> anyhow::Result<String> {
    let mut c = clusterctl(None).var("NAMESPACE", "team-a");
    for (k, v) in [
        ("LIBVIRT_HOST", "virt.example"),
        ("LIBVIRT_SSH_PRIVATE_KEY_B64", "a2V5Cg=="),
        ("LIBVIRT_KNOWN_HOSTS_B64", "aG9zdHMK"),
    ] {
        if Some(k) != skip {
            c = c.var(k, v);
        }
    }
    c.generate_yaml(&template("identity-libvirt.yaml"))
}

#[test]
fn the_libvirt_identity_template_renders_the_ssh_connection_for_the_modules() {
    let docs = docs(&libvirt_identity(None).unwrap());
    assert_eq!(kinds(&docs), ["Secret", "TerraformClusterIdentity"]);
    let secret = &docs[0];
    assert_eq!(secret["metadata"]["name"], "aws-prod");
    assert_eq!(secret["metadata"]["namespace"], "captf-system");
    // The URI names the key and known_hosts where the Job mounts the Secret's keys.
    assert_eq!(
        secret["stringData"]["LIBVIRT_DEFAULT_URI"],
        "qemu+ssh://captf@virt.example/system?sshauth=privkey\
         &keyfile=/var/run/captf/credentials/ssh-privatekey\
         &knownhosts=/var/run/captf/credentials/known_hosts"
    );
    assert_eq!(secret["data"]["ssh-privatekey"], "a2V5Cg==");
    assert_eq!(secret["data"]["known_hosts"], "aG9zdHMK");
    let identity: api::identity::TerraformClusterIdentity =
        serde_json::from_value(docs[1].clone()).unwrap();
    let secret_ref = identity.spec.secret_ref.unwrap();
    assert_eq!(
        (secret_ref.name.as_str(), secret_ref.namespace.as_str()),
        ("aws-prod", "captf-system")
    );
    assert_eq!(
        identity.spec.allowed_namespaces.unwrap().list.unwrap(),
        ["team-a"]
    );
    for name in [
        "LIBVIRT_HOST",
        "LIBVIRT_SSH_PRIVATE_KEY_B64",
        "LIBVIRT_KNOWN_HOSTS_B64",
    ] {
        let err = libvirt_identity(Some(name)).unwrap_err().to_string();
        assert!(err.contains(name), "without {name}: {err}");
    }
}

/// The docker flavor: the default flavor's objects on the docker modules, its variables declared
/// by them, every node registering with the providerID the docker machine module reports, the
/// two Docker-host settings (SystemVerification skipped; kube-proxy's conntrack maximum patched
/// by the init node), and no machine variables (the node image follows the version).
#[test]
fn the_docker_flavor_renders_on_the_docker_modules_with_its_defaults() {
    let docs = render("cluster-template-docker.yaml", None).unwrap();
    assert_eq!(kinds(&docs), DEFAULT_FLAVOR_KINDS);
    assert!(docs.iter().all(|d| d["metadata"]["namespace"] == "team-a"));
    let cluster: api::cluster::TerraformCluster = serde_json::from_value(docs[1].clone()).unwrap();
    assert_eq!(cluster.spec.workspace.source.image, REQUIRED[1].1);
    let vars = module_flavor_variables(
        &docs[1]["spec"],
        contract::names::ObjectKind::Cluster,
        "docker/cluster",
    );
    assert_eq!(
        vars,
        serde_json::json!({
            "network_cidr": "172.31.0.0/24",
            "load_balancer_host_ip": "172.31.0.1",
            "load_balancer_host_port": 6443
        })
    );

    let kcp = &docs[2];
    kcp_promises(kcp);
    let kubeadm = &kcp["spec"]["kubeadmConfigSpec"];
    let worker = &docs[6]["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"];
    for registration in [
        &kubeadm["initConfiguration"]["nodeRegistration"],
        &kubeadm["joinConfiguration"]["nodeRegistration"],
        worker,
    ] {
        registers_with_the_seeds_ids(registration, "docker");
        assert_eq!(
            registration["ignorePreflightErrors"],
            serde_json::json!(["SystemVerification"])
        );
    }
    assert_eq!(
        kubeadm["postKubeadmCommands"],
        serde_json::json!(["/usr/local/bin/captf-kube-proxy-conntrack"])
    );
    let script = kubeadm["files"][0]["content"].as_str().unwrap();
    assert!(script.contains("maxPerCore: 0"), "{script}");
    for i in [3, 5] {
        let template: api::machine::TerraformMachineTemplate =
            serde_json::from_value(docs[i].clone()).unwrap();
        assert_eq!(
            template.spec.template.spec.workspace.source.image,
            REQUIRED[2].1
        );
        assert!(docs[i]["spec"]["template"]["spec"]["variables"].is_null());
    }

    let machine =
        std::fs::read_to_string(testenv::env::repo_root().join("modules/docker/machine/main.tf"))
            .unwrap();
    assert!(machine.contains(r#"provider_id = "docker:///${local.instance_id}""#));
    assert!(machine.contains(r#""instance-id"    = local.instance_id"#));
}
