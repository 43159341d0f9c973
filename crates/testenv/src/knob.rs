//! The knob: a value outside a module's inputs that a test flips to stand for reality changing
//! (an instance drifting, ailing or vanishing). Module variants read it as a module reads anything
//! it does not own, through `terraform_remote_state` of the `kubernetes` backend: the output
//! `knob` of the state Secret [`KNOB_SECRET`] in the object's namespace. The test writes that
//! Secret with [`knob_state`].

use std::io::Write as _;

/// The name of the state Secret whose output `knob` the variants read.
pub const KNOB_SECRET: &str = "tfstate-default-drift-knob";

/// The Lease the `kubernetes` backend creates beside [`KNOB_SECRET`] when a module reads it: the
/// test's to remove with the knob.
pub const KNOB_LEASE: &str = "lock-tfstate-default-drift-knob";

/// Terraform that reads the knob into `local.knob` (`steady` while there is no knob).
pub const KNOB_TF: &str = r#"
data "terraform_remote_state" "knob" {
  backend = "kubernetes"
  config = {
    secret_suffix     = "drift-knob"
    namespace         = var.captf_object.namespace
    in_cluster_config = true
  }
  defaults = { knob = "steady" }
}

locals {
  knob = data.terraform_remote_state.knob.outputs.knob
}
"#;

/// The gzipped state document whose output `knob` is `value`: the `tfstate` key of
/// [`KNOB_SECRET`].
pub fn knob_state(value: &str) -> std::io::Result<Vec<u8>> {
    let doc = serde_json::json!({"version": 4, "terraform_version": "1.12.6", "serial": 1,
                                 "lineage": "drift-knob", "resources": [],
                                 "outputs": {"knob": {"value": value, "type": "string"}}});
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(doc.to_string().as_bytes())?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    #[test]
    fn the_knob_state_carries_the_value_as_its_output() {
        let gz = super::knob_state("terminated").unwrap();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["outputs"]["knob"]["value"], "terminated");
        assert_eq!(doc["version"], 4);
    }
}
