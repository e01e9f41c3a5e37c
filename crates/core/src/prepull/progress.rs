//! Pre-pull progress (docs/operations.md, "Image pre-pull"): how far each DaemonSet of a
//! config got, read from the status the DaemonSet controller writes, and what the
//! BrowserConfig's status and the metrics say of it. Pure: DaemonSets in, numbers out.

use std::collections::BTreeSet;

use kube_core::DynamicObject;
use serde_json::{Value, json};

use super::render::{PULL_PREFIX, Plan};
use crate::api::keys;
use crate::config::report::PrePullFinding;

/// Reason of the `PrePulled` condition when the operator runs without `--enable-prepull`.
pub const DISABLED: &str = "PrePullDisabled";

/// The nodes of one DaemonSet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Nodes {
    /// Nodes the DaemonSet should run on (`desiredNumberScheduled`).
    pub desired: i64,
    /// Nodes whose pod runs the current spec and is ready: every image is there.
    pub ready: i64,
    /// Whether the DaemonSet controller has seen the current spec (`observedGeneration`).
    pub observed: bool,
}

impl Nodes {
    pub fn pending(&self) -> i64 {
        self.desired - self.ready
    }

    fn done(&self) -> bool {
        self.observed && self.ready == self.desired
    }
}

fn status_number(ds: &DynamicObject, field: &str) -> i64 {
    ds.data
        .get("status")
        .and_then(|s| s.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The nodes of a DaemonSet as its status tells. The status counts updated pods and ready
/// pods, not pods both updated and ready; `updated + ready - desired` of them are both for
/// sure, which is exact once a rollout is complete and never too many while it runs. A
/// status older than the spec tells nothing of the current images: no node is ready then.
pub fn nodes(ds: &DynamicObject) -> Nodes {
    let desired = status_number(ds, "desiredNumberScheduled").max(0);
    let observed_generation = ds
        .data
        .get("status")
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    let observed = match (observed_generation, ds.metadata.generation) {
        (Some(seen), Some(generation)) => seen >= generation,
        (Some(_), None) => true,
        (None, _) => false,
    };
    let ready = if observed {
        let updated = status_number(ds, "updatedNumberScheduled");
        let ready = status_number(ds, "numberReady");
        (updated + ready - desired).clamp(0, desired)
    } else {
        0
    };
    Nodes {
        desired,
        ready,
        observed,
    }
}

/// The images a pre-pull DaemonSet pulls (its `pull-N` init containers).
pub fn pulled_images(ds: &DynamicObject) -> Vec<String> {
    ds.data
        .pointer("/spec/template/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| {
            c.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.starts_with(PULL_PREFIX))
        })
        .filter_map(|c| c.get("image").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// Name and UID of the BrowserConfig controlling a DaemonSet.
pub fn owner(ds: &DynamicObject) -> Option<(&str, &str)> {
    ds.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == keys::BROWSERCONFIG_KIND)
        .map(|o| (o.name.as_str(), o.uid.as_str()))
}

fn applied_hash(ds: &DynamicObject) -> Option<&str> {
    ds.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::ANNOTATION_PREPULL_HASH))
        .map(String::as_str)
}

