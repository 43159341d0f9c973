//! The checks every workload spec shares, wherever it appears (`spec` of a TerraformCluster,
//! TerraformMachine or TerraformMachinePool, `spec.template.spec` of their templates): the image
//! reference, the variables, the variable sources and the jobs policy (spec: Security Model,
//! Module Variables, Tuning Jobs). On UPDATE each runs only when its field changed.

use api::workload::WorkspaceSpec;
use contract::names::ObjectKind;

use super::{Rule, Violation, changed, jobs, variables};
use crate::image;

/// Checks `spec.source.image` at `path`: a malformed reference is denied; one without a tag or a
/// digest is valid syntax (Security Model) and admitted with a warning.
pub fn check_image(path: &str, reference: &str, out: &mut Vec<Violation>) {
    match image::parse(reference) {
        Err(e) => out.push(Violation::new(
            Rule::ImageReference,
            format!("{path} {reference:?} is not a valid image reference: {e}"),
        )),
        Ok(r) if !r.names_version() => out.push(Violation::warning(
            Rule::ImageReference,
            format!(
                "{path} {reference:?} names neither a tag nor a digest: the runtime pulls latest, which can move; pin a tag or a digest"
            ),
        )),
        Ok(_) => {}
    }
}

/// Checks the shared workload spec at `prefix` (`spec` or `spec.template.spec`) for the role of
/// `kind`, against `old` on UPDATE.
pub fn check_workspace(
    prefix: &str,
    kind: ObjectKind,
    new: &WorkspaceSpec,
    old: Option<&WorkspaceSpec>,
    out: &mut Vec<Violation>,
) {
    if changed(&new.source.image, old.map(|o| &o.source.image)) {
        check_image(&format!("{prefix}.source.image"), &new.source.image, out);
    }
    if let Some(vars) = &new.variables
        && changed(&new.variables, old.map(|o| &o.variables))
    {
        variables::check_inline(&format!("{prefix}.variables"), kind, vars, out);
    }
    if let Some(sources) = &new.variables_from
        && changed(&new.variables_from, old.map(|o| &o.variables_from))
    {
        variables::check_sources(&format!("{prefix}.variablesFrom"), sources, out);
    }
    if let Some(policy) = &new.jobs
        && changed(&new.jobs, old.map(|o| &o.jobs))
    {
        jobs::check_job_policy(&format!("{prefix}.jobs"), policy, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::shared::{JobPolicy, Source};

    fn ws(image: &str) -> WorkspaceSpec {
        WorkspaceSpec {
            source: Source {
                image: image.into(),
                image_pull_policy: None,
            },
            ..WorkspaceSpec::default()
        }
    }

    fn run(new: &WorkspaceSpec, old: Option<&WorkspaceSpec>) -> Vec<Violation> {
        let mut out = Vec::new();
        check_workspace("spec", ObjectKind::Cluster, new, old, &mut out);
        out
    }

    #[test]
    fn an_image_without_tag_or_digest_is_admitted_with_a_warning() {
        let v = run(&ws("ghcr.io/example/mod"), None);
        assert_eq!(
            v,
            [Violation::warning(
                Rule::ImageReference,
                "spec.source.image \"ghcr.io/example/mod\" names neither a tag nor a digest: the runtime pulls latest, which can move; pin a tag or a digest"
            )]
        );
        assert!(run(&ws("ghcr.io/example/mod:v1"), None).is_empty());
        let bad = run(&ws("ghcr.io/Example/mod:v1"), None);
        assert!(bad.len() == 1 && !bad[0].warning);
    }

    #[test]
    fn unchanged_fields_are_not_rechecked_on_update() {
        let mut old = ws("Not-Valid");
        old.jobs = Some(JobPolicy {
            lock_timeout_seconds: Some(10),
            active_deadline_seconds: Some(5),
            ..JobPolicy::default()
        });
        let new = old.clone();
        assert!(run(&new, Some(&old)).is_empty());
        let mut edited = new.clone();
        edited.source.image = "Still-Not-Valid".into();
        assert_eq!(run(&edited, Some(&old)).len(), 1);
    }
}
