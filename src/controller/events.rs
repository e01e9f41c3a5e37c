//! Events on Browsers, published off the reconcile path and after it: a burst of sessions
//! must not spend the API server on Events while their pods and statuses wait. Events go out
//! at a bounded rate in the order of the `outbox` (warnings and the first Event of a Browser
//! first, newest first; the rest wait a while for the reconciles to pause), and are dropped
//! and counted when they no longer fit or have grown stale waiting. Events on BrowserConfigs
//! are rare and go out inline ([`ConfigEvents`]).

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

use crate::api::keys;
use crate::config::report;
use crate::lifecycle::plan::Event;
use crate::link::error::describe;
use crate::metrics::{ApiWrite, Metrics};
use crate::outbox::{self, Bucket, Next, Outbox};

/// Events handed over but not yet in the outbox, at most; more are dropped.
const HANDOVER: usize = outbox::CAPACITY;
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

async fn publish(recorder: Recorder, mut rx: mpsc::Receiver<Queued>, metrics: Arc<Metrics>) {
    let start = Instant::now();
    let mut bucket = Bucket::new(start.elapsed());
    let mut waiting: Outbox<Queued> = Outbox::default();
    let take_in = |waiting: &mut Outbox<Queued>, queued: Queued| {
        let (object, warning) = (queued.1.uid.clone().unwrap_or_default(), queued.0.warning);
        if let Some((event, _)) = waiting.push(&object, warning, queued, start.elapsed()) {
            metrics.event_dropped(event.warning);
        }
    };
    loop {
        while let Ok(queued) = rx.try_recv() {
            take_in(&mut waiting, queued);
        }
        let now = start.elapsed();
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
        note: Some(truncate(&event.note)),
        action: event.action.into(),
        secondary: None,
    }
}

/// `note` cut to what the API server takes, on a character boundary.
fn truncate(note: &str) -> String {
    let mut end = note.len().min(EVENT_NOTE_MAX);
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note[..end].to_string()
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
        note: String,
    ) {
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
            note: Some(truncate(&note)),
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

/// The longest note the API server takes.
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
}
