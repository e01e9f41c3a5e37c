//! BrowserConfig validation against the cluster (docs/behaviour.md, "BrowserConfig validation
//! and status"): whenever a BrowserConfig changes, every entry is validated locally, rendered
//! and submitted as a server-side dry-run apply so the cluster's own Pod schema judges it; the
//! verdicts go to the BrowserConfig's status and are kept for Browser reconciles
//! (`InvalidConfig`). Pods are pruned to the cluster's Pod schema first, as for Browsers, and
//! the fields that removes are reported. Each generation is dry-run once per process and Pod
//! schema: never in a loop.
//!
//! With `--enable-prepull` the same reconcile brings the config's image pre-pull DaemonSets
//! to its entries (docs/operations.md, "Image pre-pull") and reports their progress in the
//! status; DaemonSet changes reconcile their config, and a sweep deletes the DaemonSets of
//! configs that are gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::{Instrument, debug, info_span, warn};

use crate::api::apply;
use crate::api::discovery::Kinds;
use crate::api::error::describe;
use crate::api::keys;
use crate::api::openapi::{PodSchemas, is_unknown_field_rejection};
use crate::config::report::{self, DryRun, Findings};
use crate::config::{lookup, validate};
use crate::controller::scoped_api;
use crate::controller::watch::{self, WatchHealth};
use crate::lifecycle::decide::PodCreation;
use crate::lifecycle::desired;
use crate::metrics::Metrics;
use crate::pod::schema::PodSchema;
use crate::prepull::render::HelperImages;
use crate::prepull::{progress, render as prepull_render, sync as prepull_sync};

/// Version used to render a `"*"` entry for its dry run (a valid label value).
const SAMPLE_VERSION: &str = "latest";

/// The cluster's verdict on one entry.
#[derive(Debug, Clone, Default)]
struct Verdict {
    rejection: Option<String>,
    /// The cluster refused to judge the entry (kept for this reconcile only).
    refusal: Option<String>,
    removed: Vec<String>,
}

/// Verdicts by lower-cased (browser, version key) of one config.
type EntryVerdicts = HashMap<(String, String), Verdict>;

/// What was judged of a config: its generation, against which Pod schema (if any).
type Judged = (i64, Option<Weak<PodSchema>>);

/// Whether `judged` is the judgement of `generation` against `schema`.
fn judged_as(judged: &Judged, generation: i64, schema: Option<&Arc<PodSchema>>) -> bool {
    match (judged, schema) {
        ((g, None), None) => *g == generation,
        ((g, Some(weak)), Some(schema)) => {
            *g == generation && Weak::ptr_eq(weak, &Arc::downgrade(schema))
        }
        _ => false,
    }
}

/// Dry runs of a config that the cluster refused to judge, kept until the retry is due, so
/// that reconciles in between (the watch event of the config's own status write) do not ask
/// again.
struct Refused {
    judged: Judged,
    runs: Vec<DryRun>,
    /// When the cluster first refused, in this run of refusals.
    since: Instant,
    retry_at: Instant,
}

/// Dry-run verdicts by namespace and config name.
#[derive(Default)]
pub struct Verdicts {
    by_config: Mutex<HashMap<(String, String), EntryVerdicts>>,
    judged: Mutex<HashMap<String, Judged>>,
    refused: Mutex<HashMap<String, Refused>>,
}

impl Verdicts {
    /// The cluster's rejection of an entry, if any.
    pub fn rejection(
        &self,
        ns: &str,
        config: &str,
        browser: &str,
        version_key: &str,
    ) -> Option<String> {
        self.verdict(ns, config, browser, version_key).rejection
    }

    fn verdict(&self, ns: &str, config: &str, browser: &str, version_key: &str) -> Verdict {
        let by_config = self.by_config.lock().unwrap_or_else(|e| e.into_inner());
        by_config
            .get(&(ns.to_string(), config.to_string()))
            .and_then(|entries| entries.get(&(browser.to_lowercase(), version_key.to_lowercase())))
            .cloned()
            .unwrap_or_default()
    }

