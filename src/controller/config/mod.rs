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

mod prepull;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt, stream};
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::Value;
use tracing::{Instrument, debug, info, info_span, warn};

use super::Shared;
use super::events::ConfigEvents;
use super::verdicts::{REFUSED_RETRY_MAX, Verdict};
use super::watch::{self, WatchHealth, scoped_api};
use crate::api::apply;
use crate::api::keys;
use crate::api::kinds::{self, Kinds};
use crate::config::report::{self, DryRun, Findings};
use crate::config::{leftovers, lookup, validate};
use crate::decoded::{Decoded, FromIdentity, Undecodable};
use crate::lifecycle::desired;
use crate::lifecycle::plan::PodCreation;
use crate::lifecycle::rejection::{self, Remedy};
use crate::link::Link;
use crate::link::error::describe;
use crate::metrics::{ApiWrite, Watched};
use crate::pod::schema::PodSchema;
use crate::prepull::progress;
use crate::prepull::render::HelperImages;
use prepull::sync as prepull_sync;
use prepull::{PREPULL_CACHE_WAIT, PrePull};

/// Version used to render a `"*"` entry for its dry run (a valid label value).
const SAMPLE_VERSION: &str = "latest";

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
    #[error("releasing the Go controller's finalizer: {}", describe(.0))]
    Finalizer(#[source] kube::Error),
}

struct Context {
    shared: Arc<Shared>,
    events: ConfigEvents,
    store: Store<DynamicObject>,
    /// `None` without `--enable-prepull`.
    prepull: Option<PrePull>,
}

impl Context {
    fn new(
        shared: Arc<Shared>,
        recorder: Recorder,
        store: Store<DynamicObject>,
        prepull: Option<PrePull>,
    ) -> Arc<Self> {
        let (resource, metrics) = (shared.kinds.browserconfig.clone(), shared.metrics.clone());
        let events = ConfigEvents {
            recorder,
            resource,
            metrics,
        };
        Arc::new(Context {
            shared,
            events,
            store,
            prepull,
        })
    }
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
    let name = format!("browserconfig-dry-run-{}", short.to_lowercase());
    crate::api::browser::for_dry_run(
        &kinds.browser,
        config.metadata.namespace.as_deref(),
        &name,
        browser,
        version,
    )
}

/// One entry's verdict: rendered for `browser`, pruned to `schema`, dry-run applied; and
/// whether the cluster rejected the pod for fields its schema lacks.
async fn dry_run_entry(
    ctx: &Context,
    pods: &Api<DynamicObject>,
    config: &DynamicObject,
    browser: &DynamicObject,
    schema: Option<&PodSchema>,
    entry: String,
) -> Result<(Verdict, bool), ConfigError> {
    let (pod, removed) = match desired::pod_for(
        browser,
        std::slice::from_ref(config),
        &ctx.shared.kinds.browser,
        &ctx.shared.settings.policy,
        schema,
        |_, _, _| None,
    ) {
        PodCreation::Fail(f) => {
            let verdict = Verdict {
                rejection: Some(f.message),
                ..Verdict::default()
            };
            return Ok((verdict, false));
        }
        PodCreation::Render { pod, removed } => (pod, removed),
    };
    let name = browser.metadata.name.clone().unwrap_or_default();
    let params = PatchParams::apply(keys::FIELD_MANAGER).force().dry_run();
    ctx.shared.metrics.write(ApiWrite::DryRunPod);
    let (rejection, refusal, unknown_fields) =
        match pods.patch(&name, &params, &Patch::Apply(&pod)).await {
            Ok(_) => (None, None, false),
            Err(kube::Error::Api(s)) => {
                let rejection = rejection::classify(s.code, &s.message);
                match rejection.remedy {
                    // A field the cluster's schema lacks judges the pod itself, whatever the
                    // code (HTTP 500 before 1.25).
                    _ if rejection.unknown_fields => (Some(s.message), None, true),
                    Remedy::Invalid(_) => (Some(s.message), None, false),
                    // Admission forbade even the dry run (a ResourceQuota of zero pods, a
                    // policy), or the server refused it for a reason no rule knows (413 …):
                    // the pod was not judged. Not a failure to send: retrying at once would
                    // change nothing, so it is tried again with a growing backoff.
                    Remedy::Forbidden(_) | Remedy::Refused => (None, Some(s.message), false),
                    Remedy::Retry => {
                        let source = kube::Error::Api(s);
                        return Err(ConfigError::DryRun { entry, source });
                    }
                }
            }
            Err(source) => return Err(ConfigError::DryRun { entry, source }),
        };
    let verdict = Verdict {
        rejection,
        refusal,
        removed,
    };
    Ok((verdict, unknown_fields))
}