/// What the status says of a config's pre-pull: `status.prePull` and the `PrePulled`
/// condition, from the plan, the config's DaemonSets as the cache has them, and the writes
/// the cluster refused. `None` when the config asks for no pre-pull and nothing failed.
pub fn finding(
    plan: &Plan,
    observed: &[&DynamicObject],
    failures: &[String],
) -> Option<PrePullFinding> {
    if !plan.requested() && failures.is_empty() {
        return None;
    }
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let (mut ready, mut desired) = (0, 0);
    let mut done = true;
    for ds in &plan.daemon_sets {
        let current = observed
            .iter()
            .find(|o| o.metadata.name.as_deref() == Some(ds.name.as_str()));
        let nodes = match current {
            // Not seen in the cache yet, or not with what was applied last.
            Some(o) if applied_hash(o) == Some(ds.hash.as_str()) => nodes(o),
            Some(o) => Nodes {
                desired: nodes(o).desired,
                ..Nodes::default()
            },
            None => Nodes::default(),
        };
        done &= nodes.done();
        notes.push(if nodes.observed {
            format!("{} {}/{}", ds.name, nodes.ready, nodes.desired)
        } else {
            format!("{} waiting for the DaemonSet controller", ds.name)
        });
        ready += nodes.ready;
        desired += nodes.desired;
        rows.push(json!({
            "name": ds.name,
            "images": ds.images.len(),
            "nodesReady": nodes.ready,
            "nodesDesired": nodes.desired,
        }));
    }
    let summary = json!({
        "images": plan.image_count(),
        "nodesReady": ready,
        "nodesDesired": desired,
        "daemonSets": rows,
    });
    let mut skipped = String::new();
    if !plan.skipped.is_empty() {
        skipped = format!("; not pulled, invalid: {}", plan.skipped.join(" | "));
    }
    let (status, reason, message) = if !failures.is_empty() {
        (
            "False",
            "ApplyFailed",
            format!(
                "the cluster refused the pre-pull DaemonSets: {}{skipped}",
                failures.join(" | ")
            ),
        )
    } else if plan.daemon_sets.is_empty() {
        (
            "False",
            "NoValidEntries",
            format!("no entry that asks for pre-pull can be pulled{skipped}"),
        )
    } else if done {
        (
            "True",
            "Pulled",
            format!(
                "every image is on every node the browsers may run on: {}{skipped}",
                notes.join(", ")
            ),
        )
    } else {
        (
            "False",
            "Pulling",
            format!("nodes with every image: {}{skipped}", notes.join(", ")),
        )
    };
    Some(PrePullFinding {
        summary: Some(summary),
        status,
        reason,
        message,
    })
}

/// The `PrePulled` condition of a config that asks for pre-pull while the operator runs
/// without `--enable-prepull`.
pub fn disabled() -> PrePullFinding {
    PrePullFinding {
        summary: None,
        status: "False",
        reason: DISABLED,
        message: "the operator runs without --enable-prepull: no image is pulled ahead".into(),
    }
}

