//! The reconcile decision (docs/behaviour.md, "Lifecycle"): from the Browser, its Pod (or its
//! confirmed absence), the outcome of rendering a pod for it, and the time, decide every write
//! and when to look again. Nothing here talks to the API; `controller::execute` performs the
//! returned [`Plan`].

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kube_core::DynamicObject;
use serde_json::Value;

use super::capacity::{self, Exhausted, Position, QuotaRefusal};
use super::plan::{Event, LeftLine, Plan, PodAdoption, PodCreation, PodDelete, Settings};
use super::reason::Reason;
use super::status::{self, Failure, StatusBuilder};
use crate::api::browser::{Browser, Phase, SpecField};
use crate::api::keys;
use crate::api::owner;
use crate::api::status::BrowserStatus;
use crate::duration;
use crate::names;

/// How long to wait before looking at a foreign pod that is terminating again: such pods
/// carry no label of ours, so no watch event announces their removal.
const FOREIGN_POD_POLL: Duration = Duration::from_secs(1);

/// Whether the operator's finalizer is on `browser`.
pub fn holds_finalizer(browser: &DynamicObject) -> bool {
    browser
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == keys::FINALIZER))
}

/// The state a reconcile starts from. `pod: None` means the pod is confirmed absent.
pub struct Observed<'a> {
    pub browser: &'a DynamicObject,
    pub pod: Option<&'a Value>,
    pub now: Timestamp,
    /// When the operator's link to the API server last came back after it was lost (a
    /// restart of the API server, a partition): other clients' watches were likely cut too,
    /// and relist on their own schedule.
    pub link_regained: Option<Timestamp>,
    /// The Browser's namespace as the capacity queue sees it.
    pub line: Line<'a>,
}

/// What the capacity queue knows of a Browser's namespace (docs/behaviour.md, "Capacity
/// queue").
#[derive(Debug, Clone, Copy, Default)]
pub struct Line<'a> {
    /// Where the Browser stands, or would once it joins.
    pub place: Position,
    /// The namespace's ResourceQuotas.
    pub quotas: &'a [Value],
}

impl Observed<'_> {
    fn status(&self) -> &Value {
        self.browser.data.get("status").unwrap_or(&Value::Null)
    }

    fn phase(&self) -> Option<Phase> {
        Browser::new(self.browser).phase()
    }

    fn has_finalizer(&self) -> bool {
        holds_finalizer(self.browser)
    }

    fn created(&self) -> Timestamp {
        self.browser
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(self.now, |t| t.0)
    }

    fn builder(&self) -> StatusBuilder<'_> {
        StatusBuilder::new(self.status(), self.now)
    }

    /// The pod, if it is controlled by this Browser (same UID).
    fn owned_pod(&self) -> Option<&Value> {
        let uid = self.browser.metadata.uid.as_deref()?;
        self.pod.filter(|pod| controller_uid(pod) == Some(uid))
    }

    /// A pod was created for this Browser before: a second one is never created
    /// (docs/behaviour.md, "One pod per Browser"). A Browser waiting in line is `Pending`
    /// without one.
    fn had_pod(&self) -> bool {
        let s = self.status();
        (matches!(
            self.phase(),
            Some(Phase::Pending | Phase::Running | Phase::Unknown)
        ) && self.queued_since().is_none())
            || s.get("podIP").is_some()
            || s.get("startTime").is_some()
    }

    /// When the Browser started waiting in line, if it waits.
    fn queued_since(&self) -> Option<Timestamp> {
        let created = self
            .browser
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0);
        capacity::queued_since(self.status(), created)
    }

    /// The operator's labels a pod of this Browser carries; a part whose value would not be
    /// a valid label value (an invalid spec) is left out.
    fn pod_labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([(keys::LABEL_MANAGED_BY.into(), keys::MANAGER.into())]);
        if let Some(name) = self.browser.metadata.name.as_deref() {
            labels.insert(keys::LABEL_BROWSER.into(), names::label_value_for(name));
        }
        let fields = Browser::new(self.browser).fields();
        for (key, field) in [
            (keys::LABEL_BROWSER_NAME, SpecField::BrowserName),
            (keys::LABEL_BROWSER_VERSION, SpecField::BrowserVersion),
        ] {
            if let Ok(value) = fields.field(field) {
                labels.insert(key.into(), value.into());
            }
        }
        labels
    }

    /// The adoption of the pod this Browser controls, when it lacks the operator's labels (pods
    /// are watched only through the operator's label).
    fn adoption(&self) -> Option<PodAdoption> {
        let pod = self.owned_pod()?;
        let labels = self.pod_labels();
        let current = pod.pointer("/metadata/labels");
        let labelled = labels.iter().all(|(k, v)| {
            current.and_then(|l| l.get(k)).and_then(Value::as_str) == Some(v.as_str())
        });
        (!labelled).then(|| PodAdoption {
            uid: pod_uid(pod),
            labels,
        })
    }

    fn labels_ok(&self, name: &str, version: &str) -> bool {
        let labels = self.browser.metadata.labels.as_ref();
        let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
        let browser = self
            .browser
            .metadata
            .name
            .as_deref()
            .map(names::label_value_for);
        get(keys::LABEL_BROWSER) == browser.as_deref()
            && get(keys::LABEL_BROWSER_NAME) == Some(name)
            && get(keys::LABEL_BROWSER_VERSION) == Some(version)
    }
}

/// The UID of the pod's controller owner reference.
pub fn controller_uid(pod: &Value) -> Option<&str> {
    pod.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?
        .get("uid")?
        .as_str()
}

fn is_terminating(object: &Value) -> bool {
    object.pointer("/metadata/deletionTimestamp").is_some()
}

