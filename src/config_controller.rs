//! BrowserConfig validation against the cluster (SPEC §3.4): whenever a BrowserConfig
//! changes, every entry is validated locally, rendered and submitted as a server-side
//! dry-run apply so the cluster's own Pod schema judges it; the verdicts go to the
//! BrowserConfig's status and are kept for Browser reconciles (`InvalidConfig`).
//! Each generation is dry-run once per process: never in a loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::{Instrument, debug, info_span, warn};

use crate::api::discovery::Kinds;
use crate::api::keys;
use crate::config::report::{self, DryRun};
use crate::config::{lookup, validate};
use crate::controller::scoped_api;
use crate::lifecycle::decide::PodCreation;
use crate::lifecycle::desired;
use crate::metrics::Metrics;

/// Version used to render a `"*"` entry for its dry run (a valid label value).
const SAMPLE_VERSION: &str = "latest";

/// Rejection messages by lower-cased (browser, version key) of one config.
type Rejections = HashMap<(String, String), String>;

/// Dry-run rejections by namespace and config name.
#[derive(Default)]
pub struct Verdicts {
    rejected: Mutex<HashMap<(String, String), Rejections>>,
    judged: Mutex<HashMap<String, i64>>,
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
        let rejected = self.rejected.lock().unwrap_or_else(|e| e.into_inner());
        rejected
            .get(&(ns.to_string(), config.to_string()))?
            .get(&(browser.to_lowercase(), version_key.to_lowercase()))
            .cloned()
    }

    fn record(&self, ns: &str, config: &str, uid: &str, generation: i64, runs: &[DryRun]) {
        let entries = runs
            .iter()
            .filter_map(|r| {
                let msg = r.rejection.clone()?;
                Some(((r.browser.to_lowercase(), r.version.to_lowercase()), msg))
            })
            .collect();
        self.rejected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((ns.to_string(), config.to_string()), entries);
        self.judged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), generation);
    }

    fn judged(&self, uid: &str, generation: i64) -> bool {
        self.judged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            == Some(&generation)
    }
}

/// Why validating a BrowserConfig failed; retried later.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("writing BrowserConfig status: {0}")]
    Status(#[source] kube::Error),
    #[error("dry-run of entry {entry} could not be sent: {source}")]
    DryRun {
        entry: String,
        #[source]
        source: kube::Error,
    },
}

struct Context {
    client: Client,
    kinds: Kinds,
    verdicts: Arc<Verdicts>,
    metrics: Arc<Metrics>,
    store: Store<DynamicObject>,
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
/// lacks, which server-side apply reports as HTTP 500) rather than the moment.
fn is_rejection(code: u16, message: &str) -> bool {
    matches!(code, 400 | 422) || (code == 500 && message.contains("not declared in schema"))
}

async fn dry_run_entries(
    ctx: &Context,
    config: &DynamicObject,
    reports: &[validate::EntryReport],
) -> Result<Vec<DryRun>, ConfigError> {
    let ns = config.metadata.namespace.as_deref().unwrap_or("default");
    let pods: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ctx.kinds.pod);
    let params = PatchParams::apply(keys::FIELD_MANAGER).force().dry_run();
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
        let rejection = match desired::pod_for(
            &browser,
            std::slice::from_ref(config),
            &ctx.kinds.browser,
            |_, _, _| None,
        ) {
            PodCreation::Fail(f) => Some(f.message),
            PodCreation::Render(pod) => {
                let name = browser.metadata.name.clone().unwrap_or_default();
                ctx.metrics.write("apply-dry-run", "pods");
                match pods.patch(&name, &params, &Patch::Apply(&pod)).await {
                    Ok(_) => None,
                    Err(kube::Error::Api(s)) if is_rejection(s.code, &s.message) => Some(s.message),
                    Err(source) => {
                        return Err(ConfigError::DryRun {
                            entry: format!("{} {}", report.browser, report.version),
                            source,
                        });
                    }
                }
            }
        };
        runs.push(DryRun {
            browser: report.browser.clone(),
            version: report.version.clone(),
            rejection,
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
        let reports = validate::validate_config(&config);
        let current = config.data.get("status").cloned().unwrap_or(Value::Null);
        let runs = if ctx.verdicts.judged(&uid, generation) {
            None
        } else {
            Some(dry_run_entries(&ctx, &config, &reports).await?)
        };
        let runs = match runs {
            Some(runs) => {
                ctx.verdicts.record(&ns, &name, &uid, generation, &runs);
                runs
            }
            // Already judged: rebuild the verdicts from what was recorded.
            None => reports
                .iter()
                .map(|r| DryRun {
                    browser: r.browser.clone(),
                    version: r.version.clone(),
                    rejection: ctx.verdicts.rejection(&ns, &name, &r.browser, &r.version),
                })
                .collect(),
        };
        let problems = report::problems(&reports, &runs);
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
        let spec = config.data.get("spec").cloned().unwrap_or(Value::Null);
        let desired = report::status(
            &current,
            &spec,
            config.metadata.generation,
            &problems,
            &conflicts,
            Timestamp::now(),
        );
        if desired != current {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), &ns, &ctx.kinds.browserconfig);
            let body = json!({
                "apiVersion": ctx.kinds.browserconfig.api_version,
                "kind": ctx.kinds.browserconfig.kind,
                "metadata": {"name": name},
                "status": desired,
            });
            ctx.metrics.write("apply", "browserconfigs/status");
            api.patch_status(
                &name,
                &PatchParams::apply(keys::FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(ConfigError::Status)?;
        }
        Ok(Action::await_change())
    }
    .instrument(span)
    .await
}

fn error_policy(config: Arc<DynamicObject>, error: &ConfigError, _ctx: Arc<Context>) -> Action {
    warn!(namespace = %config.namespace().unwrap_or_default(), name = %config.name_any(), error = %error, "BrowserConfig validation failed; retrying");
    Action::requeue(std::time::Duration::from_secs(30))
}

/// Runs the BrowserConfig validator of one scope until `shutdown` resolves.
pub async fn run_scope(
    client: Client,
    kinds: Kinds,
    namespace: Option<String>,
    verdicts: Arc<Verdicts>,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api = scoped_api(&client, namespace.as_deref(), &kinds.browserconfig);
    let controller = Controller::new_with(
        api.clone(),
        watcher::Config::default().any_semantic(),
        kinds.browserconfig.clone(),
    );
    let store = controller.store();
    // Held until the scope stops: the BrowserConfig gauges read this cache at scrape time.
    let _gauge_source = metrics.observe_configs(store.clone());
    let mapper_store = store.clone();
    let ar = kinds.browserconfig.clone();
    let ctx = Arc::new(Context {
        client,
        kinds: kinds.clone(),
        verdicts,
        metrics,
        store,
    });
    // Conflicts involve other configs of the namespace: any change re-checks them all.
    controller
        .watches_with(
            api,
            kinds.browserconfig.clone(),
            watcher::Config::default().any_semantic(),
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
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "BrowserConfig controller event");
            }
        })
        .await;
}
