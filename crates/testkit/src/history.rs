//! A recorded watch history: every object a watch saw, in order, with the moment it saw it and
//! whether it saw it deleted. A watch that relists (after an API server restart, a partition,
//! a `410 Gone`) reports what vanished meanwhile as deleted, as an informer does. Scenarios
//! and the soak read transitions from it instead of catching short states by polling.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

/// One watch event of the recorded history.
#[derive(Clone, Debug)]
pub struct Seen {
    pub kind: &'static str,
    pub object: Value,
    pub at: Instant,
    pub deleted: bool,
    /// Deleted while the watch was away: a relist no longer listed it (then `deleted` too).
    pub vanished: bool,
}

/// Records every event of `api`'s watch into `seen` as `kind`, until the task is dropped.
pub async fn record(api: Api<DynamicObject>, kind: &'static str, seen: Arc<Mutex<Vec<Seen>>>) {
    record_with(api, kind, seen, |_| {}).await
}

/// [`record`], each object cut down by `trim` first: a long run keeps only what it reads.
pub async fn record_with(
    api: Api<DynamicObject>,
    kind: &'static str,
    seen: Arc<Mutex<Vec<Seen>>>,
    trim: fn(&mut Value),
) {
    // Resumes across API server restarts within seconds, as the operator's watches do.
    let mut stream = watcher(api, watcher::Config::default())
        .backoff(browser_controller::controller::watch::backoff())
        .boxed();
    // What the watch holds now, by name, and what a relist under way has listed: an object a
    // relist no longer lists was deleted while the watch was away, and is recorded so, as an
    // informer reports it.
    let mut live: BTreeMap<String, Value> = BTreeMap::new();
    let mut relisted: Option<BTreeSet<String>> = None;
    let push = |object: Value, deleted: bool, vanished: bool| {
        seen.lock().unwrap().push(Seen {
            kind,
            object,
            at: Instant::now(),
            deleted,
            vanished,
        });
    };
    while let Some(event) = stream.next().await {
        let (obj, deleted) = match event {
            Ok(watcher::Event::Apply(obj)) => (obj, false),
            Ok(watcher::Event::InitApply(obj)) => {
                if let (Some(names), Some(name)) = (relisted.as_mut(), &obj.metadata.name) {
                    names.insert(name.clone());
                }
                (obj, false)
            }
            Ok(watcher::Event::Delete(obj)) => (obj, true),
            Ok(watcher::Event::Init) => {
                relisted = Some(BTreeSet::new());
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                let names = relisted.take().unwrap_or_default();
                let vanished: Vec<String> = live
                    .keys()
                    .filter(|n| !names.contains(*n))
                    .cloned()
                    .collect();
                for name in vanished {
                    if let Some(last) = live.remove(&name) {
                        push(last, true, true);
                    }
                }
                continue;
            }
            Err(_) => continue,
        };
        let Ok(mut object) = serde_json::to_value(&obj) else {
            continue;
        };
        trim(&mut object);
        let name = obj.metadata.name.clone().unwrap_or_default();
        if deleted {
            live.remove(&name);
        } else {
            live.insert(name, object.clone());
        }
        push(object, deleted, false);
    }
}

/// The status of `object` as a report shows it: phase, reason and IP of a Browser; phase and
/// containers' states of a pod.
pub fn summary(kind: &str, object: &Value) -> String {
    let status = &object["status"];
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    match kind {
        "Browser" => format!(
            "phase={} reason={} podIP={}",
            text(&status["phase"]),
            text(&status["reason"]),
            text(&status["podIP"])
        ),
        _ => {
            let containers: Vec<String> = status["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let state = c["state"]
                        .as_object()
                        .and_then(|s| s.keys().next().cloned())
                        .unwrap_or_default();
                    format!("{}:{state}", text(&c["name"]))
                })
                .collect();
            format!(
                "phase={} podIP={} uid={} [{}]",
                text(&status["phase"]),
                text(&status["podIP"]),
                text(&object["metadata"]["uid"]),
                containers.join(" ")
            )
        }
    }
}
