//! Events on Browsers, published off the reconcile path and after it: a burst of sessions
//! must not spend the API server on Events while their pods and statuses wait. Events go out
//! at a bounded rate in the order of [`queue`] (warnings and the first Event of a Browser
//! first, newest first; the rest wait a while for the reconciles to pause), and are dropped
//! and counted when they no longer fit or have grown stale waiting. Events on BrowserConfigs
//! are rare and go out inline ([`ConfigEvents`]).

mod queue;

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::{Client, Resource};
use queue::{Next, Queue};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::debug;

use std::sync::Arc;

use crate::api::keys;
use crate::config::report;
use crate::lifecycle::plan::Event;
use crate::link::error::describe;
use crate::metrics::{ApiWrite, Metrics};

/// Events handed over but not yet queued, at most; more are dropped.
const HANDOVER: usize = queue::CAPACITY;
/// Events published per second at most, after a burst of [`BURST`].
const RATE: f64 = 10.0;
const BURST: f64 = 20.0;
/// How often held Events look whether the reconciles paused.
const HOLD_CHECK: Duration = Duration::from_millis(20);

type Queued = (Event, ObjectReference);

/// Where reconciles hand their Events.
pub struct EventSink {
    tx: mpsc::Sender<Queued>,
    metrics: Arc<Metrics>,
}

impl EventSink {
    /// Spawns the publisher.
    pub fn start(client: Client, instance: String, metrics: Arc<Metrics>) -> Self {
        let (tx, rx) = mpsc::channel(HANDOVER);
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
        if self.tx.try_send((event, reference)).is_err() {
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

async fn publish(recorder: Recorder, mut rx: mpsc::Receiver<Queued>, metrics: Arc<Metrics>) {
    let mut bucket = Bucket::new(Instant::now());
    let mut waiting: Queue<Queued> = Queue::default();
    let take_in = |waiting: &mut Queue<Queued>, queued: Queued| {
        let (object, warning) = (queued.1.uid.clone().unwrap_or_default(), queued.0.warning);
        if let Some((event, _)) = waiting.push(&object, warning, queued, Instant::now()) {
            metrics.event_dropped(event.warning);
        }
    };
    loop {
        while let Ok(queued) = rx.try_recv() {
            take_in(&mut waiting, queued);
        }
        let now = Instant::now();
        for (event, _) in waiting.expire(now) {
            metrics.event_dropped(event.warning);
        }
        // Wait for something to do, taking in what is handed over meanwhile.
        let reconciling = metrics.reconciling();
        let pause = match waiting.next(reconciling, now) {
            Next::Idle => None,
            Next::Hold => Some(HOLD_CHECK),
            Next::Ready => bucket.take(now),
        };
        if pause.is_none() && !waiting.is_empty() {
            if let Some((event, reference)) = waiting.take(reconciling, now) {
                metrics.write(ApiWrite::CreateEvent);
                if let Err(e) = recorder
                    .publish(&to_runtime_event(&event), &reference)
                    .await
                {
                    debug!(error = %e, reason = %event.reason, "publishing event failed");
                }
            }
            continue;
        }
        let arrived = match pause {
            None => rx.recv().await,
            Some(pause) => tokio::select! {
                queued = rx.recv() => queued,
                () = tokio::time::sleep(pause) => continue,
            },
        };
        match arrived {
            Some(queued) => take_in(&mut waiting, queued),
            None => return,
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
        self.metrics.write(ApiWrite::CreateEvent);
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