/// Per-config figures for the metrics: distinct images and nodes still pulling.
pub fn totals<'a>(daemon_sets: impl IntoIterator<Item = &'a DynamicObject>) -> (i64, i64) {
    let mut images = BTreeSet::new();
    let mut pending = 0;
    for ds in daemon_sets {
        images.extend(pulled_images(ds));
        pending += nodes(ds).pending();
    }
    (i64::try_from(images.len()).unwrap_or(i64::MAX), pending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::prepull::render::{HelperImages, plan};

    fn daemon_set(generation: i64, status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "ds", "namespace": "ns", "generation": generation},
            "spec": {"template": {"spec": {"initContainers": [
                {"name": "prepull-tools", "image": "busybox"},
                {"name": "pull-1", "image": "chrome:139"},
                {"name": "pull-2", "image": "seleniferous:2"},
            ]}}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn nodes_count_pods_both_current_and_ready() {
        let steady = daemon_set(
            2,
            json!({"observedGeneration": 2, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberReady": 2}),
        );
        assert_eq!(
            nodes(&steady),
            Nodes {
                desired: 3,
                ready: 2,
                observed: true
            }
        );
        assert_eq!(nodes(&steady).pending(), 1);
        // Mid-rollout: one pod updated, old pods still ready; none is surely both.
        let rolling = daemon_set(
            2,
            json!({"observedGeneration": 2, "desiredNumberScheduled": 3, "updatedNumberScheduled": 1, "numberReady": 2}),
        );
        assert_eq!(nodes(&rolling).ready, 0);
        // A status of an older generation says nothing of the current images.
        let stale = daemon_set(
            3,
            json!({"observedGeneration": 2, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberReady": 3}),
        );
        assert_eq!(
            nodes(&stale),
            Nodes {
                desired: 3,
                ready: 0,
                observed: false
            }
        );
        assert!(!nodes(&daemon_set(1, Value::Null)).observed);
    }

    #[test]
    fn pulled_images_leave_the_helper_out() {
        let ds = daemon_set(1, Value::Null);
        assert_eq!(pulled_images(&ds), ["chrome:139", "seleniferous:2"]);
        assert_eq!(totals([&ds, &ds]), (2, 0));
    }

    fn config(spec: Value) -> DynamicObject {
        fixtures::config("chrome")
            .namespace("ns")
            .uid("u1")
            .spec(spec)
            .object()
    }

    fn two_groups() -> Plan {
        plan(
            &config(
                json!({"template": {"prePull": true}, "browsers": {"chrome": {
                    "139.0": {"image": "c:139"},
                    "140.0": {"image": "c:140", "nodeSelector": {"gpu": "yes"}},
                }}}),
            ),
            "selenosis.io/v1",
            &HelperImages::default(),
        )
    }

    /// The DaemonSet of `plan` at `index` as the cache would hold it, with `status`.
    fn observed(plan: &Plan, index: usize, generation: i64, status: Value) -> DynamicObject {
        let mut body = plan.daemon_sets[index].body.clone();
        body["metadata"]["generation"] = json!(generation);
        body["status"] = status;
        serde_json::from_value(body).unwrap()
    }

    fn status(desired: i64, ready: i64) -> Value {
        json!({"observedGeneration": 1, "desiredNumberScheduled": desired,
            "updatedNumberScheduled": desired, "numberReady": ready})
    }

    #[test]
    fn the_condition_is_true_once_every_daemon_set_is_ready_on_every_node() {
        let plan = two_groups();
        let names: Vec<&str> = plan.daemon_sets.iter().map(|d| d.name.as_str()).collect();
        let none = finding(&plan, &[], &[]).unwrap();
        assert_eq!((none.status, none.reason), ("False", "Pulling"));
        assert!(
            none.message
                .contains("waiting for the DaemonSet controller")
        );

        let (a, b) = (
            observed(&plan, 0, 1, status(3, 3)),
            observed(&plan, 1, 1, status(2, 1)),
        );
        let partial = finding(&plan, &[&a, &b], &[]).unwrap();
        assert_eq!((partial.status, partial.reason), ("False", "Pulling"));
        assert_eq!(
            partial.message,
            format!("nodes with every image: {} 3/3, {} 1/2", names[0], names[1])
        );
        let summary = partial.summary.unwrap();
        assert_eq!(summary["images"], 2);
        assert_eq!(summary["nodesReady"], 4);
        assert_eq!(summary["nodesDesired"], 5);
        assert_eq!(
            summary["daemonSets"][1],
            json!({"name": names[1], "images": 1, "nodesReady": 1, "nodesDesired": 2})
        );

        let b = observed(&plan, 1, 1, status(2, 2));
        let done = finding(&plan, &[&a, &b], &[]).unwrap();
        assert_eq!((done.status, done.reason), ("True", "Pulled"));
    }

    #[test]
    fn a_daemon_set_not_yet_seen_with_the_applied_spec_counts_no_ready_node() {
        let plan = two_groups();
        let mut a = observed(&plan, 0, 1, status(3, 3));
        let b = observed(&plan, 1, 1, status(2, 2));
        a.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(keys::ANNOTATION_PREPULL_HASH.into(), "older".into());
        let f = finding(&plan, &[&a, &b], &[]).unwrap();
        assert_eq!(f.status, "False");
        assert_eq!(f.summary.unwrap()["daemonSets"][0]["nodesReady"], 0);
    }

    #[test]
    fn refused_writes_invalid_entries_and_no_request() {
        let plan = two_groups();
        let f = finding(&plan, &[], &["chrome-prepull-x: forbidden".into()]).unwrap();
        assert_eq!((f.status, f.reason), ("False", "ApplyFailed"));
        assert!(
            f.message.ends_with("chrome-prepull-x: forbidden"),
            "{}",
            f.message
        );

        let invalid = plan_of_invalid();
        let f = finding(&invalid, &[], &[]).unwrap();
        assert_eq!((f.status, f.reason), ("False", "NoValidEntries"));
        assert!(
            f.message.contains("chrome 139.0: image is missing"),
            "{}",
            f.message
        );

        assert!(finding(&Plan::default(), &[], &[]).is_none());
        assert_eq!(disabled().reason, DISABLED);
        assert!(disabled().summary.is_none());
    }

    fn plan_of_invalid() -> Plan {
        plan(
            &config(json!({"browsers": {"chrome": {"139.0": {"prePull": true}}}})),
            "selenosis.io/v1",
            &HelperImages::default(),
        )
    }

    #[test]
    fn the_owner_is_the_controlling_browserconfig() {
        let plan = two_groups();
        let ds = observed(&plan, 0, 1, Value::Null);
        assert_eq!(owner(&ds), Some(("chrome", "u1")));
        let mut foreign = ds.clone();
        foreign.metadata.owner_references = None;
        assert_eq!(owner(&foreign), None);
    }
}
