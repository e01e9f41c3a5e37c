//! What a reconcile decides to do (docs/behaviour.md, "Writes"): the [`Plan`] of writes
//! `decide` returns and `controller::execute` performs, the pod a Browser should get, and the
//! settings a decision reads.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use super::status::Failure;
use crate::api::status::BrowserStatus;
use crate::pod::policy::Policy;

/// Timeouts, retention and what the admin lets into pods (docs/operations.md, "Flags and
/// environment").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub creation_timeout: Duration,
    pub deletion_timeout: Duration,
    pub max_lifetime: Option<Duration>,
    pub failed_retention: Duration,
    /// After the link to the API server came back, a Browser that ended is kept at least this
    /// long past that moment.
    pub outage_retention: Duration,
    /// How long a Browser waits in line for quota before it fails; zero fails it at once.
    pub queue_timeout: Duration,
    /// Safety net: a healthy Browser is looked at again after this long even without events.
    pub resync: Duration,
    pub policy: Policy,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            creation_timeout: Duration::from_secs(300),
            deletion_timeout: Duration::from_secs(300),
            max_lifetime: None,
            failed_retention: Duration::ZERO,
            outage_retention: Duration::from_secs(60),
            queue_timeout: Duration::from_secs(120),
            resync: Duration::from_secs(3600),
            policy: Policy::default(),
        }
    }
}

/// The pod a Browser should get, or why it cannot get one (config not found, invalid
/// options, invalid config).
#[derive(Debug, Clone, PartialEq)]
pub enum PodCreation {
    /// The pod to apply, and the paths of the fields removed from it because the cluster's
    /// Pod schema does not declare them.
    Render {
        pod: Value,
        removed: Vec<String>,
    },
    Fail(Failure),
}

/// How to delete the pod: always guarded by its UID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDelete {
    pub uid: String,
    /// `Some(0)` forces; `None` uses the pod's own grace period.
    pub grace_seconds: Option<i64>,
}

/// An Event to record on the Browser (docs/behaviour.md, "Events").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: String,
    pub note: String,
    pub action: &'static str,
}

/// Labels to put on a pod this Browser controls that lacks the operator's labels (a pod a
/// Go browser-controller created): a metadata-only write that brings it into the pod watch.
/// The pod spec is never touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAdoption {
    /// Precondition: the pod that was observed, not a successor of the same name.
    pub uid: String,
    pub labels: BTreeMap<String, String>,
}

/// Everything one reconcile writes, in execution order: metadata, pod adoption, pod,
/// status, pod deletion, Browser deletion, finalizer release.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Apply the finalizer and the `selenosis.io/browser*` labels in one write.
    pub ensure_metadata: bool,
    pub adopt_pod: Option<PodAdoption>,
    pub create_pod: Option<Value>,
    /// The full desired status; `None` when what is there is already right.
    pub status: Option<BrowserStatus>,
    pub delete_pod: Option<PodDelete>,
    pub delete_browser: bool,
    pub release_finalizer: bool,
    pub events: Vec<Event>,
    /// When to look again without an event (the next deadline).
    pub requeue_after: Option<Duration>,
    /// The Browser leaves its line by this plan, after waiting this long.
    pub left_line: Option<LeftLine>,
}

/// How a Browser left the line it waited in for quota, and after how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftLine {
    Admitted(Duration),
    TimedOut(Duration),
}

impl Plan {
    pub(super) fn requeue_at(&mut self, now: Timestamp, deadline: Timestamp) {
        let wait = deadline.duration_since(now);
        let wait = Duration::try_from(wait).unwrap_or(Duration::ZERO);
        self.requeue_within(wait.max(Duration::from_millis(10)));
    }

    pub(super) fn requeue_within(&mut self, wait: Duration) {
        self.requeue_after = Some(match self.requeue_after {
            Some(current) => current.min(wait),
            None => wait,
        });
    }
}
