//! BrowserConfig status (docs/behaviour.md, "BrowserConfig validation and status"): `version`,
//! `entries`, `lastUpdated`, `observedGeneration`, `prePull` and the `Valid` / `Ready` /
//! `PodFieldsRemoved` / `Conflict` / `PrePulled` conditions, derived from the local validation,
//! the cluster's dry-run verdicts (or its refusal to judge), the fields removed from the pods
//! because the cluster's Pod schema lacks them, the conflicts with other configs and the
//! progress of the image pre-pull. Pure: times and
//! verdicts come in, a status comes out, identical inputs give an identical status.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::lookup::Conflict;
use super::validate::EntryReport;
use crate::names;

/// The cluster's verdict on one entry's rendered Pod (server-side dry-run apply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DryRun {
    pub browser: String,
    pub version: String,
    /// `None` when the API server accepted the pod.
    pub rejection: Option<String>,
    /// The API server refused to judge the pod (a ResourceQuota or policy forbade even the
    /// dry run): the entry's validity is unknown.
    pub refusal: Option<String>,
    /// Paths removed from the pod because the cluster's Pod schema does not declare them.
    pub removed: Vec<String>,
}

/// Identifier of the effective configuration: a stable hash (FNV-1a 64) of the spec, so
/// it changes exactly when the configuration does.
pub fn version_of(spec: &Value) -> String {
    let bytes = serde_json::to_vec(spec).unwrap_or_default();
    format!("{:016x}", names::fnv1a64(&bytes))
}

/// Number of version entries in `spec.browsers`, `*` entries included (`kubectl get` shows it).
pub fn entries_of(spec: &Value) -> usize {
    spec.get("browsers")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|browsers| browsers.values())
        .filter_map(Value::as_object)
        .map(serde_json::Map::len)
        .sum()
}

fn entry_name(browser: &str, version: &str) -> String {
    if browser.is_empty() {
        "spec".to_string()
    } else {
        format!("{browser} {version}")
    }
}

/// Per-entry problems, local first, then the cluster's verdicts, in entry order.
pub fn problems(reports: &[EntryReport], dry_runs: &[DryRun]) -> Vec<String> {
    let mut out: Vec<String> = reports
        .iter()
        .filter(|r| !r.problems.is_empty())
        .map(|r| {
            format!(
                "{}: {}",
                entry_name(&r.browser, &r.version),
                r.problems.join("; ")
            )
        })
        .collect();
    out.extend(dry_runs.iter().filter_map(|d| {
        d.rejection
            .as_ref()
            .map(|msg| format!("{}: {msg}", entry_name(&d.browser, &d.version)))
    }));
    out
}

/// Per-entry refusals of the cluster to judge a pod, in entry order.
pub fn refusals(dry_runs: &[DryRun]) -> Vec<String> {
    dry_runs
        .iter()
        .filter_map(|d| {
            d.refusal
                .as_ref()
                .map(|msg| format!("{}: {msg}", entry_name(&d.browser, &d.version)))
        })
        .collect()
}

/// Per-entry fields removed from the pods, in entry order, e.g.
/// `chrome 139.0: spec.initContainers[seleniferous].restartPolicy`.
pub fn removed_fields(dry_runs: &[DryRun]) -> Vec<String> {
    dry_runs
        .iter()
        .filter(|d| !d.removed.is_empty())
        .map(|d| {
            format!(
                "{}: {}",
                entry_name(&d.browser, &d.version),
                d.removed.join(", ")
            )
        })
        .collect()
}

/// Reason of the `Valid` condition while the cluster refuses to judge the pods.
pub const VALIDATION_REFUSED: &str = "ValidationRefused";

/// Reason of the Event when the API server refuses a BrowserConfig's status.
pub const STATUS_REFUSED: &str = "StatusRefused";

/// Reason of the conditions (or the Event) of a BrowserConfig the operator cannot read.
pub const UNDECODABLE: &str = "Undecodable";

/// What a BrowserConfig the operator cannot read is told.
pub fn undecodable_message(error: &str) -> String {
    format!(
        "the operator cannot read this BrowserConfig ({error}); it is skipped: no Browser uses its entries until it is changed (JSON nested deeper than 128 levels cannot be read)"
    )
}