async fn dry_run_entries(
    ctx: &Context,
    config: &DynamicObject,
    reports: &[validate::EntryReport],
) -> Result<Vec<DryRun>, ConfigError> {
    let ns = config.metadata.namespace.as_deref().unwrap_or("default");
    let pods: Api<DynamicObject> =
        Api::namespaced_with(ctx.shared.client.clone(), ns, &ctx.shared.kinds.pod);
    let mut schema = ctx.shared.schemas.current();
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
        let Some(browser) = synthetic_browser(config, &ctx.shared.kinds, &report.browser, version)
        else {
            continue;
        };
        let entry = format!("{} {}", report.browser, report.version);
        let (mut verdict, unknown_fields) = dry_run_entry(
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
        if unknown_fields && ctx.shared.schemas.renewed_since(schema.as_deref()).await {
            schema = ctx.shared.schemas.current();
            (verdict, _) =
                dry_run_entry(ctx, &pods, config, &browser, schema.as_deref(), entry).await?;
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
    let span = info_span!("validate_config", namespace = %ns, name = %config.name_any());
    async move {
        if config.metadata.deletion_timestamp.is_some() {
            return release_go_finalizer(&ctx, &config).await;
        }
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
        // Judged against the schema in use at the start; a schema change re-judges anyway.
        let schema = ctx.shared.schemas.current();
        let (runs, pending) = judge(&ctx, &config, &reports, schema.as_ref()).await?;
        let refusals = report::refusals(&runs);
        let pre_pull = prepull::pre_pull(
            ctx.prepull.as_ref(),
            &ctx.shared.client,
            &ctx.events,
            &ctx.shared.metrics,
            &ctx.shared.kinds.browserconfig.api_version,
            &config,
        )
        .await?;
        let findings = Findings {
            problems: &report::problems(&reports, &runs),
            refusals: &refusals,
            removed: &report::removed_fields(&runs),
            conflicts: &conflicts(&ctx, &config),
            pre_pull: pre_pull.as_ref().map(|(finding, _)| finding),
        };
        if !write_status(&ctx, &config, findings).await? {
            return Ok(Action::await_change());
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
        if let Some(left) = pending {
            return Ok(Action::requeue(left));
        }
        Ok(refused(&ctx, &config, schema.as_ref(), runs, &refusals).await)
    }
    .instrument(span)
    .await
}

/// A config being deleted is not judged; the Go controller's finalizer, if it still holds it,
/// is released (`config::leftovers`).
async fn release_go_finalizer(
    ctx: &Context,
    config: &DynamicObject,
) -> Result<Action, ConfigError> {
    let Some(patch) = leftovers::go_finalizer_release(config) else {
        return Ok(Action::await_change());
    };
    let ns = config.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.shared.client.clone(),
        &ns,
        &ctx.shared.kinds.browserconfig,
    );
    ctx.shared.metrics.write(ApiWrite::PatchBrowserConfig);
    info!(namespace = %ns, name = %config.name_any(), "releasing the Go browser-controller's finalizer from a deleted BrowserConfig");
    match api
        .patch(
            &config.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        // Gone, or the list changed meanwhile: the next event says what is left.
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => Ok(Action::await_change()),
        Err(source) => Err(ConfigError::Finalizer(source)),
    }
}

/// The cluster's verdicts on the entries of `config`: dry-run once per generation and Pod
/// schema, else what was recorded; and how long until a refused dry run is tried again.
async fn judge(
    ctx: &Context,
    config: &DynamicObject,
    reports: &[validate::EntryReport],
    schema: Option<&Arc<PodSchema>>,
) -> Result<(Vec<DryRun>, Option<Duration>), ConfigError> {
    let (ns, name) = (config.namespace().unwrap_or_default(), config.name_any());
    let uid = config.metadata.uid.clone().unwrap_or_default();
    let generation = config.metadata.generation.unwrap_or(0);
    let verdicts = &ctx.shared.verdicts;
    if let Some((refused, left)) =
        verdicts.pending_refusal(&uid, generation, schema, Instant::now())
    {
        return Ok((refused, Some(left)));
    }
    if !verdicts.judged(&uid, generation, schema) {
        let runs = dry_run_entries(ctx, config, reports).await?;
        let judged = runs
            .iter()
            .all(|r| r.refusal.is_none())
            .then(|| (generation, schema.map(Arc::downgrade)));
        verdicts.record(&ns, &name, &uid, judged, &runs);
        return Ok((runs, None));
    }
    // Already judged: the verdicts as recorded.
    let recorded = reports.iter().map(|r| {
        let verdict = verdicts.verdict(&ns, &name, &r.browser, &r.version);
        DryRun {
            browser: r.browser.clone(),
            version: r.version.clone(),
            rejection: verdict.rejection,
            refusal: verdict.refusal,
            removed: verdict.removed,
        }
    });
    Ok((recorded.collect(), None))
}

/// The entries of `config` that an older BrowserConfig of its namespace defines too.
fn conflicts(ctx: &Context, config: &DynamicObject) -> Vec<lookup::Conflict> {
    let (ns, name) = (config.metadata.namespace.as_deref(), config.name_any());
    let same_ns: Vec<Arc<DynamicObject>> = ctx
        .store
        .state()
        .into_iter()
        .filter(|c| c.metadata.namespace.as_deref() == ns)
        .collect();
    let mut conflicts = lookup::conflicts(&same_ns);
    conflicts.retain(|c| c.loser == name);
    conflicts
}

/// Writes the status of `config` from its `findings` when it changes; `false` when the API
/// server refused it for a reason no rule knows (said once, and not tried again until the
/// config changes: a retry would be refused alike).
async fn write_status(
    ctx: &Context,
    config: &DynamicObject,
    findings: Findings<'_>,
) -> Result<bool, ConfigError> {
    let current = config.data.get("status").cloned().unwrap_or(Value::Null);
    let spec = config.data.get("spec").cloned().unwrap_or(Value::Null);
    let generation = config.metadata.generation;
    let desired = report::status(&current, &spec, generation, findings, Timestamp::now());
    if desired == current {
        return Ok(true);
    }
    let (ns, name) = (config.namespace().unwrap_or_default(), config.name_any());
    match apply_status(ctx, &ns, &name, None, desired).await {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(status)) if rejection::is_refusal(status.code) => {
            let note = format!(
                "the API server refused this BrowserConfig's status: {} {}: {}",
                status.code, status.reason, status.message
            );
            warn!(error = %note, "BrowserConfig status refused; not retried until it changes");
            ctx.events
                .publish(config, EventType::Warning, report::STATUS_REFUSED, note)
                .await;
            Ok(false)
        }
        Err(error) => Err(ConfigError::Status(error)),
    }
}

/// The cluster refused to judge some entries: they are judged again after a growing wait,
/// said once in a Warning Event.
async fn refused(
    ctx: &Context,
    config: &DynamicObject,
    schema: Option<&Arc<PodSchema>>,
    runs: Vec<DryRun>,
    refusals: &[String],
) -> Action {
    let uid = config.metadata.uid.clone().unwrap_or_default();
    let judged = (
        config.metadata.generation.unwrap_or(0),
        schema.map(Arc::downgrade),
    );
    let (wait, first) = ctx
        .shared
        .verdicts
        .refused(&uid, judged, runs, Instant::now());
    if first {
        let note = refusals.join(" | ");
        warn!(error = %note, retry_in = ?wait, "the cluster refused to validate BrowserConfig entries; their validity is unknown");
        let reason = report::VALIDATION_REFUSED;
        ctx.events
            .publish(config, EventType::Warning, reason, note)
            .await;
    } else {
        debug!(retry_in = ?wait, "the cluster still refuses to validate BrowserConfig entries");
    }
    Action::requeue(wait)
}

fn error_policy(config: Arc<DynamicObject>, error: &ConfigError, _ctx: Arc<Context>) -> Action {
    warn!(namespace = %config.namespace().unwrap_or_default(), name = %config.name_any(), error = %error, "BrowserConfig validation failed; retrying");
    Action::requeue(Duration::from_secs(30))
}

/// What the validators of every scope share.
#[derive(Clone)]
pub struct Validation {
    pub shared: Arc<Shared>,
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
    let shared = validation.shared;
    let (client, metrics, link) = (&shared.client, &shared.metrics, &shared.link);
    let (ns, browserconfig) = (namespace.as_deref(), &shared.kinds.browserconfig);
    // Config deletions, DaemonSet lists and changes: DaemonSets of configs that are gone are
    // swept.
    let (sweep, sweeps) = futures::channel::mpsc::unbounded::<()>();
    let health = WatchHealth::new(Watched::BrowserConfigs, metrics.clone());
    let cache = watch::Cache::<DynamicObject>::new(browserconfig.clone(), health);
    let (store, health) = (cache.reader.clone(), cache.health.clone());
    let api = scoped_api::<Decoded<DynamicObject>>(client, ns, browserconfig);
    let (configs, listed, undecodable) = config_watch(cache, api, link, sweep.clone());
    let daemon_sets = validation
        .prepull
        .map(|images| prepull::daemon_set_watch(client, ns, metrics, link, images, sweep));
    let (prepull, daemon_set_changes, daemon_sets_listed) = match daemon_sets {
        Some((prepull, changes, listed)) => (Some(prepull), changes, listed),
        None => (None, stream::empty().boxed(), stream::empty().boxed()),
    };
    // Held until the scope stops: the gauges read these caches at scrape time.
    let _gauges = metrics.observe_configs(store.clone());
    let _prepull_gauges = prepull
        .as_ref()
        .map(|p| metrics.observe_prepull(p.store.clone()));
    let sweeper = prepull.as_ref().map(|p| {
        let configs = (store.clone(), health.clone());
        p.sweeper(client.clone(), configs, metrics.clone(), sweeps)
    });
    // Every config is judged again when the cluster's Pod schema changes.
    let schema_changes = stream::unfold(shared.schemas.subscribe(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    });
    let ctx = Context::new(shared.clone(), validation.events, store, prepull);
    let everything =
        stream::select_all([listed.boxed(), schema_changes.boxed(), daemon_sets_listed]);
    let controller = controller(
        ctx.clone(),
        configs,
        daemon_set_changes,
        everything,
        shutdown,
    );
    let sweeper = futures::future::OptionFuture::from(sweeper);
    futures::future::join3(controller, sweeper, report_undecodable(ctx, undecodable)).await;
}

/// The BrowserConfig watch into `cache`: its changes, its completed lists (each judges every
/// config again) and the configs the client cannot decode; deletions and lists ask `sweep`
/// to look for DaemonSets of configs that are gone.
fn config_watch(
    cache: watch::Cache<DynamicObject>,
    api: kube::Api<Decoded<DynamicObject>>,
    link: &Link,
    sweep: futures::channel::mpsc::UnboundedSender<()>,
) -> (
    impl Stream<Item = Result<DynamicObject, watcher::Error>> + Send + use<>,
    impl Stream<Item = ()> + Send + use<>,
    futures::channel::mpsc::UnboundedReceiver<Undecodable>,
) {
    let (listed_tx, listed) = futures::channel::mpsc::unbounded::<()>();
    let (undecodable_tx, undecodable) = futures::channel::mpsc::unbounded::<Undecodable>();
    let watched = cache.watch(api, watcher::Config::default().any_semantic(), link);
    let watched = watch::skip_undecodable(watched, move |u: &Undecodable| {
        let _ = undecodable_tx.unbounded_send(u.clone());
    });
    let configs = cache.fill(watched, move || {
        let _ = listed_tx.unbounded_send(());
    });
    let configs = configs.inspect(move |event| {
        if matches!(
            event,
            Ok(watcher::Event::Delete(_) | watcher::Event::InitDone)
        ) {
            let _ = sweep.unbounded_send(());
        }
    });
    (watch::live_changes(configs, true), listed, undecodable)
}

/// The kube-runtime controller of the BrowserConfigs: a config change reconciles every
/// config of its namespace (conflicts involve the others), a DaemonSet change the config that
/// controls it, and `everything` fires for them all.
async fn controller(
    ctx: Arc<Context>,
    configs: impl Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
    daemon_set_changes: prepull::Triggers<Result<DynamicObject, watcher::Error>>,
    everything: impl Stream<Item = ()> + Send + 'static,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (store, ar) = (ctx.store.clone(), ctx.shared.kinds.browserconfig.clone());
    let (owner_ar, config_ar) = (ar.clone(), ar.clone());
    let same_namespace = move |changed: DynamicObject| {
        let ns = changed.metadata.namespace.clone().unwrap_or_default();
        let refs = store.state().into_iter().filter_map(|c| {
            (c.metadata.namespace.as_deref() == Some(ns.as_str())).then_some(())?;
            Some(ObjectRef::new_with(c.metadata.name.as_deref()?, config_ar.clone()).within(&ns))
        });
        refs.collect::<Vec<_>>()
    };
    let owner = move |ds: DynamicObject| {
        let ns = ds.metadata.namespace.clone()?;
        let (config, _) = progress::owner(&ds)?;
        Some(ObjectRef::new_with(config, owner_ar.clone()).within(&ns))
    };
    Controller::for_stream_with(stream::empty(), ctx.store.clone(), ar.clone())
        .watches_stream_with(configs, same_namespace, ar)
        .watches_stream_with(daemon_set_changes, owner, kinds::daemon_sets())
        .reconcile_all_on(everything)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "BrowserConfig controller event");
            }
        })
        .await;
}

