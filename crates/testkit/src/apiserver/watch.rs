//! Watches: newline-delimited JSON events, replay from the event log, synthetic ADDED events
//! for a fresh watch, streaming lists, bookmarks, timeouts and 410 Gone, following
//! https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::Instant;

use super::Shared;
use super::error::ApiError;
use super::resources::ResKey;
use super::selector::{FieldSelector, LabelSelector};
use super::store::{EventType, LogEvent, State, StreamingLists, Target};

/// An open watch, registered in the state; events are filtered and serialized at send time.
pub struct Watcher {
    pub id: u64,
    pub key: ResKey,
    target: Target,
    labels: LabelSelector,
    fields: FieldSelector,
    tx: UnboundedSender<Bytes>,
    /// Events held back while the watch's resource is held ([`State::held`]), in order.
    backlog: Vec<Bytes>,
}

pub struct WatchParams {
    /// `None`, `Some(0)`: start with synthetic ADDED events for the current objects.
    pub resource_version: Option<u64>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub timeout: Duration,
    pub bookmarks: bool,
    /// `sendInitialEvents=true`: a streaming list ending in the `initial-events-end` bookmark.
    pub send_initial_events: bool,
}

/// What the HTTP layer needs to stream one watch.
pub struct WatchStream {
    /// `None` when the watch failed at once (410) and was never registered.
    id: Option<u64>,
    rx: UnboundedReceiver<Bytes>,
    target: Target,
    timeout: Duration,
    bookmarks: bool,
    bookmark_interval: Duration,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut out = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    out.push(b'\n');
    Bytes::from(out)
}

fn bookmark(target: &Target, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": target.def.kind, "apiVersion": target.api_version(), "metadata": metadata}),
    )
}

impl Watcher {
    fn selects(&self, obj: &Value) -> bool {
        (self.target.ns.is_empty()
            || obj["metadata"]["namespace"].as_str() == Some(&self.target.ns))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }

