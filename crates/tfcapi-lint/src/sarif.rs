//! SARIF 2.1.0 output (`--format sarif`), so a CI system can show findings inline: one run, every
//! check as a rule with its help text, every finding as a result with its physical location.

use crate::checks::{self, CHECKS};
use crate::report::{Report, Severity};
use serde_json::{Value, json};

const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The book's pages at this release's tag: where a SARIF viewer links the tool and each rule.
fn book(page: &str) -> String {
    format!(
        "https://github.com/captf-io/cluster-api-provider-terraform/blob/v{}/docs/src/{page}",
        env!("CARGO_PKG_VERSION")
    )
}

fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

fn rule(check: &checks::Check) -> Value {
    let default_level = check.severities.first().copied().unwrap_or(Severity::Error);
    let roles: Vec<&str> = check.roles.iter().map(|r| r.as_str()).collect();
    json!({
        "id": check.id,
        "name": check.id.replace(['/', '-'], "_"),
        "shortDescription": { "text": check.summary },
        "fullDescription": { "text": check.summary },
        "help": {
            "text": format!("{}\nExample:\n{}\nFix: {}", check.summary, check.example, check.fix),
            "markdown": format!(
                "{}\n\nExample that triggers it:\n\n```hcl\n{}\n```\n\nFix: {}",
                check.summary, check.example, check.fix
            ),
        },
        "helpUri": book("reference/tfcapi-lint-cli.md"),
        "defaultConfiguration": { "level": level(default_level) },
        "properties": { "roles": roles },
    })
}

/// Renders a report as a SARIF 2.1.0 log.
pub fn render(report: &Report) -> String {
    let rules: Vec<Value> = CHECKS.iter().map(rule).collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .chain(&report.ignored)
        .map(|f| {
            let mut physical = json!({ "artifactLocation": { "uri": f.file } });
            if let Some(line) = f.line {
                physical["region"] = json!({ "startLine": line.max(1) });
            }
            let mut result = json!({
                "ruleId": f.id,
                "level": level(f.severity),
                "message": { "text": f.message },
                "locations": [{ "physicalLocation": physical }],
            });
            if let Some(index) = CHECKS.iter().position(|c| c.id == f.id) {
                result["ruleIndex"] = json!(index);
            }
            if let Some(platform) = &f.platform {
                result["properties"] = json!({ "platform": platform });
            }
            // An inline ignore is a suppression in source, with its reason as the justification.
            if let Some(reason) = &f.ignored {
                result["suppressions"] = json!([{ "kind": "inSource", "justification": reason }]);
            }
            result
        })
        .collect();
    let log = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "tfcapi-lint",
                    "version": env!("CARGO_PKG_VERSION"),
                    "informationUri": book("tfcapi-lint.md"),
                    "rules": rules,
                }
            },
            "results": results,
        }],
    });
    serde_json::to_string_pretty(&log).unwrap_or_else(|_| String::from("{}")) + "\n"
}