    /// Records the verdicts of `runs`; `judged` is `None` while some entry is not judged yet
    /// (the cluster refused the dry run), so that the next reconcile tries again.
    fn record(&self, ns: &str, config: &str, uid: &str, judged: Option<Judged>, runs: &[DryRun]) {
        let entries = runs
            .iter()
            .filter(|r| r.rejection.is_some() || !r.removed.is_empty())
            .map(|r| {
                let verdict = Verdict {
                    rejection: r.rejection.clone(),
                    refusal: None,
                    removed: r.removed.clone(),
                };
                (
                    (r.browser.to_lowercase(), r.version.to_lowercase()),
                    verdict,
                )
            })
            .collect();
        self.by_config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((ns.to_string(), config.to_string()), entries);
        let mut all = self.judged.lock().unwrap_or_else(|e| e.into_inner());
        match judged {
            Some(judged) => {
                all.insert(uid.to_string(), judged);
                // Judged in full: a run of refusals, if any, has ended.
                self.refused
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(uid);
            }
            None => {
                all.remove(uid);
            }
        }
    }

    fn judged(&self, uid: &str, generation: i64, schema: Option<&Arc<PodSchema>>) -> bool {
        let judged = self.judged.lock().unwrap_or_else(|e| e.into_inner());
        judged
            .get(uid)
            .is_some_and(|j| judged_as(j, generation, schema))
    }

    /// Remembers refused dry runs of a config; returns the wait before the next attempt and
    /// whether this is the first refusal of a run of them.
    fn refused(
        &self,
        uid: &str,
        judged: Judged,
        runs: Vec<DryRun>,
        now: Instant,
    ) -> (Duration, bool) {
        let mut all = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let since = all.get(uid).map(|r| r.since);
        let wait = refused_retry_after(now.saturating_duration_since(since.unwrap_or(now)));
        let refused = Refused {
            judged,
            runs,
            since: since.unwrap_or(now),
            retry_at: now + wait,
        };
        all.insert(uid.to_string(), refused);
        (wait, since.is_none())
    }

    /// The refused dry runs of this generation and schema while their retry is not due yet,
    /// with the time left.
    fn pending_refusal(
        &self,
        uid: &str,
        generation: i64,
        schema: Option<&Arc<PodSchema>>,
        now: Instant,
    ) -> Option<(Vec<DryRun>, Duration)> {
        let all = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let refused = all.get(uid)?;
        (now < refused.retry_at && judged_as(&refused.judged, generation, schema))
            .then(|| (refused.runs.clone(), refused.retry_at - now))
    }
}

