//! The capacity queue (docs/behaviour.md, "Capacity queue"): what the decision needs to let a
//! Browser wait for quota instead of failing. Whether a namespace's ResourceQuotas have room for
//! a pod ([`room`]), what a quota refusal says ([`QuotaRefusal`]), when a Browser started
//! waiting ([`queued_since`]) and the messages of a waiting Browser. The decision itself is in
//! `decide`.

use std::fmt;

use jiff::Timestamp;
use kube_quantity::ParsedQuantity;
use serde_json::Value;

use super::reason::Reason;
use crate::api::browser::Phase;
use crate::api::owner::Owner;
use crate::duration;

/// Where a Browser stands in its namespace's line, or would once it joins.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Position {
    /// Browsers of the namespace before it in line, every owner's: nobody overtakes them.
    pub ahead: usize,
    /// Browsers of the namespace created before it that the operator has not handled yet (no
    /// status phase): they come first if the quotas have room for only some.
    pub arriving: usize,
    /// Its place among its owner's Browsers in line, from 1.
    pub of_owner: usize,
    /// Owners with Browsers in line, its own counted.
    pub owners: usize,
}

/// A quota without room for a pod: its name and each resource that would go over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    pub quota: String,
    /// Resource, used, hard: as the quota states them.
    pub resources: Vec<(String, String, String)>,
}

/// `team-a (pods 2/2, requests.cpu 4/4)`.
impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.quota)?;
        for (i, (resource, used, hard)) in self.resources.iter().enumerate() {
            let open = if i == 0 { " (" } else { ", " };
            write!(f, "{open}{resource} {used}/{hard}")?;
        }
        if !self.resources.is_empty() {
            write!(f, ")")?;
        }
        Ok(())
    }
}

/// A pod create the ResourceQuota admission refused:
/// `pods "x" is forbidden: exceeded quota: team-a, requested: pods=1, used: pods=2, limited: pods=2`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRefusal {
    pub exhausted: Exhausted,
}

