//! Image pre-pull, driven by the BrowserConfig reconcile (docs/operations.md, "Image
//! pre-pull"), with `--enable-prepull`: the watch of the pre-pull DaemonSets, bringing a
//! config's DaemonSets to its entries (with Events on the config), and the sweep of the
//! DaemonSets whose config is gone.

pub(super) mod sync;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tracing::warn;

use crate::api::{keys, kinds};
use crate::config::report;
use crate::controller::events::ConfigEvents;
use crate::controller::watch::scoped_api;
use crate::controller::watch::{self, WatchHealth};
use crate::link::Link;
use crate::metrics::{Metrics, Watched};
use crate::prepull::render::HelperImages;
use crate::prepull::{progress, render as prepull_render};

/// The pre-pull DaemonSets of one scope, with `--enable-prepull`.
pub(super) struct PrePull {
    images: HelperImages,
    pub(super) resource: kube::core::ApiResource,
    pub(super) store: Store<DynamicObject>,
    pub(super) health: Arc<WatchHealth>,
}

impl PrePull {
    /// Deletes the DaemonSets of configs that are gone each time `sweeps` asks, once both
    /// caches (`configs`, with its health) are listed (`sweep_loop`).
    pub(super) fn sweeper(
        &self,
        client: Client,
        (configs, configs_health): (Store<DynamicObject>, Arc<WatchHealth>),
        metrics: Arc<Metrics>,
        sweeps: futures::channel::mpsc::UnboundedReceiver<()>,
    ) -> impl std::future::Future<Output = ()> + use<> {
        let (resource, store, health) = (
            self.resource.clone(),
            self.store.clone(),
            self.health.clone(),
        );
        sweep_loop(
            client,
            resource,
            store,
            health,
            configs,
            configs_health,
            metrics,
            sweeps,
        )
    }
}

/// Longest wait of a reconcile for the first list of the pre-pull DaemonSets.
pub(super) const PREPULL_CACHE_WAIT: Duration = Duration::from_secs(5);

/// Brings the config's pre-pull DaemonSets to its entries and tells what its status says of
/// them (and whether the cluster refused a write); `None` when the config asks for none.
/// Without `--enable-prepull` nothing is written: a config that asks only hears so.
pub(super) async fn pre_pull(
    prepull: Option<&PrePull>,
    client: &Client,
    events: &ConfigEvents,
    metrics: &Metrics,
    api_version: &str,
    config: &DynamicObject,
) -> Result<Option<(report::PrePullFinding, bool)>, sync::SyncError> {
    let Some(prepull) = prepull else {
        let plan = prepull_render::plan(config, api_version, &HelperImages::default());
        return Ok(plan.requested().then(|| (progress::disabled(), false)));
    };
    let plan = prepull_render::plan(config, api_version, &prepull.images);
    let uid = config.metadata.uid.as_deref().unwrap_or_default();
    let ns = config.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &prepull.resource);
    let cached = prepull.store.state();
    let owned = sync::owned_by(&cached, uid);
    let changes = sync::sync(&api, &plan, &owned, metrics).await?;
    for (name, images) in &changes.created {
        let note = format!("DaemonSet {name} pulls {}", images_phrase(*images));
        events
            .publish(config, EventType::Normal, "PrePullCreated", note)
            .await;
    }
    for (name, images) in &changes.updated {
        let note = format!("DaemonSet {name} now pulls {}", images_phrase(*images));
        events
            .publish(config, EventType::Normal, "PrePullUpdated", note)
            .await;
    }
    for name in &changes.deleted {
        let note =
            format!("DaemonSet {name} deleted: no entry of its scheduling asks for pre-pull");
        events
            .publish(config, EventType::Normal, "PrePullDeleted", note)
            .await;
    }
    if !changes.failures.is_empty() {
        let note = changes.failures.join(" | ");
        warn!(error = %note, "the cluster refused pre-pull DaemonSets");
        events
            .publish(config, EventType::Warning, "PrePullFailed", note)
            .await;
    }
    // What was just written reaches the cache later; its watch event reconciles again.
    let cached = prepull.store.state();
    let owned = sync::owned_by(&cached, uid);
    let refused = !changes.failures.is_empty();
    Ok(progress::finding(&plan, &owned, &changes.failures).map(|f| (f, refused)))
}

