//! The harness of the runner's integration tests: the real runner binary as a host process, real
//! OpenTofu (`tofu` built from source by `hack/testbin.sh`) as the image's runtime, a temporary
//! `/captf`-like layout (every path is a flag), and the real `kubernetes` backend against the
//! test environment's API server (`config_path` set to its admin kubeconfig through
//! `--backend-config`). Events are posted with the same admin kubeconfig on a ConfigMap that
//! stands for the owning object.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc
)]

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use testenv::TestEnv;

/// The test module: two built-in `terraform_data` resources, no provider to install.
pub const MODULE: &str = r#"
variable "name" {
  type = string
}

variable "generation" {
  type    = string
  default = "1"
}

variable "extra" {
  type    = bool
  default = false
}

variable "password" {
  type    = string
  default = ""
}

resource "terraform_data" "this" {
  input            = var.name
  triggers_replace = [var.generation]
}

resource "terraform_data" "extra" {
  count = var.extra ? 1 : 0
  input = "extra"
}

output "name" {
  value = terraform_data.this.output
}
"#;

/// The generated root for [`MODULE`], shaped like the contract's render: a partial `kubernetes`
/// backend, one variable per input, `module "role"` on `../../module`, sensitive re-exports.
pub const MAIN_TF_JSON: &str = r#"{
  "terraform": {"backend": {"kubernetes": {}}},
  "variable": {
    "name": {"type": "string"},
    "generation": {"type": "string"},
    "extra": {"type": "bool"},
    "password": {"type": "string"}
  },
  "module": {
    "role": {
      "source": "../../module",
      "name": "${var.name}",
      "generation": "${var.generation}",
      "extra": "${var.extra}",
      "password": "${var.password}"
    }
  },
  "output": {"name": {"value": "${module.role.name}", "sensitive": true}}
}"#;

/// Values for [`MAIN_TF_JSON`].
pub fn tfvars(name: &str, generation: &str, extra: bool) -> String {
    json!({"name": name, "generation": generation, "extra": extra, "password": ""}).to_string()
}

/// The OpenTofu test binary, or `None` (the test is skipped with a message).
pub fn tofu() -> Option<PathBuf> {
    match testenv::testbin::path("tofu") {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("SKIPPED: {e:#}");
            None
        }
    }
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

/// One test's layout, namespace, state suffix and event object.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub captf: PathBuf,
    pub ns: String,
    pub suffix: String,
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    pub event_object: String,
    pub object_uid: String,
    pub tofu: PathBuf,
}

/// How one run ended.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// The result document, from `--result` (and checked equal to stdout's last line).
    pub result: Value,
}

impl Run {
    /// The names of the steps after `version -json`, which every run reports first.
    pub fn step_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.result["steps"]
            .as_array()
            .map(|s| {
                s.iter()
                    .map(|x| x["name"].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default();
        if !names.is_empty() {
            assert_eq!(names.remove(0), "version", "the first step is version");
        }
        names
    }

    pub fn error_kind(&self) -> Option<&str> {
        self.result["error"]["kind"].as_str()
    }

    /// The runner's own log lines (JSON lines whose target is the runner's).
    pub fn runner_log_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| {
                serde_json::from_str::<Value>(l).is_ok_and(|v| {
                    v["target"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("runner"))
                })
            })
            .collect()
    }

    pub fn assert_ok(&self) {
        assert_eq!(
            self.code, 0,
            "runner failed: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.result, self.stdout, self.stderr
        );
        assert!(self.result["error"].is_null(), "{}", self.result);
    }
}

