//! Events on Browsers, published off the reconcile path and after it: a burst of sessions
//! must not spend the API server on Events while their pods and statuses wait. An Event waits
//! while reconciles are at work (for a while), goes out at a bounded rate, and is dropped and
//! counted when it no longer fits the queue or has grown stale waiting. Events on
//! BrowserConfigs are rare and go out inline ([`ConfigEvents`]).

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::{Client, Resource};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::debug;

use std::sync::Arc;

use crate::api::error::describe;
use crate::api::keys;
use crate::config::report;
use crate::lifecycle::plan::Event;
use crate::metrics::Metrics;

/// Events queued for publishing at most; more are dropped.
const QUEUE: usize = 1024;
/// Events published per second at most, after a burst of [`BURST`].
const RATE: f64 = 10.0;
const BURST: f64 = 20.0;
/// How long an Event waits for the reconciles to pause before it goes out anyway.
const HOLD: Duration = Duration::from_secs(2);
/// How often a held Event looks whether the reconciles paused.
const HOLD_CHECK: Duration = Duration::from_millis(20);
/// An Event still waiting after this long is dropped: it would tell of a moment long past.
const STALE: Duration = Duration::from_secs(30);

type Queued = (Event, ObjectReference, Instant);

/// Where reconciles hand their Events.
pub struct EventSink {
    tx: mpsc::Sender<Queued>,
    metrics: Arc<Metrics>,
}

impl EventSink {
    /// Spawns the publisher.
    pub fn start(client: Client, instance: String, metrics: Arc<Metrics>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: keys::MANAGER.into(),
                instance: Some(instance),
            },
        );
        tokio::spawn(publish(recorder, rx, metrics.clone()));
        Self { tx, metrics }
    }

    /// Queues `event` about `reference`; never waits.
    pub fn publish(&self, event: Event, reference: ObjectReference) {
        let warning = event.warning;
        if self
            .tx
            .try_send((event, reference, Instant::now()))
            .is_err()
        {
            self.metrics.event_dropped(warning);
            debug!("event queue full; event dropped");
        }
    }
}

/// A token bucket: `RATE` per second, up to `BURST` at once.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(now: Instant) -> Self {
        Self {
            tokens: BURST,
            at: now,
        }
    }

    /// How long to wait before the next Event may go; takes its token when that is now.
    fn take(&mut self, now: Instant) -> Option<Duration> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * RATE;
        self.tokens = (self.tokens + refill).min(BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / RATE))
        }
    }
}

/// What the publisher does next with the Event at the head of its queue.
#[derive(Debug, PartialEq)]
enum Turn {
    /// Reconciles are at work: look again in a moment.
    Hold,
    /// The rate is used up for now.
    Wait(Duration),
    /// Too old to tell anyone anything.
    Drop,
    Publish,
}

/// The turn of an Event queued `age` ago, while reconciles are (or are not) at work.
fn turn(age: Duration, reconciling: bool, bucket: &mut Bucket, now: Instant) -> Turn {
    if age > STALE {
        return Turn::Drop;
    }
    if reconciling && age < HOLD {
        return Turn::Hold;
    }
    match bucket.take(now) {
        None => Turn::Publish,
        Some(wait) => Turn::Wait(wait),
    }
}

async fn publish(recorder: Recorder, mut rx: mpsc::Receiver<Queued>, metrics: Arc<Metrics>) {
    let mut bucket = Bucket::new(Instant::now());
    while let Some((event, reference, queued)) = rx.recv().await {
        loop {
            match turn(
                queued.elapsed(),
                metrics.reconciling(),
                &mut bucket,
                Instant::now(),
            ) {
                Turn::Hold => tokio::time::sleep(HOLD_CHECK).await,
                Turn::Wait(wait) => tokio::time::sleep(wait).await,
                Turn::Drop => {
                    metrics.event_dropped(event.warning);
                    break;
                }
                Turn::Publish => {
                    metrics.write("create", "events");
                    if let Err(e) = recorder
                        .publish(&to_runtime_event(&event), &reference)
                        .await
                    {
                        debug!(error = %e, reason = %event.reason, "publishing event failed");
                    }
                    break;
                }
            }
        }
    }
}

/// Turns plan events into runtime events for the recorder.
fn to_runtime_event(event: &Event) -> kube::runtime::events::Event {
    kube::runtime::events::Event {
        type_: if event.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: event.reason.clone(),
        note: Some(truncate(&event.note, 1024)),
        action: event.action.into(),
        secondary: None,
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Events on BrowserConfigs; these are rare (a refused validation, pre-pull changes), so they
/// are published inline.
pub(super) struct ConfigEvents {
    pub(super) recorder: Recorder,
    pub(super) resource: ApiResource,
    pub(super) metrics: Arc<Metrics>,
}

impl ConfigEvents {
    /// An Event on the BrowserConfig `config`.
    pub(super) async fn publish(
        &self,
        config: &DynamicObject,
        type_: EventType,
        reason: &str,
        mut note: String,
    ) {
        // The API server refuses longer notes.
        if note.len() > EVENT_NOTE_MAX {
            let mut end = EVENT_NOTE_MAX;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
        }
        let action = if [
            report::VALIDATION_REFUSED,
            report::UNDECODABLE,
            report::STATUS_REFUSED,
        ]
        .contains(&reason)
        {
            "Validate"
        } else {
            "PrePull"
        };
        let event = kube::runtime::events::Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        self.metrics.write("create", "events");
        let reference = config.object_ref(&self.resource);
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            debug!(error = %describe(&e), "publishing the BrowserConfig event failed");
        }
    }
}

const EVENT_NOTE_MAX: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_notes_are_cut_to_the_api_limit_on_a_char_boundary() {
        let e = Event {
            warning: true,
            reason: "X".into(),
            note: "é".repeat(600),
            action: "Fail",
        };
        let runtime = to_runtime_event(&e);
        let note = runtime.note.unwrap();
        assert!(note.len() <= 1024);
        assert!(note.chars().all(|c| c == 'é'));
    }

    #[test]
    fn events_wait_for_the_reconciles_a_while_and_go_stale_after_longer() {
        let now = Instant::now();
        let mut bucket = Bucket::new(now);
        let second = Duration::from_secs(1);
        assert_eq!(turn(second, true, &mut bucket, now), Turn::Hold);
        assert_eq!(turn(second, false, &mut bucket, now), Turn::Publish);
        // Held long enough: out it goes, reconciles or not.
        assert_eq!(turn(HOLD, true, &mut bucket, now), Turn::Publish);
        assert_eq!(turn(STALE + second, false, &mut bucket, now), Turn::Drop);
        // A dropped Event takes no share of the rate.
        let spent = (0..100)
            .take_while(|_| turn(second, false, &mut bucket, now) == Turn::Publish)
            .count();
        assert_eq!(spent, BURST as usize - 2);
        assert!(matches!(
            turn(second, false, &mut bucket, now),
            Turn::Wait(_)
        ));
    }

    #[test]
    fn a_burst_goes_at_once_then_the_rate_holds() {
        let t0 = Instant::now();
        let mut bucket = Bucket::new(t0);
        for _ in 0..BURST as usize {
            assert_eq!(bucket.take(t0), None);
        }
        let wait = bucket.take(t0).expect("the burst is spent");
        assert!((wait.as_secs_f64() - 1.0 / RATE).abs() < 1e-9, "{wait:?}");
        // A second later, a second's worth of Events may go.
        let later = t0 + Duration::from_secs(1);
        let sent = (0..100)
            .take_while(|_| bucket.take(later).is_none())
            .count();
        assert_eq!(sent, RATE as usize);
    }
}