/// `1 image`, `3 images`.
fn images_phrase(count: usize) -> String {
    match count {
        1 => "1 image".to_string(),
        n => format!("{n} images"),
    }
}

pub(super) type Triggers<T> = futures::stream::BoxStream<'static, T>;

/// The watch of the scope's pre-pull DaemonSets: their cache, their changes (for the
/// controller's triggers) and their completed lists; every list and change also asks `sweep`
/// for a sweep.
pub(super) fn daemon_set_watch(
    client: &Client,
    namespace: Option<&str>,
    metrics: &Arc<Metrics>,
    link: &Link,
    images: HelperImages,
    sweep: futures::channel::mpsc::UnboundedSender<()>,
) -> (
    PrePull,
    Triggers<Result<DynamicObject, watcher::Error>>,
    Triggers<()>,
) {
    let resource = kinds::daemon_sets();
    let api: Api<DynamicObject> = scoped_api(client, namespace, &resource);
    let cache = watch::Cache::<DynamicObject>::new(
        resource.clone(),
        WatchHealth::new(Watched::DaemonSets, metrics.clone()),
    );
    let (store, health) = (cache.reader.clone(), cache.health.clone());
    let (listed_tx, listed) = futures::channel::mpsc::unbounded::<()>();
    let config = watcher::Config::default()
        .labels(&keys::prepull_selector())
        .any_semantic();
    let watched = cache
        .watch(api, config, link)
        .modify(|ds| ds.managed_fields_mut().clear());
    let stream = cache
        .fill(watched, move || {
            let _ = listed_tx.unbounded_send(());
        })
        .inspect(move |event| {
            if matches!(
                event,
                Ok(watcher::Event::Apply(_) | watcher::Event::InitDone)
            ) {
                let _ = sweep.unbounded_send(());
            }
        });
    let prepull = PrePull {
        images,
        resource,
        store,
        health,
    };
    (
        prepull,
        watch::live_changes(stream, true).boxed(),
        listed.boxed(),
    )
}

/// Wait before sweeping again after a deletion failed.
const SWEEP_RETRY: Duration = Duration::from_secs(30);

/// Sweeps the DaemonSets of configs that are gone whenever `triggers` asks (a burst counts
/// once), once both caches are listed and their watches are up; ends with the triggers.
#[expect(
    clippy::too_many_arguments,
    reason = "the two caches with their health, and where to write"
)]
async fn sweep_loop(
    client: Client,
    resource: kube::core::ApiResource,
    daemon_sets: Store<DynamicObject>,
    daemon_sets_health: Arc<WatchHealth>,
    configs: Store<DynamicObject>,
    configs_health: Arc<WatchHealth>,
    metrics: Arc<Metrics>,
    mut triggers: futures::channel::mpsc::UnboundedReceiver<()>,
) {
    let mut retry = None;
    loop {
        let next = match retry {
            Some(wait) => tokio::time::timeout(wait, triggers.next())
                .await
                .unwrap_or(Some(())),
            None => triggers.next().await,
        };
        if next.is_none() {
            return;
        }
        while triggers.try_recv().is_ok() {}
        if !(daemon_sets_health.is_up() && configs_health.is_up()) {
            // The next list or event asks again.
            retry = None;
            continue;
        }
        let swept = sync::sweep(
            &client,
            &resource,
            &daemon_sets.state(),
            &configs.state(),
            &metrics,
        )
        .await;
        retry = (swept.failed > 0).then_some(SWEEP_RETRY);
    }
}
