//! Status derivation (docs/behaviour.md, "Browser", "Normal path", "Messages"): what a Pod says
//! about its session, and the full `Browser.status` the operator wants written. Pure functions
//! of the Pod JSON.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::reason::Reason;
use crate::api::browser::{Phase, SpecError, StatusView};
use crate::api::keys::CRITICAL_CONTAINERS;
use crate::api::status::{BrowserStatus, Condition, ConditionStatus, ContainerStatus};

/// Waiting reasons a container passes through on its way to running; every other waiting reason
/// of a pending pod is a failure (docs/behaviour.md, "Cleanup table").
const TRANSIENT_WAITING: [&str; 2] = ["ContainerCreating", "PodInitializing"];

/// A failure found on a Pod: the Browser's `reason` and `message` (docs/behaviour.md,
/// "Messages").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub message: String,
}

impl Failure {
    pub fn new(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            message: message.into(),
        }
    }
}

impl From<SpecError> for Failure {
    fn from(invalid: SpecError) -> Self {
        Failure::new(Reason::InvalidSpec, invalid.to_string())
    }
}

/// The Pod's phase as its status reports it (`Pending` when absent, as the API server defaults
/// it; `Unknown` for a phase of no known name).
pub fn pod_phase(pod: &Value) -> Phase {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .map_or(Phase::Pending, |p| {
            Phase::parse(p).unwrap_or(Phase::Unknown)
        })
}

/// The Pod's IP, if assigned.
pub fn pod_ip(pod: &Value) -> Option<&str> {
    pod.pointer("/status/podIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn statuses<'a>(pod: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    pod.pointer(&format!("/status/{field}"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Whether a failure of this container ends the session.
fn is_restartable_init(pod: &Value, name: &str) -> bool {
    pod.pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("name").and_then(Value::as_str) == Some(name)
                && c.get("restartPolicy").and_then(Value::as_str) == Some("Always")
        })
}

fn terminated_message(name: &str, terminated: &Value) -> String {
    let reason = str_at(terminated, "/reason").unwrap_or("Terminated");
    let code = terminated
        .get("exitCode")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    format!("pod container {name} terminated: {reason} (exit code {code})")
}

/// A pending pod's container or init container that has already failed (docs/behaviour.md,
/// "Cleanup table"): terminated (init containers: with a non-zero exit code, or a restartable
/// sidecar), or waiting with a non-transient reason.
pub fn pending_failure(pod: &Value) -> Option<Failure> {
    let init = statuses(pod, "initContainerStatuses").map(|s| (s, true));
    let main = statuses(pod, "containerStatuses").map(|s| (s, false));
    for (status, is_init) in init.chain(main) {
        let name = str_at(status, "/name").unwrap_or("?");
        if let Some(terminated) = status.pointer("/state/terminated") {
            let code = terminated
                .get("exitCode")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let completed_init = is_init && code == 0 && !is_restartable_init(pod, name);
            if !completed_init {
                return Some(Failure::new(
                    Reason::ContainerTerminated,
                    terminated_message(name, terminated),
                ));
            }
        }
        if let Some(reason) = str_at(status, "/state/waiting/reason")
            && !TRANSIENT_WAITING.contains(&reason)
        {
            let message = match str_at(status, "/state/waiting/message") {
                Some(detail) => format!("pod container {name} failed: {reason} - {detail}"),
                None => format!("pod container {name} failed: {reason}"),
            };
            return Some(Failure::new(reason, message));
        }
    }
    None
}

/// A critical container (`browser`, `seleniferous`) that terminated while the pod runs: the
/// normal end of a session (docs/behaviour.md, "Cleanup table").
pub fn critical_termination(pod: &Value) -> Option<Failure> {
    statuses(pod, "containerStatuses").find_map(|status| {
        let name = str_at(status, "/name")?;
        if !CRITICAL_CONTAINERS.contains(&name) {
            return None;
        }
        let terminated = status.pointer("/state/terminated")?;
        Some(Failure::new(
            Reason::ContainerTerminated,
            terminated_message(name, terminated),
        ))
    })
}