/// The status of a BrowserConfig the operator cannot read: not valid, not ready, and nothing
/// else known. Its conditions cannot carry a transition time from before (the old status is
/// unreadable too), so they take `now`; it is written once per generation.
pub fn undecodable_status(generation: Option<i64>, message: &str, now: Timestamp) -> Value {
    let condition = |kind: &str| {
        json!({
            "type": kind,
            "status": "False",
            "reason": UNDECODABLE,
            "message": message,
            "lastTransitionTime": now.to_string(),
        })
    };
    let mut status = json!({"conditions": [condition("Ready"), condition("Valid")]});
    if let Some(generation) = generation {
        status["observedGeneration"] = json!(generation);
    }
    status
}

fn condition(
    current: &Value,
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Value {
    let previous = current
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind));
    let since = previous
        .filter(|c| c.get("status").and_then(Value::as_str) == Some(status))
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now.to_string()));
    json!({
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    })
}

/// What the status reports about a config's image pre-pull (docs/operations.md, "Image
/// pre-pull"): the `PrePulled` condition, and `status.prePull` when there are DaemonSets.
#[derive(Debug, Clone, PartialEq)]
pub struct PrePullFinding {
    pub summary: Option<Value>,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// What the status reports about the configuration's entries.
#[derive(Debug, Clone, Copy, Default)]
pub struct Findings<'a> {
    /// Per-entry problems ([`problems`]).
    pub problems: &'a [String],
    /// Per-entry refusals to judge ([`refusals`]).
    pub refusals: &'a [String],
    /// Per-entry fields removed from the pods ([`removed_fields`]).
    pub removed: &'a [String],
    pub conflicts: &'a [Conflict],
    /// Image pre-pull, for configs that ask for it.
    pub pre_pull: Option<&'a PrePullFinding>,
}