impl Fixture {
    /// A fixture with `module` at `<captf>/module`, the rendered root in `<captf>/config`, the
    /// `tofu` binary linked at `<captf>/runtime`, and an empty provider mirror when `mirror`.
    pub async fn new(prefix: &str, module: &str, tfvars: &str, mirror: bool) -> Option<Self> {
        let tofu = tofu()?;
        let env = TestEnv::shared().expect("test environment");
        let ns = env.namespace(prefix).await.expect("namespace");
        let client = env.client().await.expect("client");
        let dir = tempfile::Builder::new()
            .prefix("captf-runner-test-")
            .tempdir()
            .expect("tempdir");
        let captf = dir.path().join("captf");
        std::fs::create_dir_all(captf.join("module")).unwrap();
        std::fs::create_dir_all(captf.join("config")).unwrap();
        std::fs::write(captf.join("module/main.tf"), module).unwrap();
        std::fs::write(captf.join("config/main.tf.json"), MAIN_TF_JSON).unwrap();
        std::fs::write(captf.join("config/terraform.tfvars.json"), tfvars).unwrap();
        std::os::unix::fs::symlink(&tofu, captf.join("runtime")).unwrap();
        if mirror {
            std::fs::create_dir_all(captf.join("providers")).unwrap();
        }
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let cm: ConfigMap = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}
        }))
        .unwrap();
        let cm = cms.create(&PostParams::default(), &cm).await.unwrap();
        let uid = cm.metadata.uid.unwrap();
        let suffix =
            contract::names::state_suffix(&ns, contract::names::ObjectKind::Cluster, prefix);
        Some(Self {
            event_object: format!("v1/ConfigMap/{ns}/owner/{uid}"),
            object_uid: uid,
            kubeconfig: env.endpoints().kubeconfig.clone(),
            dir,
            captf,
            ns,
            suffix,
            client,
            tofu,
        })
    }

    pub fn set_tfvars(&self, tfvars: &str) {
        std::fs::write(self.captf.join("config/terraform.tfvars.json"), tfvars).unwrap();
    }

    pub fn set_module(&self, module: &str) {
        std::fs::write(self.captf.join("module/main.tf"), module).unwrap();
    }

    /// The flags every run gets, as the Job passes them (paths moved into the temp layout,
    /// `config_path` instead of `in_cluster_config`), plus `extra`; a fresh work directory per
    /// run, as a fresh pod's emptyDir.
    pub fn args(&self, op: &str, extra: &[&str]) -> (Vec<String>, PathBuf) {
        let n = RUNS.fetch_add(1, Ordering::SeqCst);
        let c = |p: &str| self.captf.join(p).display().to_string();
        let result = self.dir.path().join(format!("result-{n}.json"));
        let mut args = vec![
            "run".to_owned(),
            format!("--op={op}"),
            format!("--bin={}", c("runtime")),
            "--image=registry.test/captf/module:v1".to_owned(),
            format!("--module={}", c("module")),
            format!("--providers={}", c("providers")),
            format!("--workdir={}", c(&format!("work-{n}"))),
            format!("--config={}", c("config")),
            "--lock-timeout=20s".to_owned(),
            "--stop-timeout=60s".to_owned(),
            format!("--backend-config=secret_suffix={}", self.suffix),
            format!("--backend-config=namespace={}", self.ns),
            format!("--backend-config=config_path={}", self.kubeconfig.display()),
            r#"--backend-config=labels={"captf.io/managed"="true","clusterctl.cluster.x-k8s.io/move"=""}"#.to_owned(),
            format!("--result={}", result.display()),
            "--logging-format=json".to_owned(),
            format!("--event-object={}", self.event_object),
            "--job-name=captf-c-test-apply-a1-abcdef".to_owned(),
            format!("--events-kubeconfig={}", self.kubeconfig.display()),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        (args, result)
    }

    /// The runner command for `args`, with the environment a careless image or Job might leak:
    /// every planted `TF_*`/`KUBE_*` variable must be dropped before the runtime sees it.
    pub fn command(&self, args: &[String]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_runner"));
        cmd.args(args)
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("KUBE_NAMESPACE", &self.ns)
            .env("TF_LOG", "TRACE")
            .env("TF_WORKSPACE", "elsewhere")
            .env("TF_CLI_ARGS_plan", "-destroy")
            .env("TF_VAR_name", "planted-from-the-environment")
            .env("KUBE_CONFIG_PATH", "/nonexistent/kubeconfig")
            .env("CHECKPOINT_DISABLE", "1")
            .kill_on_drop(true);
        cmd
    }

    /// Runs the runner to its end.
    pub async fn run(&self, op: &str, extra: &[&str]) -> Run {
        let (args, result) = self.args(op, extra);
        let out = self.command(&args).output().await.expect("runner starts");
        finish(&out, &result)
    }

    pub fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// The decompressed state document, if the state Secret exists.
    pub async fn state(&self) -> Option<Value> {
        let s = self
            .secrets()
            .get_opt(&format!("tfstate-default-{}", self.suffix))
            .await
            .unwrap()?;
        let gz = s.data?.remove("tfstate")?.0;
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .unwrap();
        Some(serde_json::from_str(&text).unwrap())
    }

    /// Managed resource instance addresses in the state (module resources only).
    pub async fn state_addresses(&self) -> Vec<String> {
        let Some(state) = self.state().await else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for r in state["resources"].as_array().cloned().unwrap_or_default() {
            let base = format!(
                "{}.{}.{}",
                r["module"].as_str().unwrap_or(""),
                r["type"].as_str().unwrap_or(""),
                r["name"].as_str().unwrap_or("")
            );
            for inst in r["instances"].as_array().cloned().unwrap_or_default() {
                out.push(match &inst["index_key"] {
                    Value::Null => base.clone(),
                    key => format!("{base}[{key}]"),
                });
            }
        }
        out
    }

    /// The lock Lease's holder, if the Lease exists and is held.
    pub async fn lock_holder(&self) -> Option<String> {
        self.leases()
            .get_opt(&format!("lock-tfstate-default-{}", self.suffix))
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
    }

    /// The runner events on the owning object, oldest first, as `(reason, type, note)`.
    pub async fn events(&self) -> Vec<(String, String, String)> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let mut list: Vec<Event> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(&self.object_uid)
                    && e.reporting_controller.as_deref() == Some("captf.io/runner")
            })
            .collect();
        list.sort_by(|a, b| {
            let t = |e: &Event| e.event_time.as_ref().map(|t| t.0);
            t(a).cmp(&t(b)).then(a.metadata.name.cmp(&b.metadata.name))
        });
        list.into_iter()
            .map(|e| {
                (
                    e.reason.unwrap_or_default(),
                    e.type_.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Deletes every runner event on the owning object (so the next run's can be told apart).
    /// The note of the first event with `reason`; fails the test when there is none.
    pub async fn event_note(&self, reason: &str) -> String {
        let events = self.events().await;
        match events.into_iter().find(|e| e.0 == reason) {
            Some(e) => e.2,
            None => panic!("no {reason} event"),
        }
    }

    pub async fn clear_events(&self) {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let _ = api
            .delete_collection(&kube::api::DeleteParams::default(), &ListParams::default())
            .await;
    }
}

/// Reads the result document and checks it is also stdout's last line.
pub fn finish(out: &std::process::Output, result: &Path) -> Run {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let file = std::fs::read_to_string(result).unwrap_or_default();
    let last = stdout.lines().last().unwrap_or("").to_owned();
    assert!(
        file.len() <= 4096,
        "result document over 4096 bytes: {}",
        file.len()
    );
    assert_eq!(
        file, last,
        "the result file and stdout's last line differ\n--- stderr\n{stderr}"
    );
    let result: Value = serde_json::from_str(&file)
        .unwrap_or_else(|e| panic!("result is not JSON ({e}): {file:?}\n--- stderr\n{stderr}"));
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout,
        stderr,
        result,
    }
}