    /// The event this watcher sees for a change. An object modified into or out of the
    /// selection is ADDED or DELETED for it; the DELETED carries the previous content with the
    /// event's resourceVersion, as the watch cache does (`cacheWatcher.convertToWatchEvent`).
    fn translate(&self, ev: &LogEvent) -> Option<Bytes> {
        if ev.key != self.key {
            return None;
        }
        let now = self.selects(&ev.obj);
        let before = ev.old.as_ref().is_some_and(|o| self.selects(o));
        let present = |o: &Value| State::present(&self.target, o);
        match (ev.kind, before, now) {
            (EventType::Added, _, true) => Some(line("ADDED", &present(&ev.obj))),
            (EventType::Modified, true, true) => Some(line("MODIFIED", &present(&ev.obj))),
            (EventType::Modified, false, true) => Some(line("ADDED", &present(&ev.obj))),
            (EventType::Modified, true, false) => {
                let mut old = present(ev.old.as_ref().unwrap_or(&ev.obj));
                old["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                Some(line("DELETED", &old))
            }
            (EventType::Deleted, _, true) => Some(line("DELETED", &present(&ev.obj))),
            _ => None,
        }
    }
}

/// Fans one change out to the open watches, dropping those whose client went away. Watches
/// of a held resource keep the event for later.
pub fn notify(watchers: &mut Vec<Watcher>, held: &[ResKey], ev: &LogEvent) {
    watchers.retain_mut(|w| match w.translate(ev) {
        Some(bytes) if held.contains(&w.key) => {
            w.backlog.push(bytes);
            !w.tx.is_closed()
        }
        Some(bytes) => w.tx.send(bytes).is_ok(),
        None => !w.tx.is_closed(),
    });
}

/// Ends every open watch with `410 Expired`, as a server ends watches that fell behind its
/// window: each client has to list again.
pub fn expire(watchers: &mut Vec<Watcher>, rv: u64) {
    let error = ApiError::new(410, "Expired", format!("too old resource version: {rv}"));
    for w in watchers.drain(..) {
        let _ = w.tx.send(line("ERROR", &error.to_status()));
    }
}

/// Delivers what the watches of resources no longer held kept back.
pub fn release(watchers: &mut Vec<Watcher>, held: &[ResKey]) {
    watchers.retain_mut(|w| {
        if held.contains(&w.key) {
            return true;
        }
        std::mem::take(&mut w.backlog)
            .into_iter()
            .all(|bytes| w.tx.send(bytes).is_ok())
    });
}

impl State {
    pub fn start_watch(&mut self, target: Target, p: WatchParams) -> WatchStream {
        let (tx, rx) = unbounded_channel();
        self.next_watcher += 1;
        let watcher = Watcher {
            id: self.next_watcher,
            key: target.def.key(),
            target: target.clone(),
            labels: p.labels,
            fields: p.fields,
            tx,
            backlog: Vec::new(),
        };
        let stream = WatchStream {
            id: Some(watcher.id),
            rx,
            target,
            timeout: p.timeout,
            bookmarks: p.bookmarks,
            bookmark_interval: self.bookmark_interval,
        };
        if p.send_initial_events && self.streaming_lists == StreamingLists::Unservable {
            return ended(
                stream,
                &watcher,
                ApiError::new(
                    500,
                    "InternalError",
                    "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled",
                ),
            );
        }
        match p.resource_version {
            Some(rv) if rv > 0 && !p.send_initial_events => {
                if rv < self.compacted {
                    let message =
                        format!("too old resource version: {rv} ({})", self.compacted + 1);
                    return ended(stream, &watcher, ApiError::new(410, "Expired", message));
                }
                for ev in self.log.iter().filter(|e| e.rv > rv) {
                    if let Some(bytes) = watcher.translate(ev) {
                        let _ = watcher.tx.send(bytes);
                    }
                }
            }
            _ => {
                for obj in self.objects_of(&watcher.key, &stream.target.ns) {
                    if watcher.selects(obj) {
                        let _ = watcher
                            .tx
                            .send(line("ADDED", &State::present(&stream.target, obj)));
                    }
                }
                if p.send_initial_events {
                    let _ = watcher.tx.send(bookmark(&stream.target, self.rv, true));
                }
            }
        }
        self.watchers.push(watcher);
        stream
    }
}

/// A watch that fails at once: its only event is the `ERROR` carrying `error`, and it is never
/// registered.
fn ended(mut stream: WatchStream, watcher: &Watcher, error: ApiError) -> WatchStream {
    let _ = watcher.tx.send(line("ERROR", &error.to_status()));
    stream.id = None;
    stream
}

/// Unregisters the watch when its response body is dropped (client gone or stream over).
struct Registration {
    shared: Shared,
    id: Option<u64>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            super::lock(&self.shared).watchers.retain(|w| w.id != id);
        }
    }
}

struct Streaming {
    rx: UnboundedReceiver<Bytes>,
    registration: Registration,
    target: Target,
    deadline: Instant,
    bookmarks: bool,
    next_bookmark: Instant,
    interval: Duration,
}

/// The response body of a watch. Ends at `timeoutSeconds`, or when the server drops the watch.
pub fn body(shared: Shared, ws: WatchStream) -> Body {
    let now = Instant::now();
    let state = Streaming {
        rx: ws.rx,
        registration: Registration { shared, id: ws.id },
        target: ws.target,
        deadline: now + ws.timeout,
        bookmarks: ws.bookmarks,
        // The first bookmark comes right after the initial events.
        next_bookmark: now,
        interval: ws.bookmark_interval,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        loop {
            tokio::select! {
                biased;
                msg = st.rx.recv() => return msg.map(|b| (Ok::<_, Infallible>(b), st)),
                _ = tokio::time::sleep_until(st.deadline) => return None,
                _ = tokio::time::sleep_until(st.next_bookmark), if st.bookmarks && st.registration.id.is_some() => {
                    st.next_bookmark = Instant::now() + st.interval;
                    // Events are sent under the lock: with the lock held and nothing queued,
                    // every change up to the current resourceVersion has been delivered.
                    // Nothing is held back for this watch either: a bookmark would skip it.
                    let rv = {
                        let state = super::lock(&st.registration.shared);
                        let holding = state
                            .watchers
                            .iter()
                            .any(|w| Some(w.id) == st.registration.id && !w.backlog.is_empty());
                        (st.rx.is_empty() && !holding).then_some(state.rv)
                    };
                    if let Some(rv) = rv {
                        let b = bookmark(&st.target, rv, false);
                        return Some((Ok(b), st));
                    }
                }
            }
        }
    });
    Body::from_stream(stream)
}