/// Why a pod reported phase `Failed` (docs/behaviour.md, "Messages"): the pod's own reason,
/// else the first terminated container's.
pub fn pod_failure(pod: &Value) -> Failure {
    if let Some(reason) = str_at(pod, "/status/reason") {
        let message = match str_at(pod, "/status/message") {
            Some(detail) => format!("pod has failed with reason: {reason} - {detail}"),
            None => format!("pod has failed with reason: {reason}"),
        };
        return Failure::new(reason, message);
    }
    let terminated = statuses(pod, "containerStatuses")
        .chain(statuses(pod, "initContainerStatuses"))
        .find_map(|s| Some((str_at(s, "/name")?, s.pointer("/state/terminated")?)));
    match terminated {
        Some((name, terminated)) => {
            let reason = str_at(terminated, "/reason").unwrap_or("Error");
            Failure::new(reason, terminated_message(name, terminated))
        }
        None => Failure::new(Reason::PodFailed, "pod has failed with reason: PodFailed"),
    }
}

/// What keeps a pod pending, for the creation-timeout message (docs/behaviour.md, "Messages"):
/// `container browser: ContainerCreating` or `pod unschedulable: 0/3 nodes are available: …`.
pub fn pending_detail(pod: &Value) -> String {
    let unschedulable = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| {
            c.get("type").and_then(Value::as_str) == Some("PodScheduled")
                && c.get("status").and_then(Value::as_str) == Some("False")
        });
    if let Some(condition) = unschedulable {
        let detail = str_at(condition, "/message")
            .or_else(|| str_at(condition, "/reason"))
            .unwrap_or("Unschedulable");
        return format!("pod unschedulable: {detail}");
    }
    let waiting = statuses(pod, "initContainerStatuses")
        .chain(statuses(pod, "containerStatuses"))
        .find_map(|s| Some((str_at(s, "/name")?, str_at(s, "/state/waiting/reason")?)));
    match waiting {
        Some((name, reason)) => format!("container {name}: {reason}"),
        None if pod.pointer("/spec/nodeName").is_some() => {
            "pod scheduled, no container started".into()
        }
        None => "pod not scheduled".into(),
    }
}

/// When the pod's deletion was requested: `deletionTimestamp` minus its grace period.
pub fn deletion_requested_at(pod: &Value) -> Option<Timestamp> {
    let deadline: Timestamp = str_at(pod, "/metadata/deletionTimestamp")?.parse().ok()?;
    let grace = pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    deadline
        .checked_sub(jiff::SignedDuration::from_secs(grace))
        .ok()
}

/// The pod's `creationTimestamp`.
pub fn created_at(object: &Value) -> Option<Timestamp> {
    str_at(object, "/metadata/creationTimestamp")?.parse().ok()
}

/// `containerStatuses` for the Browser (docs/behaviour.md, "Browser"): `{name, state, image,
/// restartCount, ports}`, with `ports` taken from the pod spec container of that name.
fn container_statuses(pod: &Value) -> Vec<ContainerStatus> {
    let spec_containers: Vec<&Value> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    statuses(pod, "containerStatuses")
        .map(|status| {
            let name = status.get("name").cloned();
            let ports = spec_containers
                .iter()
                .find(|c| name.is_some() && c.get("name") == name.as_ref())
                .and_then(|c| c.get("ports"))
                .filter(|p| p.as_array().is_some_and(|a| !a.is_empty()))
                .cloned();
            ContainerStatus {
                state: status.get("state").cloned(),
                image: status.get("image").cloned(),
                restart_count: Some(status.get("restartCount").cloned().unwrap_or(json!(0))),
                ports,
                name,
            }
        })
        .collect()
}

/// Builds a Browser status. `pod` fills podIP/startTime/containerStatuses; when there is no
/// pod, those fields are kept from `current` so a failure keeps what the session had.
pub struct StatusBuilder<'a> {
    current: &'a Value,
    now: Timestamp,
}

impl<'a> StatusBuilder<'a> {
    pub fn new(current: &'a Value, now: Timestamp) -> Self {
        Self { current, now }
    }

    /// The status mirroring a live pod (docs/behaviour.md, "Normal path"). `phase: Running` is
    /// only published together with `podIP`; a running pod without an IP stays `Pending`.
    pub fn mirror(&self, pod: &Value) -> BrowserStatus {
        let phase = match pod_phase(pod) {
            Phase::Running if pod_ip(pod).is_none() => Phase::Pending,
            phase => phase,
        };
        self.build(phase, Some(pod), None)
    }

    /// `Pending` right after the pod was created.
    pub fn created(&self) -> BrowserStatus {
        self.build(Phase::Pending, None, None)
    }