/// The full desired status of a BrowserConfig whose spec hashes to `version`.
pub fn status(
    current: &Value,
    spec: &Value,
    generation: Option<i64>,
    findings: Findings,
    now: Timestamp,
) -> Value {
    let Findings {
        problems,
        refusals,
        removed,
        conflicts,
        pre_pull,
    } = findings;
    let version = version_of(spec);
    let last_updated = match current.get("version").and_then(Value::as_str) {
        Some(v) if v == version => current
            .get("lastUpdated")
            .cloned()
            .unwrap_or_else(|| json!(now.to_string())),
        _ => json!(now.to_string()),
    };
    let valid = problems.is_empty();
    // Known problems outweigh entries the cluster would not judge.
    let (valid_status, valid_reason, valid_message) = if !valid {
        let mut message = problems.join(" | ");
        if !refusals.is_empty() {
            message.push_str(" | the cluster refused to validate the pods of: ");
            message.push_str(&refusals.join(" | "));
        }
        ("False", "InvalidEntries", message)
    } else if !refusals.is_empty() {
        (
            "Unknown",
            VALIDATION_REFUSED,
            format!(
                "the cluster refused to validate the pods of these entries, so their validity is unknown (checked again with backoff): {}",
                refusals.join(" | ")
            ),
        )
    } else {
        (
            "True",
            "Valid",
            "every entry renders a pod the cluster accepts".to_string(),
        )
    };
    let conflict_message = conflicts
        .iter()
        .map(|c| {
            format!(
                "{} {} is also defined by BrowserConfig {}, which takes precedence (older)",
                c.browser, c.version, c.winner
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let mut conditions = vec![
        condition(
            current,
            "Valid",
            valid_status,
            valid_reason,
            &valid_message,
            now,
        ),
        condition(
            current,
            "Ready",
            if valid { "True" } else { "False" },
            if valid { "Ready" } else { "InvalidEntries" },
            if valid {
                "configuration in use"
            } else {
                "some entries cannot be used; see the Valid condition"
            },
            now,
        ),
    ];
    if !removed.is_empty() {
        conditions.push(condition(
            current,
            "PodFieldsRemoved",
            "True",
            "UnknownPodFields",
            &format!(
                "the cluster's Pod schema does not declare these fields, so they are removed from the pods: {}",
                removed.join("; ")
            ),
            now,
        ));
    }
    if !conflicts.is_empty() {
        conditions.push(condition(
            current,
            "Conflict",
            "True",
            "DuplicateEntries",
            &conflict_message,
            now,
        ));
    }
    if let Some(pre_pull) = pre_pull {
        conditions.push(condition(
            current,
            "PrePulled",
            pre_pull.status,
            pre_pull.reason,
            &pre_pull.message,
            now,
        ));
    }
    let mut status = json!({
        "version": version,
        "entries": entries_of(spec),
        "lastUpdated": last_updated,
        "conditions": conditions,
    });
    if let Some(summary) = pre_pull.and_then(|p| p.summary.as_ref()) {
        status["prePull"] = summary.clone();
    }
    if let Some(g) = generation {
        status["observedGeneration"] = json!(g);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-22T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn version_tracks_the_spec() {
        let a = json!({"browsers": {"chrome": {"1": {"image": "a"}}}});
        let b = json!({"browsers": {"chrome": {"1": {"image": "b"}}}});
        assert_eq!(version_of(&a), version_of(&a.clone()));
        assert_ne!(version_of(&a), version_of(&b));
    }

    #[test]
    fn entries_count_every_version_of_every_browser() {
        let spec = json!({"browsers": {
            "chrome": {"138.0": {}, "139.0": {}},
            "firefox": {"*": {"image": "f:{version}"}, "115.0": {}},
            "broken": "not an object",
        }});
        assert_eq!(entries_of(&spec), 4);
        let s = status(&Value::Null, &spec, None, Findings::default(), now());
        assert_eq!(s["entries"], 4);
        assert_eq!(entries_of(&json!({})), 0);
    }

    #[test]
    fn valid_config_is_ready_and_stable_across_reconciles() {
        let spec = json!({"browsers": {}});
        let first = status(&Value::Null, &spec, Some(3), Findings::default(), now());
        assert_eq!(first["observedGeneration"], 3);
        assert_eq!(first["conditions"][0]["status"], "True");
        assert_eq!(first["conditions"][1]["type"], "Ready");
        let later: Timestamp = "2026-11-22T11:00:00Z".parse().unwrap();
        assert_eq!(
            status(&first, &spec, Some(3), Findings::default(), later),
            first
        );
    }

    #[test]
    fn problems_name_their_entries() {
        let reports = vec![EntryReport {
            browser: "chrome".into(),
            version: "1".into(),
            problems: vec!["image is required".into()],
        }];
        let dry = vec![DryRun {
            browser: "firefox".into(),
            version: "2".into(),
            rejection: Some(
                "Pod \"x\" is invalid: spec.containers[0].image: Required value".into(),
            ),
            refusal: None,
            removed: Vec::new(),
        }];
        let p = problems(&reports, &dry);
        assert_eq!(p[0], "chrome 1: image is required");
        assert!(p[1].starts_with("firefox 2: Pod \"x\" is invalid"));
        let findings = Findings {
            problems: &p,
            ..Findings::default()
        };
        let s = status(&Value::Null, &json!({}), None, findings, now());
        assert_eq!(s["conditions"][0]["status"], "False");
        assert_eq!(s["conditions"][0]["reason"], "InvalidEntries");
        assert!(
            s["conditions"][0]["message"]
                .as_str()
                .unwrap()
                .contains("firefox 2")
        );
    }

    #[test]
    fn a_refused_validation_leaves_validity_unknown_but_the_config_in_use() {
        let runs = [DryRun {
            browser: "chrome".into(),
            version: "139.0".into(),
            rejection: None,
            refusal: Some("pods \"x\" is forbidden: exceeded quota: q".into()),
            removed: Vec::new(),
        }];
        let refused = refusals(&runs);
        assert_eq!(
            refused,
            ["chrome 139.0: pods \"x\" is forbidden: exceeded quota: q"]
        );
        let findings = Findings {
            refusals: &refused,
            ..Findings::default()
        };
        let s = status(&Value::Null, &json!({}), None, findings, now());
        let valid = &s["conditions"][0];
        assert_eq!(valid["status"], "Unknown");
        assert_eq!(valid["reason"], VALIDATION_REFUSED);
        let message = valid["message"].as_str().unwrap();
        assert!(message.contains("validity is unknown"), "{message}");
        assert!(message.ends_with(&refused[0]), "{message}");
        assert_eq!(s["conditions"][1]["type"], "Ready");
        assert_eq!(s["conditions"][1]["status"], "True");
        // Known problems win over refusals.
        let problems = ["firefox 1: image is required".to_string()];
        let findings = Findings {
            problems: &problems,
            refusals: &refused,
            ..Findings::default()
        };
        let s = status(&Value::Null, &json!({}), None, findings, now());
        assert_eq!(s["conditions"][0]["status"], "False");
        let message = s["conditions"][0]["message"].as_str().unwrap();
        assert!(message.starts_with(&problems[0]), "{message}");
        assert!(message.ends_with(&refused[0]), "{message}");
    }

    #[test]
    fn conflicts_name_the_winner() {
        let c = Conflict {
            loser: "b".into(),
            winner: "a".into(),
            browser: "chrome".into(),
            version: "1".into(),
        };
        let conflicts = [c];
        let findings = Findings {
            conflicts: &conflicts,
            ..Findings::default()
        };
        let s = status(&Value::Null, &json!({}), None, findings, now());
        assert_eq!(s["conditions"][2]["type"], "Conflict");
        assert!(
            s["conditions"][2]["message"]
                .as_str()
                .unwrap()
                .contains("BrowserConfig a")
        );
    }

    #[test]
    fn pre_pull_adds_its_condition_and_summary_only_when_asked() {
        let finding = PrePullFinding {
            summary: Some(json!({"images": 2})),
            status: "False",
            reason: "Pulling",
            message: "nodes with every image: ds 1/2".into(),
        };
        let findings = Findings {
            pre_pull: Some(&finding),
            ..Findings::default()
        };
        let s = status(&Value::Null, &json!({}), None, findings, now());
        assert_eq!(s["prePull"], json!({"images": 2}));
        let c = &s["conditions"][2];
        assert_eq!(c["type"], "PrePulled");
        assert_eq!(c["reason"], "Pulling");
        assert_eq!(c["message"], "nodes with every image: ds 1/2");
        let without = status(&s, &json!({}), None, Findings::default(), now());
        assert!(without.get("prePull").is_none());
        assert_eq!(without["conditions"].as_array().unwrap().len(), 2);
        let disabled = PrePullFinding {
            summary: None,
            ..finding
        };
        let findings = Findings {
            pre_pull: Some(&disabled),
            ..Findings::default()
        };
        let s = status(&Value::Null, &json!({}), None, findings, now());
        assert!(s.get("prePull").is_none());
        assert_eq!(s["conditions"][2]["type"], "PrePulled");
    }

    #[test]
    fn last_updated_moves_only_with_the_version() {
        let spec = json!({"browsers": {"c": {}}});
        let first = status(&Value::Null, &spec, Some(1), Findings::default(), now());
        let later: Timestamp = "2026-11-22T11:00:00Z".parse().unwrap();
        let changed = status(
            &first,
            &json!({"browsers": {}}),
            Some(2),
            Findings::default(),
            later,
        );
        assert_eq!(changed["lastUpdated"], later.to_string());
        assert_eq!(first["lastUpdated"], now().to_string());
    }

    #[test]
    fn removed_fields_are_a_condition_naming_entry_and_fields_only_while_there_are_any() {
        let runs = [
            DryRun {
                browser: "chrome".into(),
                version: "139.0".into(),
                rejection: None,
                refusal: None,
                removed: vec![
                    "spec.initContainers[seleniferous].restartPolicy".into(),
                    "spec.containers[browser].resources.claims".into(),
                ],
            },
            DryRun {
                browser: "firefox".into(),
                version: "1".into(),
                rejection: None,
                refusal: None,
                removed: Vec::new(),
            },
        ];
        let removed = removed_fields(&runs);
        assert_eq!(
            removed,
            [
                "chrome 139.0: spec.initContainers[seleniferous].restartPolicy, spec.containers[browser].resources.claims"
            ]
        );
        let spec = json!({});
        let findings = Findings {
            removed: &removed,
            ..Findings::default()
        };
        let s = status(&Value::Null, &spec, None, findings, now());
        let c = &s["conditions"][2];
        assert_eq!(c["type"], "PodFieldsRemoved");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "UnknownPodFields");
        assert!(c["message"].as_str().unwrap().ends_with(&removed[0]));
        // Pruned fields do not make the configuration invalid.
        assert_eq!(s["conditions"][0]["status"], "True");
        let later: Timestamp = "2026-11-22T11:00:00Z".parse().unwrap();
        let cleared = status(&s, &spec, None, Findings::default(), later);
        assert_eq!(cleared["conditions"].as_array().unwrap().len(), 2);
    }
}