/// Why validating a BrowserConfig failed; retried later.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("writing BrowserConfig status: {}", describe(.0))]
    Status(#[source] kube::Error),
    #[error("dry-run of entry {entry} could not be sent: {}", describe(.source))]
    DryRun {
        entry: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    PrePull(#[from] prepull_sync::SyncError),
}

/// The pre-pull DaemonSets of one scope, with `--enable-prepull`.
struct PrePull {
    images: HelperImages,
    resource: kube::core::ApiResource,
    store: Store<DynamicObject>,
    health: Arc<WatchHealth>,
}

struct Context {
    client: Client,
    recorder: Recorder,
    kinds: Kinds,
    verdicts: Arc<Verdicts>,
    schemas: Arc<PodSchemas>,
    metrics: Arc<Metrics>,
    store: Store<DynamicObject>,
    /// `None` without `--enable-prepull`.
    prepull: Option<PrePull>,
}

fn synthetic_browser(
    config: &DynamicObject,
    kinds: &Kinds,
    browser: &str,
    version: &str,
) -> Option<DynamicObject> {
    let uid = config.metadata.uid.as_deref().unwrap_or("0000000000");
    let short: String = uid
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(10)
        .collect();
    serde_json::from_value(json!({
        "apiVersion": kinds.browser.api_version,
        "kind": kinds.browser.kind,
        "metadata": {
            "name": format!("browserconfig-dry-run-{}", short.to_lowercase()),
            "namespace": config.metadata.namespace,
            "uid": "00000000-0000-0000-0000-000000000000",
        },
        "spec": {"browserName": browser, "browserVersion": version},
    }))
    .ok()
}

/// Whether an API error judges the pod itself (invalid, or a field the cluster's schema
/// lacks, which server-side apply reports as HTTP 500 before 1.25) rather than the moment.
fn is_rejection(code: u16, message: &str) -> bool {
    matches!(code, 400 | 422) || is_unknown_field_rejection(message)
}

/// One entry's verdict: rendered for `browser`, pruned to `schema`, dry-run applied.
async fn dry_run_entry(
    ctx: &Context,
    pods: &Api<DynamicObject>,
    config: &DynamicObject,
    browser: &DynamicObject,
    schema: Option<&PodSchema>,
    entry: String,
) -> Result<Verdict, ConfigError> {
    let (pod, removed) = match desired::pod_for(
        browser,
        std::slice::from_ref(config),
        &ctx.kinds.browser,
        schema,
        |_, _, _| None,
    ) {
        PodCreation::Fail(f) => {
            return Ok(Verdict {
                rejection: Some(f.message),
                ..Verdict::default()
            });
        }
        PodCreation::Render { pod, removed } => (pod, removed),
    };
    let name = browser.metadata.name.clone().unwrap_or_default();
    let params = PatchParams::apply(keys::FIELD_MANAGER).force().dry_run();
    ctx.metrics.write("apply-dry-run", "pods");
    let (rejection, refusal) = match pods.patch(&name, &params, &Patch::Apply(&pod)).await {
        Ok(_) => (None, None),
        Err(kube::Error::Api(s)) if is_rejection(s.code, &s.message) => (Some(s.message), None),
        // Admission forbade even the dry run (a ResourceQuota of zero pods, a policy): the
        // pod was not judged. Not a failure to send: retrying at once would change nothing.
        Err(kube::Error::Api(s)) if s.code == 403 => (None, Some(s.message)),
        Err(source) => return Err(ConfigError::DryRun { entry, source }),
    };
    Ok(Verdict {
        rejection,
        refusal,
        removed,
    })
}

async fn dry_run_entries(
    ctx: &Context,
    config: &DynamicObject,
    reports: &[validate::EntryReport],
) -> Result<Vec<DryRun>, ConfigError> {
    let ns = config.metadata.namespace.as_deref().unwrap_or("default");
    let pods: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ctx.kinds.pod);
    let mut schema = ctx.schemas.current();
    let mut runs = Vec::new();
    for report in reports
        .iter()
        .filter(|r| r.problems.is_empty() && !r.browser.is_empty())
    {
        let version = if report.version == lookup::WILDCARD {
            SAMPLE_VERSION
        } else {
            report.version.as_str()
        };
        let Some(browser) = synthetic_browser(config, &ctx.kinds, &report.browser, version) else {
            continue;
        };
        let entry = format!("{} {}", report.browser, report.version);
        let mut verdict = dry_run_entry(
            ctx,
            &pods,
            config,
            &browser,
            schema.as_deref(),
            entry.clone(),
        )
        .await?;
        // A field the cluster does not know, although the pod was pruned: the schema may be
        // stale; judge again with a fresh one before calling the entry rejected.
        if verdict
            .rejection
            .as_deref()
            .is_some_and(is_unknown_field_rejection)
            && ctx.schemas.renewed_since(schema.as_deref()).await
        {
            schema = ctx.schemas.current();
            verdict = dry_run_entry(ctx, &pods, config, &browser, schema.as_deref(), entry).await?;
        }
        runs.push(DryRun {
            browser: report.browser.clone(),
            version: report.version.clone(),
            rejection: verdict.rejection,
            refusal: verdict.refusal,
            removed: verdict.removed,
        });
    }
    Ok(runs)
}

async fn reconcile(config: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, ConfigError> {
    let ns = config.namespace().unwrap_or_default();
    let name = config.name_any();
    let uid = config.metadata.uid.clone().unwrap_or_default();
    let generation = config.metadata.generation.unwrap_or(0);
    let span = info_span!("validate_config", namespace = %ns, name = %name);
    async move {
        // Which DaemonSets exist decides what to apply and delete: the cache must be listed.
        if let Some(prepull) = &ctx.prepull
            && tokio::time::timeout(PREPULL_CACHE_WAIT, prepull.health.synced())
                .await
                .is_err()
        {
            debug!("the pre-pull DaemonSet cache is not listed yet");
            return Ok(Action::requeue(PREPULL_CACHE_WAIT));
        }
        let reports = validate::validate_config(&config);
        let current = config.data.get("status").cloned().unwrap_or(Value::Null);
        // Judged against the schema in use at the start; a schema change re-judges anyway.
        let schema = ctx.schemas.current();
        let pending =
            ctx.verdicts
                .pending_refusal(&uid, generation, schema.as_ref(), Instant::now());
        let runs = if pending.is_some() || ctx.verdicts.judged(&uid, generation, schema.as_ref()) {
            None
        } else {
            Some(dry_run_entries(&ctx, &config, &reports).await?)
        };
        let runs = match (runs, &pending) {
            (_, Some((refused, _))) => refused.clone(),
            (Some(runs), None) => {
                let judged = runs
                    .iter()
                    .all(|r| r.refusal.is_none())
                    .then(|| (generation, schema.as_ref().map(Arc::downgrade)));
                ctx.verdicts.record(&ns, &name, &uid, judged, &runs);
                runs
            }
            // Already judged: rebuild the verdicts from what was recorded.
            (None, None) => reports
                .iter()
                .map(|r| {
                    let verdict = ctx.verdicts.verdict(&ns, &name, &r.browser, &r.version);
                    DryRun {
                        browser: r.browser.clone(),
                        version: r.version.clone(),
                        rejection: verdict.rejection,
                        refusal: verdict.refusal,
                        removed: verdict.removed,
                    }
                })
                .collect(),
        };
        let problems = report::problems(&reports, &runs);
        let refusals = report::refusals(&runs);
        let removed = report::removed_fields(&runs);
        let same_ns: Vec<Arc<DynamicObject>> = ctx
            .store
            .state()
            .into_iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(ns.as_str()))
            .collect();
        let conflicts: Vec<lookup::Conflict> = lookup::conflicts(&same_ns)
            .into_iter()
            .filter(|c| c.loser == name)
            .collect();
        let pre_pull = pre_pull(&ctx, &config).await?;
        let spec = config.data.get("spec").cloned().unwrap_or(Value::Null);
        let desired = report::status(
            &current,
            &spec,
            config.metadata.generation,
            Findings {
                problems: &problems,
                refusals: &refusals,
                removed: &removed,
                conflicts: &conflicts,
                pre_pull: pre_pull.as_ref().map(|(finding, _)| finding),
            },
            Timestamp::now(),
        );
        if desired != current {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), &ns, &ctx.kinds.browserconfig);
            let mut body = apply::body(&ctx.kinds.browserconfig, &name, None);
            body["status"] = desired;
            ctx.metrics.write("apply", "browserconfigs/status");
            api.patch_status(
                &name,
                &PatchParams::apply(keys::FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(ConfigError::Status)?;
        }
        let prepull_refused = pre_pull.is_some_and(|(_, refused)| refused);
        if refusals.is_empty() {
            // A DaemonSet the cluster refused is tried again later, not at once.
            return Ok(if prepull_refused {
                Action::requeue(REFUSED_RETRY_MAX)
            } else {
                Action::await_change()
            });
        }
        if let Some((_, left)) = pending {
            return Ok(Action::requeue(left));
        }
        let judged = (generation, schema.as_ref().map(Arc::downgrade));
        let (wait, first) = ctx
            .verdicts
            .refused(&uid, judged, runs.clone(), Instant::now());
        if first {
            let note = refusals.join(" | ");
            warn!(error = %note, retry_in = ?wait, "the cluster refused to validate BrowserConfig entries; their validity is unknown");
            publish_refusal(&ctx, &config, note).await;
        } else {
            debug!(retry_in = ?wait, "the cluster still refuses to validate BrowserConfig entries");
        }
        Ok(Action::requeue(wait))
    }
    .instrument(span)
    .await
}

/// Longest wait of a reconcile for the first list of the pre-pull DaemonSets.
const PREPULL_CACHE_WAIT: Duration = Duration::from_secs(5);

/// Brings the config's pre-pull DaemonSets to its entries and tells what its status says of
/// them (and whether the cluster refused a write); `None` when the config asks for none.
/// Without `--enable-prepull` nothing is written: a config that asks only hears so.
async fn pre_pull(
    ctx: &Context,
    config: &DynamicObject,
) -> Result<Option<(report::PrePullFinding, bool)>, ConfigError> {
    let api_version = &ctx.kinds.browserconfig.api_version;
    let Some(prepull) = &ctx.prepull else {
        let plan = prepull_render::plan(config, api_version, &HelperImages::default());
        return Ok(plan.requested().then(|| (progress::disabled(), false)));
    };
    let plan = prepull_render::plan(config, api_version, &prepull.images);
    let uid = config.metadata.uid.as_deref().unwrap_or_default();
    let ns = config.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &prepull.resource);
    let cached = prepull.store.state();
    let owned = prepull_sync::owned_by(&cached, uid);
    let changes = prepull_sync::sync(&api, &plan, &owned, &ctx.metrics).await?;
    for (name, images) in &changes.created {
        let note = format!("DaemonSet {name} pulls {}", images_phrase(*images));
        publish(ctx, config, EventType::Normal, "PrePullCreated", note).await;
    }
    for (name, images) in &changes.updated {
        let note = format!("DaemonSet {name} now pulls {}", images_phrase(*images));
        publish(ctx, config, EventType::Normal, "PrePullUpdated", note).await;
    }
    for name in &changes.deleted {
        let note =
            format!("DaemonSet {name} deleted: no entry of its scheduling asks for pre-pull");
        publish(ctx, config, EventType::Normal, "PrePullDeleted", note).await;
    }
    if !changes.failures.is_empty() {
        let note = changes.failures.join(" | ");
        warn!(error = %note, "the cluster refused pre-pull DaemonSets");
        publish(ctx, config, EventType::Warning, "PrePullFailed", note).await;
    }
    // What was just written reaches the cache later; its watch event reconciles again.
    let cached = prepull.store.state();
    let owned = prepull_sync::owned_by(&cached, uid);
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

/// First retry after the cluster refused to judge a config's pods; then the time the refusal
/// has lasted (so the waits double), at most [`REFUSED_RETRY_MAX`].
const REFUSED_RETRY_FIRST: Duration = Duration::from_secs(5);
const REFUSED_RETRY_MAX: Duration = Duration::from_secs(300);

/// The wait before judging again a config whose validation has been refused for `lasted`.
fn refused_retry_after(lasted: Duration) -> Duration {
    lasted.clamp(REFUSED_RETRY_FIRST, REFUSED_RETRY_MAX)
}

/// One Warning Event on the BrowserConfig when the cluster starts refusing to judge it.
async fn publish_refusal(ctx: &Context, config: &DynamicObject, note: String) {
    publish(
        ctx,
        config,
        EventType::Warning,
        report::VALIDATION_REFUSED,
        note,
    )
    .await;
}

/// An Event on the BrowserConfig; these are rare, so they are published inline.
async fn publish(
    ctx: &Context,
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
    let action = if reason == report::VALIDATION_REFUSED {
        "Validate"
    } else {
        "PrePull"
    };
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    ctx.metrics.write("create", "events");
    let reference = config.object_ref(&ctx.kinds.browserconfig);
    if let Err(e) = ctx.recorder.publish(&event, &reference).await {
        debug!(error = %describe(&e), "publishing the BrowserConfig event failed");
    }
}

const EVENT_NOTE_MAX: usize = 1024;

fn error_policy(config: Arc<DynamicObject>, error: &ConfigError, _ctx: Arc<Context>) -> Action {
    warn!(namespace = %config.namespace().unwrap_or_default(), name = %config.name_any(), error = %error, "BrowserConfig validation failed; retrying");
    Action::requeue(Duration::from_secs(30))
}

/// What the validators of every scope share.
#[derive(Clone)]
pub struct Validation {
    pub client: Client,
    pub kinds: Kinds,
    pub verdicts: Arc<Verdicts>,
    pub schemas: Arc<PodSchemas>,
    pub metrics: Arc<Metrics>,
    /// Events on BrowserConfigs; rare (a refused validation, pre-pull changes), so
    /// published inline.
    pub events: Recorder,
    /// The helper images of the pre-pull DaemonSets with `--enable-prepull`; `None` without.
    pub prepull: Option<HelperImages>,
}

/// Runs the BrowserConfig validator of one scope until `shutdown` resolves.
pub async fn run_scope(
    validation: Validation,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let Validation {
        client,
        kinds,
        verdicts,
        schemas,
        metrics,
        events: recorder,
        prepull: prepull_images,
    } = validation;
    let api = scoped_api(&client, namespace.as_deref(), &kinds.browserconfig);
    // Config deletions, DaemonSet lists and changes: DaemonSets of configs that are gone are
    // swept.
    let (sweep_tx, sweeps) = futures::channel::mpsc::unbounded::<()>();
    let config_sweep = sweep_tx.clone();
    let writer = Writer::<DynamicObject>::new(kinds.browserconfig.clone());
    let store = writer.as_reader();
    // Every completed list (a relist after the watch failed too) judges every config again.
    let (listed_tx, listed) = futures::channel::mpsc::unbounded::<()>();
    let health = WatchHealth::new("browserconfigs", metrics.clone());
    let configs = watch::watch(
        api,
        watcher::Config::default().any_semantic(),
        health.clone(),
    )
    .reflect(writer)
    .inspect(watch::observe(health.clone(), move || {
        let _ = listed_tx.unbounded_send(());
    }))
    .inspect(move |event| {
        if matches!(
            event,
            Ok(watcher::Event::Delete(_) | watcher::Event::InitDone)
        ) {
            let _ = config_sweep.unbounded_send(());
        }
    });
    let daemon_sets = prepull_images
        .map(|images| daemon_set_watch(&client, namespace.as_deref(), &metrics, images, sweep_tx));
    // Held until the scope stops: the BrowserConfig gauges read this cache at scrape time.
    let _gauge_source = metrics.observe_configs(store.clone());
    let (prepull, daemon_set_changes, daemon_sets_listed) = match daemon_sets {
        Some((prepull, changes, listed)) => (Some(prepull), changes, listed),
        None => (
            None,
            futures::stream::empty().boxed(),
            futures::stream::empty().boxed(),
        ),
    };
    let _prepull_gauge_source = prepull
        .as_ref()
        .map(|p| metrics.observe_prepull(p.store.clone()));
    let sweeper = prepull.as_ref().map(|p| {
        sweep_loop(
            client.clone(),
            p.resource.clone(),
            p.store.clone(),
            p.health.clone(),
            store.clone(),
            health.clone(),
            metrics.clone(),
            sweeps,
        )
    });
    let mapper_store = store.clone();
    let ar = kinds.browserconfig.clone();
    // Every config is judged again when the cluster's Pod schema changes.
    let schema_changes = futures::stream::unfold(schemas.subscribe(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    });
    let owner_ar = kinds.browserconfig.clone();
    let ctx = Arc::new(Context {
        client,
        recorder,
        kinds: kinds.clone(),
        verdicts,
        schemas,
        metrics,
        store: store.clone(),
        prepull,
    });
    // Conflicts involve other configs of the namespace: any change re-checks them all.
    let controller =
        Controller::for_stream_with(futures::stream::empty(), store, kinds.browserconfig.clone())
            .watches_stream_with(
                watch::live_changes(configs, true),
                move |changed| {
                    let ns = changed.metadata.namespace.clone().unwrap_or_default();
                    mapper_store
                        .state()
                        .into_iter()
                        .filter(|c| c.metadata.namespace.as_deref() == Some(ns.as_str()))
                        .filter_map(|c| {
                            Some(
                                ObjectRef::new_with(c.metadata.name.as_deref()?, ar.clone())
                                    .within(&ns),
                            )
                        })
                        .collect::<Vec<_>>()
                },
                kinds.browserconfig.clone(),
            )
            // A DaemonSet change reconciles the config that controls it.
            .watches_stream_with(
                daemon_set_changes,
                move |ds| {
                    let ns = ds.metadata.namespace.clone()?;
                    let (config, _) = progress::owner(&ds)?;
                    Some(ObjectRef::new_with(config, owner_ar.clone()).within(&ns))
                },
                crate::api::discovery::daemon_sets(),
            )
            .reconcile_all_on(futures::stream::select_all([
                listed.boxed(),
                schema_changes.boxed(),
                daemon_sets_listed,
            ]))
            .graceful_shutdown_on(shutdown)
            .run(reconcile, error_policy, ctx)
            .for_each(|r| async move {
                if let Err(e) = r {
                    debug!(error = %e, "BrowserConfig controller event");
                }
            });
    match sweeper {
        Some(sweeper) => {
            futures::future::join(controller, sweeper).await;
        }
        None => controller.await,
    }
}

type Triggers<T> = futures::stream::BoxStream<'static, T>;

/// The watch of the scope's pre-pull DaemonSets: their cache, their changes (for the
/// controller's triggers) and their completed lists; every list and change also asks `sweep`
/// for a sweep.
fn daemon_set_watch(
    client: &Client,
    namespace: Option<&str>,
    metrics: &Arc<Metrics>,
    images: HelperImages,
    sweep: futures::channel::mpsc::UnboundedSender<()>,
) -> (
    PrePull,
    Triggers<Result<DynamicObject, watcher::Error>>,
    Triggers<()>,
) {
    let resource = crate::api::discovery::daemon_sets();
    let api: Api<DynamicObject> = scoped_api(client, namespace, &resource);
    let writer = Writer::<DynamicObject>::new(resource.clone());
    let store = writer.as_reader();
    let health = WatchHealth::new("daemonsets", metrics.clone());
    let (listed_tx, listed) = futures::channel::mpsc::unbounded::<()>();
    let config = watcher::Config::default()
        .labels(&keys::prepull_selector())
        .any_semantic();
    let stream = watch::watch(api, config, health.clone())
        .modify(|ds| ds.managed_fields_mut().clear())
        .reflect(writer)
        .inspect(watch::observe(health.clone(), move || {
            let _ = listed_tx.unbounded_send(());
        }))
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
        let swept = prepull_sync::sweep(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Arc<PodSchema> {
        let doc = json!({"definitions": {"io.k8s.api.core.v1.Pod": {"type": "object"}}});
        Arc::new(PodSchema::from_openapi_v2(&doc).unwrap())
    }

    #[test]
    fn a_config_is_judged_again_for_a_new_generation_or_another_pod_schema() {
        let verdicts = Verdicts::default();
        let (a, b) = (schema(), schema());
        let runs = [DryRun {
            browser: "Chrome".into(),
            version: "139.0".into(),
            rejection: None,
            refusal: None,
            removed: vec!["spec.hostUsers".into()],
        }];
        verdicts.record("ns", "c", "uid", Some((3, Some(Arc::downgrade(&a)))), &runs);
        assert!(verdicts.judged("uid", 3, Some(&a)));
        assert!(!verdicts.judged("uid", 4, Some(&a)));
        assert!(!verdicts.judged("uid", 3, Some(&b)));
        assert!(!verdicts.judged("uid", 3, None));
        // Removed fields are kept for the next status, keyed case-insensitively.
        assert_eq!(
            verdicts.verdict("ns", "c", "chrome", "139.0").removed,
            ["spec.hostUsers"]
        );
        assert_eq!(verdicts.rejection("ns", "c", "chrome", "139.0"), None);

        verdicts.record("ns", "c", "uid", Some((3, None)), &runs);
        assert!(verdicts.judged("uid", 3, None));
        assert!(!verdicts.judged("uid", 3, Some(&a)));
        // A refused dry run leaves the config to be judged again.
        verdicts.record("ns", "c", "uid", None, &runs);
        assert!(!verdicts.judged("uid", 3, None));
    }

    #[test]
    fn refused_validations_are_retried_with_doubling_waits_until_judged() {
        let verdicts = Verdicts::default();
        let runs = vec![DryRun {
            browser: "chrome".into(),
            version: "139.0".into(),
            rejection: None,
            refusal: Some("exceeded quota".into()),
            removed: Vec::new(),
        }];
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        // The first refusal starts a run: retried after the first wait; nothing is asked meanwhile.
        assert_eq!(
            verdicts.refused("uid", (1, None), runs.clone(), t0),
            (REFUSED_RETRY_FIRST, true)
        );
        let (kept, left) = verdicts.pending_refusal("uid", 1, None, at(2)).unwrap();
        assert_eq!((kept, left), (runs.clone(), Duration::from_secs(3)));
        assert!(verdicts.pending_refusal("uid", 1, None, at(5)).is_none());
        assert!(verdicts.pending_refusal("uid", 2, None, at(2)).is_none());
        // Each later wait is as long as the refusals have lasted, up to the maximum.
        assert_eq!(
            verdicts.refused("uid", (1, None), runs.clone(), at(5)),
            (Duration::from_secs(5), false)
        );
        assert_eq!(
            verdicts.refused("uid", (1, None), runs.clone(), at(10)),
            (Duration::from_secs(10), false)
        );
        assert_eq!(
            verdicts.refused("uid", (1, None), runs.clone(), at(3600)),
            (REFUSED_RETRY_MAX, false)
        );
        // Judged at last: the next refusal starts a new run.
        verdicts.record("ns", "c", "uid", Some((1, None)), &[]);
        assert!(verdicts.pending_refusal("uid", 1, None, at(3601)).is_none());
        assert_eq!(
            verdicts.refused("uid", (1, None), runs, at(4000)),
            (REFUSED_RETRY_FIRST, true)
        );
    }
}