    /// `Pending` without a pod, waiting in line: the reason (`Queued`) and message of `wait`.
    pub fn queued(&self, wait: &Failure) -> BrowserStatus {
        self.build(Phase::Pending, None, Some(wait))
    }

    /// A terminal status with the failure's reason and message (phase `Failed`).
    pub fn failed(&self, pod: Option<&Value>, failure: &Failure) -> BrowserStatus {
        self.build(Phase::Failed, pod, Some(failure))
    }

    /// `Succeeded`, for a pod that completed.
    pub fn succeeded(&self, pod: &Value) -> BrowserStatus {
        self.build(Phase::Succeeded, Some(pod), None)
    }

    fn build(&self, phase: Phase, pod: Option<&Value>, failure: Option<&Failure>) -> BrowserStatus {
        let mut status = BrowserStatus::default();
        match pod {
            Some(pod) => {
                status.pod_ip = pod_ip(pod).map(String::from);
                status.start_time = pod.pointer("/status/startTime").cloned();
                let containers = container_statuses(pod);
                if !containers.is_empty() {
                    status.container_statuses = Some(containers);
                }
            }
            // Kept as the current status has them, when they have the shape the type takes.
            None => {
                let kept = |key: &str| self.current.get(key).cloned();
                status.pod_ip = kept("podIP").and_then(|v| serde_json::from_value(v).ok());
                status.start_time = kept("startTime");
                status.container_statuses =
                    kept("containerStatuses").and_then(|v| serde_json::from_value(v).ok());
            }
        }
        // Running is never published without podIP.
        let phase = if phase == Phase::Running && status.pod_ip.is_none() {
            Phase::Pending
        } else {
            phase
        };
        status.phase = Some(phase);
        if let Some(failure) = failure {
            status.reason = Some(failure.reason.clone());
            status.message = Some(failure.message.clone());
        }
        status.conditions = Some(vec![self.ready_condition(phase, failure)]);
        status
    }

    /// The `Ready` condition; its `lastTransitionTime` moves only when status or reason change,
    /// so repeated reconciles produce identical statuses (no write loops).
    fn ready_condition(&self, phase: Phase, failure: Option<&Failure>) -> Condition {
        let ready = if phase == Phase::Running {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        let reason = failure.map_or(phase.as_str(), |f| f.reason.as_str());
        let previous = self
            .current
            .get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(READY));
        let unchanged = previous.is_some_and(|c| {
            c.get("status").and_then(Value::as_str) == Some(ready.as_str())
                && c.get("reason").and_then(Value::as_str) == Some(reason)
        });
        let since = previous
            .filter(|_| unchanged)
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(self.now.to_string()));
        Condition {
            kind: READY.into(),
            status: ready,
            observed_generation: None,
            last_transition_time: Some(since),
            reason: Some(reason.into()),
            message: failure.map(|f| f.message.clone()),
        }
    }
}

/// The type of the Browser's one condition.
const READY: &str = "Ready";

/// When the current `Ready` condition last changed (used for failed-Browser retention).
pub fn ready_since(status: &Value) -> Option<Timestamp> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(READY))?
        .get("lastTransitionTime")?
        .as_str()?
        .parse()
        .ok()
}