impl QuotaRefusal {
    /// The refusal in the API server's message, when it is one of the quota admission's.
    pub fn parse(message: &str) -> Option<Self> {
        let (_, rest) = message.split_once("exceeded quota: ")?;
        let (quota, rest) = rest.split_once(", requested: ")?;
        let (_, rest) = rest.split_once(", used: ")?;
        let (used, limited) = rest.split_once(", limited: ")?;
        let pairs = |list: &str| -> Vec<(String, String)> {
            list.split(',')
                .filter_map(|pair| pair.trim().split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let used = pairs(used);
        let resources = pairs(limited)
            .into_iter()
            .map(|(resource, hard)| {
                let used = used
                    .iter()
                    .find(|(r, _)| *r == resource)
                    .map_or_else(|| "?".to_string(), |(_, v)| v.clone());
                (resource, used, hard)
            })
            .collect();
        Some(Self {
            exhausted: Exhausted {
                quota: quota.trim().to_string(),
                resources,
            },
        })
    }
}

fn quantity(value: &Value) -> Option<ParsedQuantity> {
    ParsedQuantity::try_from(value.as_str()?).ok()
}

/// The sum of a resource over the pod's containers, or over its init containers when one of
/// them asks for more (they run one at a time, before the others), as the quota counts it.
fn pod_amount(pod: &Value, kind: &str, resource: &str) -> Option<ParsedQuantity> {
    let amounts = |list: &str| -> Vec<ParsedQuantity> {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.pointer(&format!("/resources/{kind}/{resource}")))
            .filter_map(quantity)
            .collect()
    };
    let main = amounts("containers");
    let init = amounts("initContainers");
    let sum = main.into_iter().reduce(|a, b| a + b);
    let init_max = init.into_iter().max();
    match (sum, init_max) {
        (Some(sum), Some(init)) => Some(sum.max(init)),
        (sum, init) => sum.or(init),
    }
}

/// How much of a quota's `resource` the pod uses; `None` for what a pod does not use.
fn demand(pod: &Value, resource: &str) -> Option<ParsedQuantity> {
    match resource {
        "pods" | "count/pods" => ParsedQuantity::try_from("1").ok(),
        "cpu" | "memory" | "ephemeral-storage" => pod_amount(pod, "requests", resource),
        _ => {
            if let Some(name) = resource.strip_prefix("requests.") {
                pod_amount(pod, "requests", name)
            } else if let Some(name) = resource.strip_prefix("limits.") {
                pod_amount(pod, "limits", name)
            } else {
                None
            }
        }
    }
}

/// Whether a quota applies to every pod: a quota with scopes applies to some pods only, and
/// is left to the API server to judge.
fn unscoped(quota: &Value) -> bool {
    let spec = &quota["spec"];
    spec["scopes"].as_array().is_none_or(Vec::is_empty) && spec["scopeSelector"].is_null()
}

/// Whether the namespace's ResourceQuotas have room for `count` pods like `pod` (its own and
/// those of the Browsers before it), by their status (what the quota controller and the
/// admission last counted); the first quota that has not, otherwise, its use shown with the
/// pods before this one counted in. A quota with scopes, or whose status is not written yet,
/// does not hold a Browser back: the API server judges the create.
pub fn room(quotas: &[Value], pod: &Value, count: u64) -> Result<(), Exhausted> {
    for quota in quotas.iter().filter(|q| unscoped(q)) {
        let (Some(hard), Some(used)) = (
            quota.pointer("/status/hard").and_then(Value::as_object),
            quota.pointer("/status/used").and_then(Value::as_object),
        ) else {
            continue;
        };
        let over: Vec<(String, String, String)> = hard
            .iter()
            .filter_map(|(resource, limit)| {
                let one = demand(pod, resource)?;
                let limit_q = quantity(limit)?;
                let in_use = used.get(resource);
                let before = in_use.and_then(quantity).unwrap_or_default()
                    + one.clone() * count.saturating_sub(1);
                (before.clone() + one > limit_q.clone()).then(|| {
                    // What the quota will count once the Browsers before this one have
                    // their pods, as far as it lets them.
                    let shown = match (count, in_use.and_then(Value::as_str)) {
                        (1, Some(text)) => text.to_string(),
                        _ if before >= limit_q => limit.as_str().unwrap_or_default().to_string(),
                        _ => before.to_string(),
                    };
                    let hard = limit.as_str().unwrap_or_default().to_string();
                    (resource.clone(), shown, hard)
                })
            })
            .collect();
        if !over.is_empty() {
            return Err(Exhausted {
                quota: quota
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                resources: over,
            });
        }
    }
    Ok(())
}

/// When the Browser started waiting, if it waits: its status is `Pending` with reason `Queued`
/// since the `Ready` condition last changed (its creation, if the condition lacks the time).
pub fn queued_since(status: &Value, created: Option<Timestamp>) -> Option<Timestamp> {
    let queued = status.get("phase").and_then(Value::as_str) == Some(Phase::Pending.as_str())
        && status.get("reason").and_then(Value::as_str) == Some(Reason::Queued.as_str());
    if !queued {
        return None;
    }
    super::status::ready_since(status).or(created)
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`.
pub fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The message of a waiting Browser: `waiting for quota team-a (pods 2/2), 3rd in line`;
/// without a quota known to be full (the Browsers ahead wait for it), `waiting for quota, 3rd
/// in line`.
pub fn waiting_message(exhausted: Option<&Exhausted>, at: &Position, owner: &Owner) -> String {
    let quota = match exhausted {
        Some(exhausted) => format!("waiting for quota {exhausted}"),
        None => "waiting for quota".to_string(),
    };
    if at.owners <= 1 {
        return format!("{quota}, {} in line", ordinal(at.ahead + at.arriving + 1));
    }
    let whose = match owner {
        Some(owner) => format!("owner {owner}"),
        None => "Browsers without an owner".to_string(),
    };
    format!(
        "{quota}, {} in line for {whose}, {} owners waiting",
        ordinal(at.of_owner),
        at.owners
    )
}

/// The failure message of a Browser that waited `timeout` in vain, from its waiting message:
/// `gave up waiting for quota team-a (pods 2/2) after 2m0s (--queue-timeout)`.
pub fn gave_up_message(waiting: &str, timeout: std::time::Duration) -> String {
    // The place follows the quota: `, 3rd in line` or `, 2nd in line for owner bob, …` (a
    // resource of the quota, `, cpu 4/4`, never starts with a digit).
    let what = waiting.strip_prefix("waiting for ").and_then(|rest| {
        rest.match_indices(", ")
            .find(|(at, sep)| rest[at + sep.len()..].starts_with(|c: char| c.is_ascii_digit()))
            .map(|(at, _)| &rest[..at])
    });
    let what = what.unwrap_or("quota");
    format!(
        "gave up waiting for {what} after {} (--queue-timeout)",
        duration::format(timeout)
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn quota(name: &str, hard: Value, used: Value) -> Value {
        json!({
            "metadata": {"name": name},
            "spec": {"hard": hard},
            "status": {"hard": hard, "used": used},
        })
    }

    fn pod(requests: Value, limits: Value) -> Value {
        json!({"spec": {
            "containers": [
                {"name": "browser", "resources": {"requests": requests, "limits": limits}},
                {"name": "seleniferous", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
            ],
        }})
    }

    #[test]
    fn the_quota_admissions_refusal_is_read_with_every_resource_it_names() {
        let message = "pods \"s1\" is forbidden: exceeded quota: team-a, requested: pods=1,requests.cpu=600m, used: pods=2,requests.cpu=4, limited: pods=2,requests.cpu=4";
        let refusal = QuotaRefusal::parse(message).unwrap();
        assert_eq!(
            refusal.exhausted.to_string(),
            "team-a (pods 2/2, requests.cpu 4/4)"
        );
        assert_eq!(QuotaRefusal::parse("pods \"s1\" is forbidden: nope"), None);
    }

    #[test]
    fn a_pod_fits_while_every_quota_has_room_for_it() {
        let pod = pod(
            json!({"cpu": "500m", "memory": "1Gi"}),
            json!({"memory": "2Gi"}),
        );
        let roomy = quota(
            "team-a",
            json!({"pods": "3", "requests.cpu": "2", "limits.memory": "8Gi", "services": "1"}),
            json!({"pods": "2", "requests.cpu": "1400m", "limits.memory": "4Gi", "services": "1"}),
        );
        assert_eq!(room(std::slice::from_ref(&roomy), &pod, 1), Ok(()));
        // Room for one more pod, not for two: the use shown counts the one before, up to
        // the limit.
        assert_eq!(
            room(std::slice::from_ref(&roomy), &pod, 2)
                .unwrap_err()
                .to_string(),
            "team-a (pods 3/3, requests.cpu 2/2)"
        );
        assert_eq!(
            room(std::slice::from_ref(&roomy), &pod, 5)
                .unwrap_err()
                .to_string(),
            "team-a (pods 3/3, requests.cpu 2/2, limits.memory 8Gi/8Gi)"
        );
        // 1400m + 600m = 2: exactly full still fits.
        let full = quota("team-a", json!({"pods": "2"}), json!({"pods": "2"}));
        assert_eq!(
            room(&[roomy.clone(), full], &pod, 1),
            Err(Exhausted {
                quota: "team-a".into(),
                resources: vec![("pods".into(), "2".into(), "2".into())],
            })
        );
        let cpu = quota("cpu", json!({"cpu": "1"}), json!({"cpu": "500m"}));
        assert_eq!(
            room(&[cpu], &pod, 1).unwrap_err().to_string(),
            "cpu (cpu 500m/1)"
        );
    }

    #[test]
    fn init_containers_count_when_one_asks_for_more_than_the_containers_together() {
        let mut pod = pod(json!({"cpu": "500m"}), json!({}));
        pod["spec"]["initContainers"] =
            json!([{"name": "init", "resources": {"requests": {"cpu": "1"}}}]);
        let q = quota(
            "q",
            json!({"requests.cpu": "1500m"}),
            json!({"requests.cpu": "600m"}),
        );
        assert!(room(&[q], &pod, 1).is_err(), "600m + 1 > 1500m");
    }

    #[test]
    fn scoped_quotas_and_quotas_without_status_hold_nobody_back() {
        let pod = pod(json!({}), json!({}));
        let mut scoped = quota("s", json!({"pods": "0"}), json!({"pods": "0"}));
        scoped["spec"]["scopes"] = json!(["Terminating"]);
        let unwritten = json!({"metadata": {"name": "new"}, "spec": {"hard": {"pods": "0"}}});
        assert_eq!(room(&[scoped, unwritten], &pod, 1), Ok(()));
    }

    #[test]
    fn a_browser_waits_while_its_status_is_pending_and_queued() {
        let since: Timestamp = "2026-11-28T10:00:00Z".parse().unwrap();
        let created: Timestamp = "2026-11-28T09:59:58Z".parse().unwrap();
        let status = json!({
            "phase": "Pending", "reason": "Queued",
            "conditions": [{"type": "Ready", "status": "False", "reason": "Queued",
                            "lastTransitionTime": "2026-11-28T10:00:00Z"}],
        });
        assert_eq!(queued_since(&status, Some(created)), Some(since));
        assert_eq!(
            queued_since(
                &json!({"phase": "Pending", "reason": "Queued"}),
                Some(created)
            ),
            Some(created)
        );
        assert_eq!(
            queued_since(&json!({"phase": "Pending"}), Some(created)),
            None
        );
        assert_eq!(
            queued_since(
                &json!({"phase": "Failed", "reason": "Queued"}),
                Some(created)
            ),
            None
        );
    }

    #[test]
    fn positions_read_as_ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .map(ordinal)
            .to_vec();
        assert_eq!(
            got,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
    }

    #[test]
    fn the_messages_name_the_quota_its_use_and_the_place_in_line() {
        let exhausted = Exhausted {
            quota: "team-a".into(),
            resources: vec![("pods".into(), "50".into(), "50".into())],
        };
        let third = Position {
            ahead: 2,
            ..Position::default()
        };
        let waiting = waiting_message(Some(&exhausted), &third, &None);
        assert_eq!(
            waiting,
            "waiting for quota team-a (pods 50/50), 3rd in line"
        );
        assert_eq!(
            gave_up_message(&waiting, std::time::Duration::from_secs(120)),
            "gave up waiting for quota team-a (pods 50/50) after 2m0s (--queue-timeout)"
        );
        assert_eq!(
            gave_up_message(
                &waiting_message(None, &Position::default(), &None),
                std::time::Duration::from_secs(90)
            ),
            "gave up waiting for quota after 1m30s (--queue-timeout)"
        );
    }

    #[test]
    fn with_several_owners_the_message_names_the_place_in_the_owners_line() {
        let exhausted = Exhausted {
            quota: "team-a".into(),
            resources: vec![
                ("pods".into(), "10".into(), "10".into()),
                ("requests.cpu".into(), "4".into(), "4".into()),
            ],
        };
        let at = Position {
            ahead: 7,
            arriving: 0,
            of_owner: 2,
            owners: 3,
        };
        let bob = waiting_message(Some(&exhausted), &at, &Some("bob".into()));
        assert_eq!(
            bob,
            "waiting for quota team-a (pods 10/10, requests.cpu 4/4), 2nd in line for owner bob, 3 owners waiting"
        );
        assert_eq!(
            waiting_message(None, &at, &None),
            "waiting for quota, 2nd in line for Browsers without an owner, 3 owners waiting"
        );
        assert_eq!(
            gave_up_message(&bob, std::time::Duration::from_secs(60)),
            "gave up waiting for quota team-a (pods 10/10, requests.cpu 4/4) after 1m0s (--queue-timeout)"
        );
    }
}