/// Applies `status` to the BrowserConfig `name` (only while it has `uid`, when given). The
/// answer is read as [`Decoded`]: that of an object too deep to read still decodes.
async fn apply_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    uid: Option<&str>,
    status: Value,
) -> Result<(), kube::Error> {
    let api: Api<Decoded<DynamicObject>> = Api::namespaced_with(
        ctx.shared.client.clone(),
        ns,
        &ctx.shared.kinds.browserconfig,
    );
    let mut body = apply::body(&ctx.shared.kinds.browserconfig, name, uid);
    body["status"] = status;
    ctx.shared.metrics.write(ApiWrite::ApplyConfigStatus);
    api.patch_status(
        name,
        &PatchParams::apply(keys::FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
}

/// Reports each BrowserConfig the client cannot decode once per generation: a log line with
/// its name always, a `Valid: False` condition (reason `Undecodable`) when its status can be
/// written, else a Warning Event. It stays out of every cache, so no Browser uses its entries
/// and the other configs are served as before.
async fn report_undecodable(
    ctx: Arc<Context>,
    mut undecodable: futures::channel::mpsc::UnboundedReceiver<Undecodable>,
) {
    let mut reported = std::collections::HashSet::new();
    while let Some(config) = undecodable.next().await {
        let meta = &config.metadata;
        let (ns, name) = (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        );
        if !reported.insert((meta.uid.clone(), meta.generation)) {
            continue;
        }
        warn!(namespace = %ns, name = %name, error = %config.error, "cannot read this BrowserConfig; it is skipped");
        let message = report::undecodable_message(&config.error);
        let status = report::undecodable_status(meta.generation, &message, Timestamp::now());
        if let Err(error) = apply_status(&ctx, &ns, &name, meta.uid.as_deref(), status).await {
            warn!(namespace = %ns, name = %name, error = %describe(&error), "cannot write the status of the unreadable BrowserConfig; reporting it in an Event");
            let object = DynamicObject::from_identity(meta.clone());
            ctx.events
                .publish(&object, EventType::Warning, report::UNDECODABLE, message)
                .await;
        }
    }
}
