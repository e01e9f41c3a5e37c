//! What the Browser and BrowserConfig controllers of every scope share: the client, the
//! kinds, settings, metrics, verdicts, the Pod schema, the event sink, the health of every
//! watch and the link to the API server.

use std::sync::{Arc, Mutex};

use kube::Client;

use super::browser::work::Queue;
use super::events::EventSink;
use super::openapi::PodSchemas;
use super::verdicts::Verdicts;
use super::watch::WatchHealth;
use crate::api::kinds::Kinds;
use crate::cached::CachedKinds;
use crate::lifecycle::plan::Settings;
use crate::link::Link;
use crate::metrics::{Metrics, Watched};

/// What every scope shares: the client, kinds, settings, metrics and the event sink.
pub struct Shared {
    pub client: Client,
    pub kinds: Kinds,
    /// `kinds` of the Browsers and pods as the caches and the controller's queue key them.
    pub cached: CachedKinds,
    pub settings: Settings,
    /// The Browsers waiting for one of `--max-workers` workers, by lane: what a client waits
    /// on first (`lifecycle::lane`).
    pub(super) queue: Queue,
    pub metrics: Arc<Metrics>,
    pub verdicts: Arc<Verdicts>,
    /// The cluster's Pod schema, which rendered pods are pruned to.
    pub schemas: Arc<PodSchemas>,
    pub(super) events: EventSink,
    pub(super) watches: Mutex<Vec<Arc<WatchHealth>>>,
    /// The link to the API server: watches start anew at its changes, readiness follows it.
    pub link: Link,
}

/// What [`Shared::new`] is made of.
pub struct SharedParts {
    pub client: Client,
    pub link: Link,
    pub kinds: Kinds,
    pub settings: Settings,
    /// `--max-workers`.
    pub max_workers: u16,
    pub metrics: Arc<Metrics>,
    pub schemas: Arc<PodSchemas>,
    /// The Events' reporting instance.
    pub instance: String,
}

impl Shared {
    /// Creates the shared state and spawns the event publisher.
    pub fn new(parts: SharedParts) -> Arc<Self> {
        let metrics = parts.metrics;
        let events = EventSink::start(parts.client.clone(), parts.instance, metrics.clone());
        metrics.set_queue_timeout(parts.settings.queue_timeout);
        Arc::new(Self {
            client: parts.client,
            cached: CachedKinds::new(&parts.kinds),
            kinds: parts.kinds,
            settings: parts.settings,
            queue: Queue::new(usize::from(parts.max_workers), metrics.clone()),
            metrics,
            verdicts: Arc::new(Verdicts::default()),
            schemas: parts.schemas,
            events,
            watches: Mutex::new(Vec::new()),
            link: parts.link,
        })
    }

    /// True when the API server answers and every watch of every scope has its list in the
    /// cache and is not failing.
    pub fn is_ready(&self) -> bool {
        let watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        self.link.is_reachable() && !watches.is_empty() && watches.iter().all(|w| w.is_up())
    }

    pub(super) fn watch_health(&self, resource: Watched) -> Arc<WatchHealth> {
        let health = WatchHealth::new(resource, self.metrics.clone());
        self.watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(health.clone());
        health
    }
}