fn after(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

fn pod_uid(pod: &Value) -> String {
    pod.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Decides one reconcile. `creation` is called only when the Browser needs its pod now.
pub fn decide(obs: &Observed, settings: &Settings, creation: impl FnOnce() -> PodCreation) -> Plan {
    if obs.browser.metadata.deletion_timestamp.is_some() {
        return deleting(obs, settings);
    }
    if matches!(obs.phase(), Some(Phase::Failed | Phase::Succeeded)) {
        return terminal(obs, settings);
    }
    let mut plan = Plan::default();
    let key = match Browser::new(obs.browser).spec() {
        Ok(key) => key,
        Err(invalid) => {
            fail(&mut plan, obs, settings, invalid.into(), Some(0));
            return plan;
        }
    };
    plan.ensure_metadata = !obs.has_finalizer() || !obs.labels_ok(key.name, key.version);

    if let Some(max) = settings.max_lifetime {
        let deadline = after(obs.created(), max);
        if obs.now >= deadline {
            let failure = Failure::new(
                Reason::LifetimeExceeded,
                format!(
                    "browser exceeded its maximum lifetime of {}",
                    duration::format(max)
                ),
            );
            fail(&mut plan, obs, settings, failure, None);
            return plan;
        }
        plan.requeue_at(obs.now, deadline);
    }

    match obs.pod {
        None if obs.had_pod() => {
            let failure = Failure::new(
                Reason::PodLost,
                "pod disappeared after it was created; a browser pod is never recreated because the session is bound to its IP",
            );
            fail(&mut plan, obs, settings, failure, None);
        }
        None => without_pod(&mut plan, obs, settings, creation),
        Some(pod) if obs.owned_pod().is_none() => foreign_pod(&mut plan, obs, settings, pod),
        Some(pod) => {
            plan.adopt_pod = obs.adoption();
            owned_pod(&mut plan, obs, settings, pod);
        }
    }
    plan.requeue_within(settings.resync);
    plan
}

/// A Browser that needs its pod: create it, unless it has to wait in line for quota
/// (docs/behaviour.md, "Capacity queue"): a Browser of the namespace that was created earlier
/// waits (nobody overtakes it), or the ResourceQuotas have no room for its pod after those of
/// the Browsers created earlier that are not handled yet. A Browser that waited longer than
/// `--queue-timeout` fails.
fn without_pod(
    plan: &mut Plan,
    obs: &Observed,
    settings: &Settings,
    creation: impl FnOnce() -> PodCreation,
) {
    let queued = obs.queued_since();
    if let Some(since) = queued {
        let deadline = after(since, settings.queue_timeout);
        if obs.now >= deadline {
            give_up_waiting(plan, obs, settings, since);
            return;
        }
        plan.requeue_at(obs.now, deadline);
    }
    let (pod, removed) = match creation() {
        PodCreation::Render { pod, removed } => (pod, removed),
        PodCreation::Fail(failure) => {
            fail(plan, obs, settings, failure, None);
            return;
        }
    };
    if !settings.queue_timeout.is_zero() {
        let earlier = u64::try_from(obs.line.place.arriving).unwrap_or(u64::MAX);
        let room = capacity::room(obs.line.quotas, &pod, earlier.saturating_add(1));
        if obs.line.place.ahead > 0 || room.is_err() {
            if queued.is_none() {
                join_line(plan, obs, settings, room.err().as_ref());
            }
            return;
        }
    }
    let image = pod
        .pointer("/spec/containers/0/image")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    plan.create_pod = Some(pod);
    set_status(plan, obs, obs.builder().created());
    if let Some(since) = queued {
        let waited = waited(obs, since);
        plan.events.push(Event {
            warning: false,
            reason: Reason::Admitted.into(),
            note: format!(
                "admitted after waiting {} in line",
                duration::format(waited)
            ),
            action: "CreatePod",
        });
        plan.left_line = Some(LeftLine::Admitted(waited));
    }
    plan.events.push(Event {
        warning: false,
        reason: Reason::PodCreated.into(),
        note: format!("created pod with image {image}"),
        action: "CreatePod",
    });
    if !removed.is_empty() {
        plan.events.push(Event {
            warning: true,
            reason: Reason::PodFieldsRemoved.into(),
            note: format!(
                "removed from the pod because the cluster's Pod schema does not declare them: {}",
                removed.join(", ")
            ),
            action: "CreatePod",
        });
    }
    plan.requeue_at(obs.now, after(obs.now, settings.creation_timeout));
}

/// How long the Browser has waited in line, whole seconds.
fn waited(obs: &Observed, since: Timestamp) -> Duration {
    let waited = Duration::try_from(obs.now.duration_since(since)).unwrap_or(Duration::ZERO);
    Duration::from_secs(waited.as_secs())
}

/// The Browser starts waiting in line: `Pending` with reason `Queued`, the quota and its
/// place in the message, one Event; looked at again at its timeout, or when the line moves.
fn join_line(plan: &mut Plan, obs: &Observed, settings: &Settings, exhausted: Option<&Exhausted>) {
    let owner = owner::of(obs.browser);
    let message = capacity::waiting_message(exhausted, &obs.line.place, &owner);
    let waiting = Failure::new(Reason::Queued, message.clone());
    set_status(plan, obs, obs.builder().queued(&waiting));
    plan.events.push(Event {
        warning: false,
        reason: Reason::Queued.into(),
        note: message,
        action: "Queue",
    });
    plan.requeue_at(obs.now, after(obs.now, settings.queue_timeout));
}

/// The Browser waited `--queue-timeout` in vain: it fails with `QuotaExceeded`.
fn give_up_waiting(plan: &mut Plan, obs: &Observed, settings: &Settings, since: Timestamp) {
    let waiting = obs
        .status()
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let failure = Failure::new(
        Reason::QuotaExceeded,
        capacity::gave_up_message(waiting, settings.queue_timeout),
    );
    fail(plan, obs, settings, failure, None);
    plan.left_line = Some(LeftLine::TimedOut(waited(obs, since)));
}

/// The plan after a ResourceQuota refused the Browser's pod (`QuotaRefusal`, with the API
/// server's `message`): the Browser waits in line, first unless others wait ahead of it, or
/// fails as it would without a queue (`--queue-timeout=0`, or its time in line is up).
pub fn refused_by_quota(obs: &Observed, settings: &Settings, message: &str) -> Plan {
    let mut plan = Plan::default();
    if settings.queue_timeout.is_zero() {
        fail(
            &mut plan,
            obs,
            settings,
            Failure::new(Reason::QuotaExceeded, message),
            None,
        );
        return plan;
    }
    let exhausted = QuotaRefusal::parse(message).map(|r| r.exhausted);
    match obs.queued_since() {
        Some(since) if obs.now >= after(since, settings.queue_timeout) => {
            give_up_waiting(&mut plan, obs, settings, since);
        }
        Some(since) => {
            // Still waiting: the message shows what the quota said this time; no new Event.
            let owner = owner::of(obs.browser);
            let message = capacity::waiting_message(exhausted.as_ref(), &obs.line.place, &owner);
            let waiting = Failure::new(Reason::Queued, message);
            set_status(&mut plan, obs, obs.builder().queued(&waiting));
            plan.requeue_at(obs.now, after(since, settings.queue_timeout));
        }
        None => join_line(&mut plan, obs, settings, exhausted.as_ref()),
    }
    plan
}

fn foreign_pod(plan: &mut Plan, obs: &Observed, settings: &Settings, pod: &Value) {
    let name = obs.browser.metadata.name.as_deref().unwrap_or_default();
    if is_terminating(pod) {
        let deadline = after(obs.created(), settings.creation_timeout);
        if obs.now < deadline {
            plan.requeue_within(FOREIGN_POD_POLL);
            return;
        }
        let failure = Failure::new(
            Reason::PodCreationTimeout,
            format!(
                "pod creation timeout exceeded after {}, pod name {name} is held by a terminating pod this Browser does not control",
                duration::format(settings.creation_timeout)
            ),
        );
        fail(plan, obs, settings, failure, None);
        return;
    }
    let owner = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|refs| {
            refs.iter()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        })
        .map(|r| {
            format!(
                "{}/{}",
                r.get("kind").and_then(Value::as_str).unwrap_or("?"),
                r.get("name").and_then(Value::as_str).unwrap_or("?")
            )
        })
        .unwrap_or_else(|| "none".into());
    let failure = Failure::new(
        Reason::PodConflict,
        format!(
            "pod {name} already exists and is not controlled by this Browser (controller: {owner}); it is left untouched"
        ),
    );
    fail(plan, obs, settings, failure, None);
}

fn owned_pod(plan: &mut Plan, obs: &Observed, settings: &Settings, pod: &Value) {
    if is_terminating(pod) {
        let failure = Failure::new(
            Reason::PodDeleted,
            "pod was deleted while the browser session was alive",
        );
        fail(plan, obs, settings, failure, None);
        return;
    }
    match status::pod_phase(pod) {
        Phase::Failed => fail(plan, obs, settings, status::pod_failure(pod), Some(0)),
        Phase::Succeeded => {
            let desired = obs.builder().succeeded(pod);
            set_status(plan, obs, desired);
            plan.delete_pod = Some(PodDelete {
                uid: pod_uid(pod),
                grace_seconds: None,
            });
            plan.events.push(Event {
                warning: false,
                reason: Phase::Succeeded.as_str().into(),
                note: "pod completed; deleting it".into(),
                action: "DeletePod",
            });
        }
        Phase::Running if status::pod_ip(pod).is_some() => {
            if let Some(failure) = status::critical_termination(pod) {
                fail(plan, obs, settings, failure, None);
                return;
            }
            let desired = obs.builder().mirror(pod);
            if obs.phase() != Some(Phase::Running) {
                plan.events.push(Event {
                    warning: false,
                    reason: Phase::Running.as_str().into(),
                    note: format!("pod running at {}", status::pod_ip(pod).unwrap_or_default()),
                    action: "ObservePod",
                });
            }
            set_status(plan, obs, desired);
        }
        Phase::Pending | Phase::Running => {
            if let Some(failure) = status::pending_failure(pod) {
                fail(plan, obs, settings, failure, Some(0));
                return;
            }
            let started = status::created_at(pod).unwrap_or_else(|| obs.created());
            let deadline = after(started, settings.creation_timeout);
            if obs.now >= deadline {
                let failure = Failure::new(
                    Reason::PodCreationTimeout,
                    format!(
                        "pod creation timeout exceeded after {}, {}",
                        duration::format(settings.creation_timeout),
                        status::pending_detail(pod)
                    ),
                );
                fail(plan, obs, settings, failure, Some(0));
                return;
            }
            set_status(plan, obs, obs.builder().mirror(pod));
            plan.requeue_at(obs.now, deadline);
        }
        _ => set_status(plan, obs, obs.builder().mirror(pod)),
    }
}

/// docs/behaviour.md, "Cleanup table": write `Failed` with reason and message first, then
/// delete the pod we control (never a foreign one, never one already terminating).
fn fail(
    plan: &mut Plan,
    obs: &Observed,
    settings: &Settings,
    failure: Failure,
    grace_seconds: Option<i64>,
) {
    let pod = obs.owned_pod();
    let desired = obs.builder().failed(pod, &failure);
    set_status(plan, obs, desired);
    if let Some(pod) = pod.filter(|p| !is_terminating(p)) {
        plan.delete_pod = Some(PodDelete {
            uid: pod_uid(pod),
            grace_seconds,
        });
    }
    plan.events.push(Event {
        warning: true,
        reason: failure.reason,
        note: failure.message,
        action: "Fail",
    });
    // The status write wakes the next reconcile; this only covers a lost event.
    plan.requeue_after = Some(settings.failed_retention.max(Duration::from_secs(1)));
}

/// The plan after the API rejected a write for good (a pod create refused with 403 or 422, a
/// write refused again and again): fail the Browser.
pub fn rejected(obs: &Observed, settings: &Settings, failure: Failure) -> Plan {
    let mut plan = Plan::default();
    fail(&mut plan, obs, settings, failure, None);
    plan
}

/// The plan when even the Browser's failure cannot be written: force the pod away and delete
/// the Browser, releasing the finalizer, so that the hub sees the session end.
pub fn abandoned(obs: &Observed, message: &str) -> Plan {
    let mut plan = Plan {
        delete_browser: true,
        release_finalizer: obs.has_finalizer(),
        events: vec![Event {
            warning: true,
            reason: Reason::WriteRejected.into(),
            note: format!(
                "the API server refuses to take this Browser's failure ({message}); deleting the Browser and its pod"
            ),
            action: "Delete",
        }],
        ..Plan::default()
    };
    if let Some(pod) = obs.owned_pod() {
        plan.delete_pod = Some(PodDelete {
            uid: pod_uid(pod),
            grace_seconds: Some(0),
        });
    }
    plan
}

fn set_status(plan: &mut Plan, obs: &Observed, desired: BrowserStatus) {
    if status::needs_write(obs.status(), &desired) {
        plan.status = Some(desired);
    }
}

/// A Browser already `Failed` or `Succeeded`: make sure the pod goes, keep the Browser
/// visible for the retention, and after a lost link until the watchers that reconnect late
/// could see how it ended (a client that relists after its deletion learns only that it is
/// gone: the hub then waits out its whole startup timeout), then delete it and release the
/// finalizer. A pod still
/// terminating within its deletion timeout keeps the finalizer: the deletion path waits
/// for it and forces it after the timeout, so no pod outlives its Browser (a pod on a dead
/// node would otherwise stay Terminating with nobody to force it).
fn terminal(obs: &Observed, settings: &Settings) -> Plan {
    let mut plan = Plan::default();
    let mut pod_terminating = false;
    if let Some(pod) = obs.owned_pod() {
        match status::deletion_requested_at(pod) {
            None => {
                plan.delete_pod = Some(PodDelete {
                    uid: pod_uid(pod),
                    grace_seconds: Some(0),
                });
            }
            Some(requested) if obs.now >= after(requested, settings.deletion_timeout) => {
                plan.delete_pod = Some(PodDelete {
                    uid: pod_uid(pod),
                    grace_seconds: Some(0),
                });
            }
            // Already terminating within its grace period: the kubelet finishes it.
            Some(_) => pod_terminating = true,
        }
    }
    let since = status::ready_since(obs.status()).unwrap_or_else(|| obs.created());
    let mut keep_until = after(since, settings.failed_retention);
    if let Some(regained) = obs.link_regained {
        keep_until = keep_until.max(after(regained, settings.outage_retention));
    }
    if obs.now < keep_until {
        plan.requeue_at(obs.now, keep_until);
        return plan;
    }
    plan.delete_browser = true;
    plan.release_finalizer = obs.has_finalizer() && !pod_terminating;
    plan
}

/// A pod of the operator whose Browser no longer exists (the API server confirmed it): no
/// finalizer will see it go, so it is deleted here, with its grace period, and forced once it
/// is still terminating `--browser-pod-deletion-timeout` after its deletion was requested
/// (docs/behaviour.md, "Cleanup table").
pub fn orphaned(pod: &Value, now: Timestamp, settings: &Settings) -> Plan {
    let mut plan = Plan::default();
    match status::deletion_requested_at(pod) {
        None => {
            plan.delete_pod = Some(PodDelete {
                uid: pod_uid(pod),
                grace_seconds: None,
            });
            plan.requeue_at(now, after(now, settings.deletion_timeout));
        }
        Some(requested) => {
            let deadline = after(requested, settings.deletion_timeout);
            if now >= deadline {
                plan.delete_pod = Some(PodDelete {
                    uid: pod_uid(pod),
                    grace_seconds: Some(0),
                });
            } else {
                plan.requeue_at(now, deadline);
            }
        }
    }
    plan
}

/// The Browser is being deleted (docs/behaviour.md, "Cleanup table"): delete the pod with its
/// grace period, wait for it to go (force after `--browser-pod-deletion-timeout`), then release
/// the finalizer.
fn deleting(obs: &Observed, settings: &Settings) -> Plan {
    let mut plan = Plan::default();
    if !obs.has_finalizer() {
        return plan;
    }
    let Some(pod) = obs.owned_pod() else {
        plan.release_finalizer = true;
        return plan;
    };
    // Only a labelled pod's removal is announced by the watch this path waits on.
    plan.adopt_pod = obs.adoption();
    match status::deletion_requested_at(pod) {
        None => {
            plan.delete_pod = Some(PodDelete {
                uid: pod_uid(pod),
                grace_seconds: None,
            });
            plan.events.push(Event {
                warning: false,
                reason: Reason::DeletingPod.into(),
                note: "Browser deleted; deleting its pod".into(),
                action: "DeletePod",
            });
            plan.requeue_at(obs.now, after(obs.now, settings.deletion_timeout));
        }
        Some(requested) => {
            let deadline = after(requested, settings.deletion_timeout);
            if obs.now >= deadline {
                plan.delete_pod = Some(PodDelete {
                    uid: pod_uid(pod),
                    grace_seconds: Some(0),
                });
                plan.release_finalizer = true;
                plan.events.push(Event {
                    warning: true,
                    reason: Reason::PodDeletionTimeout.into(),
                    note: format!(
                        "pod still terminating {} after its deletion was requested; force-deleted",
                        duration::format(settings.deletion_timeout)
                    ),
                    action: "DeletePod",
                });
            } else {
                plan.requeue_at(obs.now, deadline);
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status a plan writes, as the API server receives it.
    fn written(status: Option<BrowserStatus>) -> Value {
        status.expect("the plan writes a status").to_value()
    }
    use crate::fixtures::{self, Fixture, browser, pod};
    use serde_json::json;

    const UID: &str = "b-uid";

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// Browser `name` in `ns` as a client creates it: no finalizer or labels yet.
    fn client_made(name: &str) -> Fixture<fixtures::Browser> {
        browser(name)
            .namespace("ns")
            .uid(UID)
            .created("2026-11-22T10:00:00Z")
    }

    /// Browser `s1` as the operator leaves it once it has written its metadata.
    fn ours() -> Fixture<fixtures::Browser> {
        client_made("s1").finalized().labelled()
    }

    /// The pod `s1` on node `n1`, controlled by the Browser of UID `owner`.
    fn pod_of(owner: &str) -> Fixture<fixtures::Pod> {
        pod("s1")
            .uid("p-uid")
            .created("2026-11-22T10:00:01Z")
            .node("n1")
            .owned_by(owner)
    }

    fn rendered() -> PodCreation {
        PodCreation::Render {
            pod: json!({"spec": {"containers": [{"name": "browser", "image": "chrome:139"}]}}),
            removed: Vec::new(),
        }
    }

    fn run(b: &DynamicObject, p: Option<&Value>, now: &str, settings: &Settings) -> Plan {
        decide(
            &Observed {
                browser: b,
                pod: p,
                now: t(now),
                link_regained: None,
                line: Line::default(),
            },
            settings,
            rendered,
        )
    }

    fn no_creation() -> PodCreation {
        panic!("creation must not be asked for")
    }

    #[test]
    fn a_pod_whose_browser_is_gone_is_deleted_then_forced_after_the_deletion_timeout() {
        let settings = Settings::default();
        let running = pod_of(UID).phase("Running").build();
        let plan = orphaned(&running, t("2026-11-22T10:00:05Z"), &settings);
        assert_eq!(
            plan.delete_pod,
            Some(PodDelete {
                uid: "p-uid".into(),
                grace_seconds: None
            })
        );
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(300)));
        let terminating = pod_of(UID)
            .phase("Running")
            .deleting("2026-11-22T10:00:35Z", 30)
            .build();
        let waiting = orphaned(&terminating, t("2026-11-22T10:01:00Z"), &settings);
        // Requested at 10:00:05 (the deletion timestamp less the grace period).
        assert_eq!(waiting.delete_pod, None, "terminating within its timeout");
        assert_eq!(waiting.requeue_after, Some(Duration::from_secs(245)));
        let late = orphaned(&terminating, t("2026-11-22T10:05:05Z"), &settings);
        assert_eq!(
            late.delete_pod,
            Some(PodDelete {
                uid: "p-uid".into(),
                grace_seconds: Some(0)
            })
        );
    }

    // ---- the capacity queue ---------------------------------------------------------------

    /// A ResourceQuota `q` of `pods: hard` with `used` counted.
    fn pods_quota(used: u32, hard: u32) -> Value {
        let (used, hard) = (used.to_string(), hard.to_string());
        json!({
            "metadata": {"name": "q"},
            "spec": {"hard": {"pods": hard}},
            "status": {"hard": {"pods": hard}, "used": {"pods": used}},
        })
    }

    /// Browser `s1` waiting in line since 10:00:02, with `message`.
    fn waiting(message: &str) -> Fixture<fixtures::Browser> {
        ours().status(json!({
            "phase": "Pending", "reason": "Queued", "message": message,
            "conditions": [{"type": "Ready", "status": "False", "reason": "Queued",
                            "message": message, "lastTransitionTime": "2026-11-22T10:00:02Z"}],
        }))
    }

    fn in_line(b: &DynamicObject, now: &str, ahead: usize, quotas: &[Value]) -> Plan {
        decide(
            &Observed {
                browser: b,
                pod: None,
                now: t(now),
                link_regained: None,
                line: Line {
                    place: Position {
                        ahead,
                        arriving: 0,
                        ..Position::default()
                    },
                    quotas,
                },
            },
            &Settings::default(),
            rendered,
        )
    }

    #[test]
    fn a_browser_the_quota_has_no_room_for_waits_in_line_without_a_create() {
        let b = ours().object();
        let plan = in_line(&b, "2026-11-22T10:00:02Z", 0, &[pods_quota(2, 2)]);
        assert_eq!(plan.create_pod, None, "no create the quota would refuse");
        let status = written(plan.status);
        assert_eq!(status["phase"], "Pending");
        assert_eq!(status["reason"], "Queued");
        assert_eq!(
            status["message"],
            "waiting for quota q (pods 2/2), 1st in line"
        );
        assert_eq!(status["conditions"][0]["reason"], "Queued");
        assert_eq!(status["conditions"][0]["message"], status["message"]);
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.events[0].reason, "Queued");
        assert!(!plan.events[0].warning);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(120)));
    }

    #[test]
    fn nobody_overtakes_a_browser_waiting_ahead_even_when_there_is_room() {
        let b = ours().object();
        let plan = in_line(&b, "2026-11-22T10:00:02Z", 2, &[pods_quota(1, 2)]);
        assert_eq!(plan.create_pod, None);
        assert_eq!(
            written(plan.status)["message"],
            "waiting for quota, 3rd in line"
        );
    }

    #[test]
    fn a_slot_goes_to_the_earlier_browser_even_when_the_later_is_decided_first() {
        // One slot left; one Browser created earlier is not handled yet: it gets the slot.
        let b = ours().object();
        let quotas = [pods_quota(1, 2)];
        let obs = |arriving| Observed {
            browser: &b,
            pod: None,
            now: t("2026-11-22T10:00:02Z"),
            link_regained: None,
            line: Line {
                place: Position {
                    ahead: 0,
                    arriving,
                    ..Position::default()
                },
                quotas: &quotas,
            },
        };
        let plan = decide(&obs(1), &Settings::default(), rendered);
        assert_eq!(plan.create_pod, None);
        assert_eq!(
            written(plan.status)["message"],
            "waiting for quota q (pods 2/2), 2nd in line"
        );
        assert!(
            decide(&obs(0), &Settings::default(), rendered)
                .create_pod
                .is_some()
        );
    }

    #[test]
    fn a_waiting_browser_stays_quiet_until_room_frees_and_nobody_is_ahead() {
        let b = waiting("waiting for quota q (pods 2/2), 2nd in line").object();
        for (ahead, used) in [(1, 1), (0, 2)] {
            let plan = in_line(&b, "2026-11-22T10:01:00Z", ahead, &[pods_quota(used, 2)]);
            assert_eq!(plan.create_pod, None);
            assert_eq!(plan.status, None, "the place in line is not rewritten");
            assert!(plan.events.is_empty());
            assert_eq!(
                plan.requeue_after,
                Some(Duration::from_secs(62)),
                "looked at again at its timeout"
            );
        }
    }

    #[test]
    fn the_first_in_line_is_admitted_once_the_quota_has_room() {
        let b = waiting("waiting for quota q (pods 2/2), 1st in line").object();
        let plan = in_line(&b, "2026-11-22T10:00:47Z", 0, &[pods_quota(1, 2)]);
        assert!(plan.create_pod.is_some());
        let status = written(plan.status);
        assert_eq!(status["phase"], "Pending");
        assert!(status.get("reason").is_none(), "{status}");
        let reasons: Vec<&str> = plan.events.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(reasons, ["Admitted", "PodCreated"]);
        assert_eq!(plan.events[0].note, "admitted after waiting 45s in line");
        assert_eq!(
            plan.left_line,
            Some(LeftLine::Admitted(Duration::from_secs(45)))
        );
    }

    #[test]
    fn a_browser_still_waiting_at_its_timeout_fails_saying_how_long_it_waited() {
        let b = waiting("waiting for quota q (pods 2/2), 3rd in line").object();
        let plan = in_line(&b, "2026-11-22T10:02:02Z", 1, &[pods_quota(2, 2)]);
        assert_eq!(plan.create_pod, None);
        let status = written(plan.status);
        assert_eq!(status["phase"], "Failed");
        assert_eq!(status["reason"], "QuotaExceeded");
        assert_eq!(
            status["message"],
            "gave up waiting for quota q (pods 2/2) after 2m0s (--queue-timeout)"
        );
        assert_eq!(
            plan.left_line,
            Some(LeftLine::TimedOut(Duration::from_secs(120)))
        );
    }

    #[test]
    fn a_browser_without_a_config_fails_at_once_even_behind_others() {
        let b = ours().object();
        let plan = decide(
            &Observed {
                browser: &b,
                pod: None,
                now: t("2026-11-22T10:00:02Z"),
                link_regained: None,
                line: Line {
                    place: Position {
                        ahead: 3,
                        arriving: 0,
                        ..Position::default()
                    },
                    quotas: &[],
                },
            },
            &Settings::default(),
            || PodCreation::Fail(Failure::new(Reason::ConfigNotFound, "no config")),
        );
        assert_eq!(written(plan.status)["reason"], "ConfigNotFound");
    }

    #[test]
    fn a_waiting_browser_without_a_pod_is_not_taken_for_one_that_lost_it() {
        let b = waiting("waiting for quota q (pods 2/2), 1st in line").object();
        let plan = in_line(&b, "2026-11-22T10:00:30Z", 0, &[]);
        assert!(plan.create_pod.is_some(), "not PodLost: it never had a pod");
    }

    #[test]
    fn without_a_queue_the_quota_is_left_to_the_api_server() {
        let b = ours().object();
        let settings = Settings {
            queue_timeout: Duration::ZERO,
            ..Settings::default()
        };
        let obs = Observed {
            browser: &b,
            pod: None,
            now: t("2026-11-22T10:00:02Z"),
            link_regained: None,
            line: Line {
                place: Position {
                    ahead: 2,
                    arriving: 0,
                    ..Position::default()
                },
                quotas: &[pods_quota(2, 2)],
            },
        };
        assert!(decide(&obs, &settings, rendered).create_pod.is_some());
        let message = "pods \"s1\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2";
        let plan = refused_by_quota(&obs, &settings, message);
        let status = written(plan.status);
        assert_eq!(
            (status["reason"].as_str(), status["message"].as_str()),
            (Some("QuotaExceeded"), Some(message))
        );
    }

    #[test]
    fn a_refused_create_puts_the_browser_in_line_with_what_the_quota_said() {
        let message = "pods \"s1\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2";
        let fresh = ours().object();
        let obs = |b| Observed {
            browser: b,
            pod: None,
            now: t("2026-11-22T10:00:30Z"),
            link_regained: None,
            line: Line {
                place: Position {
                    ahead: 0,
                    arriving: 0,
                    ..Position::default()
                },
                quotas: &[],
            },
        };
        let plan = refused_by_quota(&obs(&fresh), &Settings::default(), message);
        assert_eq!(
            written(plan.status)["message"],
            "waiting for quota q (pods 2/2), 1st in line"
        );
        assert_eq!(plan.events[0].reason, "Queued");
        // Refused again while waiting: what the quota said now, no second Event.
        let waiting = waiting("waiting for quota q (pods 1/1), 1st in line").object();
        let plan = refused_by_quota(&obs(&waiting), &Settings::default(), message);
        assert_eq!(
            written(plan.status)["message"],
            "waiting for quota q (pods 2/2), 1st in line"
        );
        assert!(plan.events.is_empty());
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(92)));
    }

    #[test]
    fn an_abandoned_browser_goes_with_its_pod_forced() {
        let b = ours().phase("Pending").object();
        let p = pod_of(UID).phase("Pending").build();
        let obs = Observed {
            browser: &b,
            pod: Some(&p),
            now: t("2026-11-22T10:00:05Z"),
            link_regained: None,
            line: Line::default(),
        };
        let plan = abandoned(&obs, "limit is 3145728");
        assert!(plan.delete_browser && plan.release_finalizer);
        assert_eq!(
            plan.delete_pod,
            Some(PodDelete {
                uid: "p-uid".into(),
                grace_seconds: Some(0)
            })
        );
        assert!(plan.status.is_none() && plan.create_pod.is_none());
        assert_eq!(plan.events[0].reason, "WriteRejected");
        // A foreign pod of the name is left alone.
        let foreign = pod_of("other").phase("Running").build();
        let obs = Observed {
            pod: Some(&foreign),
            ..obs
        };
        assert_eq!(abandoned(&obs, "x").delete_pod, None);
    }

    #[test]
    fn a_long_name_is_labelled_once_with_its_label_value() {
        let long = format!("s1-{}", "a".repeat(200));
        // The fixture labels it with names::label_value_for, as the operator does.
        let labelled = client_made(&long).finalized().labelled().object();
        let plan = run(
            &labelled,
            None,
            "2026-11-22T10:00:00Z",
            &Settings::default(),
        );
        assert!(
            !plan.ensure_metadata,
            "labels as applied are taken as right"
        );
        assert!(plan.create_pod.is_some());
        let unlabelled = client_made(&long).finalized().object();
        let plan = run(
            &unlabelled,
            None,
            "2026-11-22T10:00:00Z",
            &Settings::default(),
        );
        assert!(plan.ensure_metadata);
    }

    #[test]
    fn new_browser_gets_metadata_pod_and_pending_in_one_reconcile() {
        let b = client_made("s1").object();
        let plan = run(&b, None, "2026-11-22T10:00:00Z", &Settings::default());
        assert!(plan.ensure_metadata);
        assert!(plan.create_pod.is_some());
        assert_eq!(written(plan.status.clone())["phase"], "Pending");
        assert_eq!(plan.events[0].reason, "PodCreated");
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(300)));
    }

    #[test]
    fn fields_removed_from_the_pod_are_reported_with_its_creation_only() {
        let b = client_made("s1").object();
        let creation = || PodCreation::Render {
            pod: json!({"spec": {"containers": [{"name": "browser", "image": "chrome:139"}]}}),
            removed: vec![
                "spec.initContainers[seleniferous].restartPolicy".into(),
                "spec.containers[browser].resources.claims".into(),
            ],
        };
        let observed = Observed {
            browser: &b,
            pod: None,
            now: t("2026-11-22T10:00:00Z"),
            link_regained: None,
            line: Line::default(),
        };
        let plan = decide(&observed, &Settings::default(), creation);
        assert!(plan.create_pod.is_some());
        let warning = &plan.events[1];
        assert!(warning.warning);
        assert_eq!(warning.reason, "PodFieldsRemoved");
        assert_eq!(
            warning.note,
            "removed from the pod because the cluster's Pod schema does not declare them: spec.initContainers[seleniferous].restartPolicy, spec.containers[browser].resources.claims"
        );
    }

    #[test]
    fn config_failures_fail_without_a_pod() {
        let b = ours().object();
        let plan = decide(
            &Observed {
                browser: &b,
                pod: None,
                now: t("2026-11-22T10:00:00Z"),
                link_regained: None,
                line: Line::default(),
            },
            &Settings::default(),
            || {
                PodCreation::Fail(Failure::new(
                    "ConfigNotFound",
                    "Browser configuration not found",
                ))
            },
        );
        let s = written(plan.status);
        assert_eq!(
            (s["phase"].as_str(), s["reason"].as_str()),
            (Some("Failed"), Some("ConfigNotFound"))
        );
        assert!(plan.create_pod.is_none() && plan.delete_pod.is_none());
        assert!(plan.events[0].warning);
    }

    #[test]
    fn a_lost_pod_is_never_recreated() {
        let b = ours().running("10.0.0.1").object();
        let plan = decide(
            &Observed {
                browser: &b,
                pod: None,
                now: t("2026-11-22T10:01:00Z"),
                link_regained: None,
                line: Line::default(),
            },
            &Settings::default(),
            no_creation,
        );
        assert_eq!(written(plan.status)["reason"], "PodLost");
        assert!(plan.create_pod.is_none());
        let b = ours().phase("Pending").object();
        let plan = decide(
            &Observed {
                browser: &b,
                pod: None,
                now: t("2026-11-22T10:01:00Z"),
                link_regained: None,
                line: Line::default(),
            },
            &Settings::default(),
            no_creation,
        );
        assert_eq!(written(plan.status)["reason"], "PodLost");
    }

    #[test]
    fn a_live_foreign_pod_is_a_conflict_and_is_never_touched() {
        let b = ours().object();
        let p = pod_of("someone-else").running("10.0.0.9").build();
        let plan = run(&b, Some(&p), "2026-11-22T10:00:01Z", &Settings::default());
        let s = written(plan.status);
        assert_eq!(s["reason"], "PodConflict");
        assert!(s["message"].as_str().unwrap().contains("Browser/s1"));
        assert!(
            s.get("podIP").is_none(),
            "a foreign pod's IP must not be published"
        );
        assert_eq!(plan.delete_pod, None);
    }

    #[test]
    fn a_terminating_foreign_pod_is_waited_for_within_the_creation_timeout() {
        let b = ours().object();
        let p = pod_of("someone-else")
            .deleting("2026-11-22T10:00:30Z", 30)
            .build();
        let plan = run(&b, Some(&p), "2026-11-22T10:00:01Z", &Settings::default());
        assert_eq!(plan.status, None);
        assert_eq!(plan.requeue_after, Some(FOREIGN_POD_POLL));
        let plan = run(&b, Some(&p), "2026-11-22T10:05:00Z", &Settings::default());
        assert_eq!(written(plan.status)["reason"], "PodCreationTimeout");
        assert_eq!(plan.delete_pod, None);
    }

    #[test]
    fn running_pod_publishes_ip_and_phase_together() {
        let b = ours().phase("Pending").object();
        let p = pod_of(UID).running("10.0.0.1").build();
        let plan = run(&b, Some(&p), "2026-11-22T10:00:05Z", &Settings::default());
        let s = written(plan.status);
        assert_eq!(
            (s["phase"].as_str(), s["podIP"].as_str()),
            (Some("Running"), Some("10.0.0.1"))
        );
        assert_eq!(plan.events[0].reason, "Running");
        assert_eq!(plan.requeue_after, Some(Settings::default().resync));
    }

    #[test]
    fn unchanged_pod_means_no_write() {
        let p = pod_of(UID).running("10.0.0.1").build();
        let first = run(
            &ours().phase("Pending").object(),
            Some(&p),
            "2026-11-22T10:00:05Z",
            &Settings::default(),
        );
        let b = ours().status(written(first.status)).object();
        let plan = run(&b, Some(&p), "2026-11-22T10:30:00Z", &Settings::default());
        assert_eq!(plan.status, None);
        assert!(!plan.ensure_metadata && plan.events.is_empty() && plan.delete_pod.is_none());
    }

    #[test]
    fn pending_timeout_force_deletes_with_the_waiting_reason() {
        let b = ours().phase("Pending").object();
        let p = pod_of(UID)
            .phase("Pending")
            .container_waiting("browser", "ContainerCreating", None)
            .build();
        let plan = run(&b, Some(&p), "2026-11-22T10:04:00Z", &Settings::default());
        assert_eq!(plan.status, None);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(61)));
        let plan = run(&b, Some(&p), "2026-11-22T10:05:01Z", &Settings::default());
        assert_eq!(
            written(plan.status)["message"],
            "pod creation timeout exceeded after 5m0s, container browser: ContainerCreating"
        );
        assert_eq!(
            plan.delete_pod,
            Some(PodDelete {
                uid: "p-uid".into(),
                grace_seconds: Some(0)
            })
        );
    }

    #[test]
    fn pending_container_failures_force_delete() {
        let b = ours().phase("Pending").object();
        let p = pod_of(UID)
            .phase("Pending")
            .container_waiting(
                "browser",
                "ImagePullBackOff",
                Some("Back-off pulling image"),
            )
            .build();
        let plan = run(&b, Some(&p), "2026-11-22T10:00:10Z", &Settings::default());
        assert_eq!(written(plan.status)["reason"], "ImagePullBackOff");
        assert_eq!(plan.delete_pod.unwrap().grace_seconds, Some(0));
    }

    #[test]
    fn pod_failed_phase_uses_the_pod_reason() {
        let b = ours().running("10.0.0.1").object();
        let p = pod_of(UID)
            .failed("Evicted")
            .message("The node was low on resource: memory.")
            .build();
        let plan = run(&b, Some(&p), "2026-11-22T10:10:00Z", &Settings::default());
        let s = written(plan.status);
        assert_eq!(s["reason"], "Evicted");
        assert_eq!(
            s["message"],
            "pod has failed with reason: Evicted - The node was low on resource: memory."
        );
        assert_eq!(plan.delete_pod.unwrap().grace_seconds, Some(0));
    }

    #[test]
    fn session_end_deletes_the_pod_gracefully() {
        let b = ours().running("10.0.0.1").object();
        let p = pod_of(UID)
            .running("10.0.0.1")
            .container_terminated("seleniferous", 0, "Completed")
            .build();
        let plan = run(&b, Some(&p), "2026-11-22T10:10:00Z", &Settings::default());
        let s = written(plan.status);
        assert_eq!(s["reason"], "ContainerTerminated");
        assert_eq!(s["podIP"], "10.0.0.1");
        assert_eq!(plan.delete_pod.unwrap().grace_seconds, None);
    }

    #[test]
    fn succeeded_pod_makes_a_succeeded_browser() {
        let b = ours().running("10.0.0.1").object();
        let p = pod_of(UID).phase("Succeeded").ip("10.0.0.1").build();
        let plan = run(&b, Some(&p), "2026-11-22T10:10:00Z", &Settings::default());
        assert_eq!(written(plan.status)["phase"], "Succeeded");
        assert!(plan.delete_pod.is_some());
    }

    #[test]
    fn pod_deleted_under_a_live_browser_fails_it_without_another_delete() {
        let b = ours().running("10.0.0.1").object();
        let p = pod_of(UID)
            .deleting("2026-11-22T10:10:30Z", 30)
            .running("10.0.0.1")
            .build();
        let plan = run(&b, Some(&p), "2026-11-22T10:10:00Z", &Settings::default());
        assert_eq!(written(plan.status)["reason"], "PodDeleted");
        assert_eq!(plan.delete_pod, None);
    }

    #[test]
    fn failed_browser_is_deleted_after_retention_and_its_pod_forced() {
        let failed = json!({"phase": "Failed", "reason": "X", "conditions": [
            {"type": "Ready", "status": "False", "reason": "X", "lastTransitionTime": "2026-11-22T10:00:10Z"}
        ]});
        let b = ours().status(failed).object();
        let p = pod_of(UID).phase("Running").build();
        let settings = Settings {
            failed_retention: Duration::from_secs(60),
            ..Settings::default()
        };
        let plan = run(&b, Some(&p), "2026-11-22T10:00:20Z", &settings);
        assert_eq!(plan.delete_pod.unwrap().grace_seconds, Some(0));
        assert!(!plan.delete_browser);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(50)));
        let plan = run(&b, None, "2026-11-22T10:01:10Z", &settings);
        assert!(plan.delete_browser && plan.release_finalizer);
        assert_eq!(plan.status, None);
    }

    #[test]
    fn after_the_link_came_back_an_ended_browser_stays_until_late_watchers_relisted() {
        let failed = json!({"phase": "Failed", "reason": "X", "conditions": [
            {"type": "Ready", "status": "False", "reason": "X", "lastTransitionTime": "2026-11-22T10:00:10Z"}
        ]});
        let b = ours().status(failed).object();
        let p = pod_of(UID).phase("Running").build();
        let settings = Settings::default();
        let observed = |pod, now, regained| Observed {
            browser: &b,
            pod,
            now: t(now),
            link_regained: regained,
            line: Line::default(),
        };
        let regained = Some(t("2026-11-22T10:00:05Z"));
        // Failed 5 s after the API server came back: its pod goes at once, the Browser stays
        // until the watchers that reconnect late (up to a minute) relisted.
        let plan = decide(
            &observed(Some(&p), "2026-11-22T10:00:11Z", regained),
            &settings,
            no_creation,
        );
        assert_eq!(plan.delete_pod.unwrap().grace_seconds, Some(0));
        assert!(!plan.delete_browser);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(54)));
        let plan = decide(
            &observed(None, "2026-11-22T10:01:05Z", regained),
            &settings,
            no_creation,
        );
        assert!(plan.delete_browser && plan.release_finalizer);
        // Long after the link came back, or without an outage, it goes at once.
        for regained in [Some(t("2026-11-22T09:00:00Z")), None] {
            let plan = decide(
                &observed(None, "2026-11-22T10:00:11Z", regained),
                &settings,
                no_creation,
            );
            assert!(plan.delete_browser, "{regained:?}");
        }
    }

    #[test]
    fn failed_browser_does_not_cut_a_graceful_pod_deletion_short() {
        let failed = ours().failed("ContainerTerminated");
        let b = failed.clone().object();
        let p = pod_of(UID).deleting("2026-11-22T10:00:40Z", 30).build();
        let plan = run(&b, Some(&p), "2026-11-22T10:00:20Z", &Settings::default());
        assert_eq!(plan.delete_pod, None);
        assert!(plan.delete_browser);
        assert!(
            !plan.release_finalizer,
            "the finalizer waits for the terminating pod"
        );

        // Once deleted, the Browser waits for the pod and forces it after the timeout.
        let deleted = failed.deleting("2026-11-22T10:00:21Z").object();
        let plan = run(
            &deleted,
            Some(&p),
            "2026-11-22T10:00:30Z",
            &Settings::default(),
        );
        assert_eq!(plan.delete_pod, None);
        assert!(!plan.release_finalizer);
        let plan = run(
            &deleted,
            Some(&p),
            "2026-11-22T10:06:00Z",
            &Settings::default(),
        );
        assert_eq!(plan.delete_pod.unwrap().grace_seconds, Some(0));
        assert!(plan.release_finalizer);
        let plan = run(&deleted, None, "2026-11-22T10:00:35Z", &Settings::default());
        assert!(plan.release_finalizer);
    }

    #[test]
    fn external_delete_waits_for_the_pod_then_releases() {
        let b = ours()
            .deleting("2026-11-22T10:01:00Z")
            .phase("Running")
            .object();
        let p = pod_of(UID).phase("Running").build();
        let plan = run(&b, Some(&p), "2026-11-22T10:01:00Z", &Settings::default());
        assert_eq!(
            plan.delete_pod,
            Some(PodDelete {
                uid: "p-uid".into(),
                grace_seconds: None
            })
        );
        assert!(!plan.release_finalizer);
        let p = pod_of(UID).deleting("2026-11-22T10:01:30Z", 30).build();
        let plan = run(&b, Some(&p), "2026-11-22T10:01:10Z", &Settings::default());
        assert_eq!(plan.delete_pod, None);
        assert!(!plan.release_finalizer);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(290)));
        let plan = run(&b, None, "2026-11-22T10:01:20Z", &Settings::default());
        assert!(plan.release_finalizer && !plan.delete_browser);
    }

    #[test]
    fn stuck_terminating_pod_is_forced_and_the_finalizer_released() {
        let b = ours().deleting("2026-11-22T10:01:00Z").object();
        let p = pod_of(UID).deleting("2026-11-22T10:01:30Z", 30).build();
        let plan = run(&b, Some(&p), "2026-11-22T10:06:01Z", &Settings::default());
        assert_eq!(plan.delete_pod.unwrap().grace_seconds, Some(0));
        assert!(plan.release_finalizer);
    }

    #[test]
    fn deleting_browser_never_touches_a_foreign_pod() {
        let b = ours().deleting("2026-11-22T10:01:00Z").object();
        let p = pod_of("other").build();
        let plan = run(&b, Some(&p), "2026-11-22T10:01:00Z", &Settings::default());
        assert_eq!(plan.delete_pod, None);
        assert!(plan.release_finalizer);
    }

    #[test]
    fn lifetime_exceeded_ends_the_session() {
        let b = ours().running("10.0.0.1").object();
        let p = pod_of(UID).running("10.0.0.1").build();
        let settings = Settings {
            max_lifetime: Some(Duration::from_secs(3600)),
            ..Settings::default()
        };
        let plan = run(&b, Some(&p), "2026-11-22T10:30:00Z", &settings);
        assert_eq!(plan.requeue_after, Some(Duration::from_secs(1800)));
        let plan = run(&b, Some(&p), "2026-11-22T11:00:00Z", &settings);
        let s = written(plan.status);
        assert_eq!(s["reason"], "LifetimeExceeded");
        assert_eq!(
            s["message"],
            "browser exceeded its maximum lifetime of 1h0m0s"
        );
        assert_eq!(plan.delete_pod.unwrap().grace_seconds, None);
    }

    #[test]
    fn invalid_spec_fails_before_any_write_to_labels() {
        // Labelled for 139.0 before the version goes bad.
        let b = client_made("s1")
            .labelled()
            .version("not a label!")
            .object();
        let plan = decide(
            &Observed {
                browser: &b,
                pod: None,
                now: t("2026-11-22T10:00:00Z"),
                link_regained: None,
                line: Line::default(),
            },
            &Settings::default(),
            no_creation,
        );
        assert!(!plan.ensure_metadata);
        assert_eq!(written(plan.status)["reason"], "InvalidSpec");
    }

    /// A Browser and its pod as the Go browser-controller leaves them: finalizer only, status
    /// from its merge patches (no conditions), a pod without the operator's labels whose
    /// owner reference names the split group.
    fn go_era(status: Value) -> (Fixture<fixtures::Browser>, Fixture<fixtures::Pod>) {
        let b = client_made("s1").finalized().status(status);
        let p = pod_of(UID)
            .labels(json!({"app": "browser"}))
            .owned_by_as("browser.selenosis.io/v1", UID)
            .running("10.0.0.5")
            .started("2026-11-22T10:00:02Z")
            .container_running("browser", "2026-11-22T10:00:03Z")
            .container_running("seleniferous", "2026-11-22T10:00:03Z");
        (b, p)
    }

    fn go_running_status() -> Value {
        json!({"phase": "Running", "podIP": "10.0.0.5", "startTime": "2026-11-22T10:00:02Z",
            "containerStatuses": [{"name": "browser", "restartCount": 0, "state": {"running": {"startedAt": "2026-11-22T10:00:03Z"}}}]})
    }

    #[test]
    fn a_go_era_pod_is_labelled_never_recreated_and_its_ip_kept() {
        let (b, p) = go_era(go_running_status());
        let (b, p) = (b.object(), p.build());
        let plan = decide(
            &Observed {
                browser: &b,
                pod: Some(&p),
                now: t("2026-11-22T10:10:00Z"),
                link_regained: None,
                line: Line::default(),
            },
            &Settings::default(),
            no_creation,
        );
        let adoption = plan.adopt_pod.expect("the pod is adopted");
        assert_eq!(adoption.uid, "p-uid");
        assert_eq!(
            adoption.labels,
            BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "browser-controller".to_string()
                ),
                ("selenosis.io/browser".to_string(), "s1".to_string()),
                (
                    "selenosis.io/browser.name".to_string(),
                    "chrome".to_string()
                ),
                (
                    "selenosis.io/browser.version".to_string(),
                    "139.0".to_string()
                ),
            ])
        );
        assert!(
            plan.ensure_metadata,
            "the Browser gets the operator's labels"
        );
        assert!(plan.create_pod.is_none() && plan.delete_pod.is_none());
        let s = written(plan.status);
        assert_eq!(
            (s["phase"].as_str(), s["podIP"].as_str()),
            (Some("Running"), Some("10.0.0.5"))
        );
        assert_eq!(s["conditions"][0]["status"], "True");
    }

    #[test]
    fn a_labelled_pod_is_not_adopted_again() {
        let b = ours().running("10.0.0.1").object();
        let p = pod_of(UID).running("10.0.0.1").build();
        let plan = run(&b, Some(&p), "2026-11-22T10:10:00Z", &Settings::default());
        assert_eq!(plan.adopt_pod, None);
    }

    #[test]
    fn a_foreign_pod_without_labels_is_never_adopted() {
        let b = ours().object();
        let p = pod_of("someone-else").labels(Value::Null).build();
        let plan = run(&b, Some(&p), "2026-11-22T10:00:01Z", &Settings::default());
        assert_eq!(plan.adopt_pod, None);
        assert_eq!(written(plan.status)["reason"], "PodConflict");
    }

    #[test]
    fn a_go_era_session_end_fails_the_browser_and_deletes_its_pod() {
        let (b, p) = go_era(go_running_status());
        let (b, mut p) = (b.object(), p.build());
        p["status"]["containerStatuses"][1]["state"] =
            json!({"terminated": {"reason": "Completed", "exitCode": 0}});
        let plan = run(&b, Some(&p), "2026-11-22T10:10:00Z", &Settings::default());
        let s = written(plan.status);
        assert_eq!(s["reason"], "ContainerTerminated");
        assert_eq!(s["podIP"], "10.0.0.5");
        assert_eq!(plan.delete_pod.unwrap().uid, "p-uid");
    }

    #[test]
    fn a_deleted_go_era_browser_labels_its_pod_so_the_watch_sees_it_go() {
        let (b, p) = go_era(go_running_status());
        let (b, p) = (b.deleting("2026-11-22T10:05:00Z").object(), p.build());
        let plan = run(&b, Some(&p), "2026-11-22T10:05:00Z", &Settings::default());
        assert_eq!(plan.adopt_pod.unwrap().uid, "p-uid");
        assert_eq!(plan.delete_pod.unwrap().grace_seconds, None);
        assert!(!plan.release_finalizer);
    }

    #[test]
    fn a_failed_go_era_browser_is_completed_without_adoption() {
        let mut status = go_running_status();
        status["phase"] = json!("Failed");
        status["reason"] = json!("ContainerTerminated");
        let (b, p) = go_era(status);
        let (b, p) = (b.object(), p.build());
        let plan = run(&b, Some(&p), "2026-11-22T10:05:00Z", &Settings::default());
        assert_eq!(plan.adopt_pod, None);
        assert_eq!(plan.delete_pod.unwrap().grace_seconds, Some(0));
        assert!(plan.delete_browser && plan.release_finalizer);
    }

    #[test]
    fn a_status_field_left_by_another_manager_does_not_cause_a_write() {
        let mut current = go_running_status();
        let (b, go_pod) = go_era(current.clone());
        let p = go_pod.clone().build();
        let first = run(
            &b.object(),
            Some(&p),
            "2026-11-22T10:10:00Z",
            &Settings::default(),
        );
        // After our apply the other manager's `message` stays; the rest is ours.
        current = written(first.status);
        current["message"] = json!("pod is running");
        let b = ours().status(current).object();
        let p = go_pod.labelled().build();
        let plan = run(&b, Some(&p), "2026-11-22T10:20:00Z", &Settings::default());
        assert_eq!(
            plan,
            Plan {
                requeue_after: Some(Settings::default().resync),
                ..Plan::default()
            }
        );
    }

    fn invalid_spec_message(spec: Value) -> String {
        let b = ours().spec(spec).object();
        let plan = decide(
            &Observed {
                browser: &b,
                pod: None,
                now: t("2026-11-22T10:00:00Z"),
                link_regained: None,
                line: Line::default(),
            },
            &Settings::default(),
            no_creation,
        );
        let s = written(plan.status);
        assert_eq!(s["reason"], "InvalidSpec");
        s["message"].as_str().unwrap().to_string()
    }

    #[test]
    fn specs_from_other_clients_fail_naming_the_field_and_the_problem() {
        assert_eq!(
            invalid_spec_message(json!({"browserName": "chrome", "browserVersion": 120})),
            "invalid Browser spec: spec.browserVersion must be a string, got the number 120; quote it (\"120\") so it is read exactly as written"
        );
        assert_eq!(
            invalid_spec_message(json!({"browserName": null, "browserVersion": true})),
            "invalid Browser spec: spec.browserName is missing; spec.browserVersion must be a string, got a boolean"
        );
        assert_eq!(
            invalid_spec_message(Value::Null),
            "invalid Browser spec: spec.browserName is missing; spec.browserVersion is missing"
        );
        assert_eq!(
            invalid_spec_message(json!({"browserName": {}, "browserVersion": ""})),
            "invalid Browser spec: spec.browserName must be a string, got an object; spec.browserVersion is empty"
        );
        assert!(
            invalid_spec_message(json!({"browserName": "chrome", "browserVersion": "1 2"}))
                .starts_with(
                    "invalid Browser spec: spec.browserVersion \"1 2\" is not a valid label value: "
                )
        );
    }

    #[test]
    fn unknown_fields_and_missing_optional_fields_are_ignored() {
        let mut b = client_made("s1")
            .status(json!({"phase": "Pending", "futureField": {"x": 1}}))
            .object();
        b.data["spec"]["futureSpecField"] = json!([1, 2]);
        b.data["extraTopLevel"] = json!("x");
        let p = pod_of(UID)
            .status(json!({"phase": "Running", "podIP": "10.0.0.1", "newPodField": true}))
            .build();
        let plan = run(&b, Some(&p), "2026-11-22T10:00:05Z", &Settings::default());
        assert!(plan.ensure_metadata);
        assert_eq!(written(plan.status)["phase"], "Running");
    }
}