/// Whether writing `desired` over `current` tells a watcher anything new. While the pod
/// stays `Pending`, container-state churn (`ContainerCreating`, start time) is folded into
/// the next meaningful write, which keeps a normal session at its minimum number of writes;
/// every other change is written. Fields only `current` has do not count: the operator's
/// statuses only gain fields until they are terminal, so such fields belong to another
/// field manager (a Go browser-controller's merge patches), an apply without them leaves
/// them in place, and counting them would write again on every reconcile.
pub fn needs_write(current: &Value, desired: &BrowserStatus) -> bool {
    let desired = &desired.to_value();
    let pending = |s: &Value| StatusView::new(s).phase() == Some(Phase::Pending);
    if pending(current) && pending(desired) {
        [Phase::FIELD, "podIP", "reason", "message"]
            .iter()
            .any(|k| current.get(*k) != desired.get(*k))
    } else {
        match desired.as_object() {
            Some(desired) => desired.iter().any(|(k, v)| current.get(k) != Some(v)),
            None => current != desired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{Fixture, Pod, pod};

    fn now() -> Timestamp {
        "2026-11-22T10:00:00Z".parse().unwrap()
    }

    /// The pod of Browser s1, its containers with ports 4444 and 4445.
    fn s1() -> Fixture<Pod> {
        pod("s1").created("2026-11-22T09:59:00Z")
    }

    #[test]
    fn running_is_never_published_without_pod_ip() {
        let p = s1().phase("Running").build();
        let s = StatusBuilder::new(&Value::Null, now())
            .mirror(&p)
            .to_value();
        assert_eq!(s["phase"], "Pending");
        assert!(s.get("podIP").is_none());
        let p = s1()
            .running("10.0.0.7")
            .started("2026-11-22T09:59:30Z")
            .build();
        let s = StatusBuilder::new(&Value::Null, now())
            .mirror(&p)
            .to_value();
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["podIP"], "10.0.0.7");
        assert_eq!(s["startTime"], "2026-11-22T09:59:30Z");
        assert_eq!(s["conditions"][0]["status"], "True");
    }

    #[test]
    fn container_statuses_carry_spec_ports() {
        let p = s1()
            .status(json!({"phase": "Running", "podIP": "10.0.0.7", "containerStatuses": [
                {"name": "browser", "image": "chrome:1", "restartCount": 0, "state": {"running": {"startedAt": "t"}}, "containerID": "x"}
            ]}))
            .build();
        let s = StatusBuilder::new(&Value::Null, now())
            .mirror(&p)
            .to_value();
        assert_eq!(
            s["containerStatuses"],
            json!([{"name": "browser", "state": {"running": {"startedAt": "t"}}, "image": "chrome:1", "restartCount": 0, "ports": [{"containerPort": 4444}]}])
        );
    }

    /// The Selenosis hub (v2.1) proxies a session only once the Running status it watches also
    /// shows the `seleniferous` container running: the status that first says `Running`
    /// carries every container's state, as the kubelet reported it with the pod IP.
    #[test]
    fn the_running_status_shows_the_sidecar_running_as_the_hub_waits_for() {
        let p = s1()
            .status(json!({"phase": "Running", "podIP": "10.89.0.16", "containerStatuses": [
                {"name": "browser", "image": "localhost/chromium-driver:e2e", "restartCount": 0, "ready": true,
                 "state": {"running": {"startedAt": "2026-11-27T20:58:38Z"}}},
                {"name": "seleniferous", "image": "localhost/seleniferous:e2e", "restartCount": 0, "ready": true,
                 "state": {"running": {"startedAt": "2026-11-27T20:58:39Z"}}}
            ]}))
            .build();
        let s = StatusBuilder::new(&Value::Null, now())
            .mirror(&p)
            .to_value();
        assert_eq!(
            (&s["phase"], &s["podIP"]),
            (&json!("Running"), &json!("10.89.0.16"))
        );
        let sidecar = s["containerStatuses"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == "seleniferous"))
            .expect("the sidecar's status");
        assert_eq!(
            sidecar["state"]["running"]["startedAt"],
            "2026-11-27T20:58:39Z"
        );
    }

    #[test]
    fn transient_waiting_is_not_a_failure() {
        let p = s1()
            .container_waiting("browser", "ContainerCreating", None)
            .build();
        assert_eq!(pending_failure(&p), None);
        let p = s1()
            .init_container_waiting("init", "PodInitializing")
            .build();
        assert_eq!(pending_failure(&p), None);
    }

    #[test]
    fn non_transient_waiting_fails_with_its_reason() {
        let p = s1()
            .container_waiting(
                "browser",
                "CrashLoopBackOff",
                Some("back-off restarting failed container"),
            )
            .build();
        assert_eq!(
            pending_failure(&p),
            Some(Failure::new(
                "CrashLoopBackOff",
                "pod container browser failed: CrashLoopBackOff - back-off restarting failed container"
            ))
        );
        let p = s1().init_container_waiting("setup", "ErrImagePull").build();
        assert_eq!(
            pending_failure(&p).unwrap().message,
            "pod container setup failed: ErrImagePull"
        );
    }

    #[test]
    fn terminated_containers_fail_a_pending_pod_but_completed_init_containers_do_not() {
        let p = s1()
            .container_terminated("browser", 137, "OOMKilled")
            .build();
        assert_eq!(
            pending_failure(&p),
            Some(Failure::new(
                "ContainerTerminated",
                "pod container browser terminated: OOMKilled (exit code 137)"
            ))
        );
        let p = s1()
            .init_container_terminated("setup", 0, "Completed")
            .build();
        assert_eq!(pending_failure(&p), None);
        let p = s1().init_container_terminated("setup", 2, "Error").build();
        assert_eq!(pending_failure(&p).unwrap().reason, "ContainerTerminated");
    }

    #[test]
    fn restartable_init_containers_that_stop_are_failures() {
        let mut p = s1()
            .init_container_terminated("proxy", 0, "Completed")
            .build();
        p["spec"]["initContainers"] = json!([{"name": "proxy", "restartPolicy": "Always"}]);
        assert!(pending_failure(&p).is_some());
    }

    #[test]
    fn critical_termination_only_for_browser_and_seleniferous() {
        let p = s1()
            .phase("Running")
            .container_terminated("vnc", 1, "Error")
            .build();
        assert_eq!(critical_termination(&p), None);
        let p = s1()
            .phase("Running")
            .container_terminated("seleniferous", 0, "Completed")
            .build();
        assert_eq!(
            critical_termination(&p).unwrap().message,
            "pod container seleniferous terminated: Completed (exit code 0)"
        );
    }

    #[test]
    fn pod_failure_uses_the_pod_reason_then_containers() {
        let p = s1()
            .failed("OOMKilled")
            .message("container exceeded memory limit")
            .build();
        assert_eq!(
            pod_failure(&p),
            Failure::new(
                "OOMKilled",
                "pod has failed with reason: OOMKilled - container exceeded memory limit"
            )
        );
        let p = s1()
            .phase("Failed")
            .container_terminated("browser", 3, "Error")
            .build();
        assert_eq!(pod_failure(&p).reason, "Error");
        let p = s1().phase("Failed").build();
        assert_eq!(pod_failure(&p).reason, "PodFailed");
    }

    #[test]
    fn pending_detail_names_unschedulable_then_waiting_container() {
        let p = s1()
            .status(json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]}))
            .build();
        assert_eq!(
            pending_detail(&p),
            "pod unschedulable: 0/3 nodes are available: 3 Insufficient cpu."
        );
        let p = s1()
            .container_waiting("browser", "ContainerCreating", None)
            .build();
        assert_eq!(pending_detail(&p), "container browser: ContainerCreating");
        assert_eq!(pending_detail(&s1().build()), "pod not scheduled");
    }

    #[test]
    fn deletion_request_time_subtracts_the_grace_period() {
        let p = s1().deleting("2026-11-22T10:00:30Z", 30).build();
        assert_eq!(deletion_requested_at(&p), Some(now()));
    }

    #[test]
    fn failure_keeps_known_pod_fields_when_the_pod_is_gone() {
        let current = json!({"phase": "Running", "podIP": "10.0.0.7", "startTime": "s"});
        let s = StatusBuilder::new(&current, now())
            .failed(None, &Failure::new("PodLost", "gone"))
            .to_value();
        assert_eq!(s["phase"], "Failed");
        assert_eq!(s["podIP"], "10.0.0.7");
        assert_eq!(s["reason"], "PodLost");
        assert_eq!(s["conditions"][0]["reason"], "PodLost");
        assert_eq!(s["conditions"][0]["lastTransitionTime"], now().to_string());
    }

    #[test]
    fn condition_time_is_stable_across_reconciles() {
        let p = s1().running("10.0.0.7").build();
        let first = StatusBuilder::new(&Value::Null, now())
            .mirror(&p)
            .to_value();
        let later: Timestamp = "2026-11-22T11:00:00Z".parse().unwrap();
        let second = StatusBuilder::new(&first, later).mirror(&p);
        assert_eq!(first, second.to_value());
        assert!(!needs_write(&first, &second));
        assert_eq!(ready_since(&second.to_value()), Some(now()));
    }

    #[test]
    fn pending_churn_is_folded_but_phase_changes_are_written() {
        let created = StatusBuilder::new(&Value::Null, now()).created().to_value();
        let p = s1()
            .started("s")
            .container_waiting("browser", "ContainerCreating", None)
            .build();
        let pending = StatusBuilder::new(&created, now()).mirror(&p);
        assert!(!needs_write(&created, &pending));
        let p = s1().running("10.0.0.7").build();
        let running = StatusBuilder::new(&created, now()).mirror(&p);
        assert!(needs_write(&created, &running));
    }
}
