//! Which operator is measured: this repository's, or the Go browser-controller that Selenosis
//! users run today (`--go-controller`, a controller-runtime manager). The phases are the same
//! for both; what differs is read here: the flags each takes, the BrowserConfig it is given
//! and how it shows it has read it, its `/metrics` families, and how long a phase may take.

use std::time::Duration;

use browser_controller::api::keys;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::BenchError;
use crate::measure;
use crate::report::{WriteCounts, label};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// This repository's operator, in this process or as its binary.
    Ours,
    /// The Go browser-controller, as a process of its own.
    Go,
}

/// The Go controller's BrowserConfig reconciler puts this finalizer on every BrowserConfig it
/// has read: the sign that its configuration store holds the config too (both are fed by the
/// same informer).
const GO_CONFIG_FINALIZER: &str = "browserconfig.selenosis.io/finalizer";

/// controller-runtime names a controller after the kind it reconciles.
const GO_BROWSER_CONTROLLER: &str = "browser";

/// How reconciles and writes are moving, to tell when the operator has settled.
#[derive(Debug, PartialEq)]
pub struct Activity {
    /// Counters that stop changing once the operator is done.
    pub counters: Vec<f64>,
    pub in_flight: f64,
}

impl Flavour {
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Ours => "browser-controller",
            Flavour::Go => "Go browser-controller",
        }
    }

    /// The BrowserConfig as this operator is given it. The kubelet simulator and the
    /// benchmark's watches select pods by the label our operator sets on its pods; the Go
    /// controller sets no label of its own but copies the config's template labels, so its
    /// config carries that label there.
    pub fn config(self, config: &Value) -> Result<Value, BenchError> {
        let mut config = config.clone();
        if self == Flavour::Go {
            let labels = config
                .pointer_mut("/spec/template/labels")
                .and_then(Value::as_object_mut)
                .ok_or_else(|| {
                    BenchError::Fixture("the BrowserConfig has no template labels".into())
                })?;
            labels.insert(keys::LABEL_MANAGED_BY.into(), json!(keys::MANAGER));
        }
        Ok(config)
    }

    /// Whether the operator has read `config`: ours validates it (its `Ready` condition);
    /// the Go controller writes no status, only its finalizer.
    pub fn config_read(self, config: &DynamicObject) -> bool {
        match self {
            Flavour::Ours => config.data["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                }),
            Flavour::Go => config
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == GO_CONFIG_FINALIZER),
        }
    }

    /// Reconciles of Browsers done, and running now.
    pub fn reconciles(self, metrics: &str) -> (f64, f64) {
        match self {
            Flavour::Ours => (
                measure::sum(metrics, "browser_controller_reconciles_total", |_| true),
                measure::sum(metrics, "browser_controller_reconciles_in_flight", |_| true),
            ),
            Flavour::Go => {
                let browsers = |l: &str| label(l, "controller") == GO_BROWSER_CONTROLLER;
                (
                    measure::sum(metrics, "controller_runtime_reconcile_total", browsers),
                    measure::sum(metrics, "controller_runtime_active_workers", browsers),
                )
            }
        }
    }

    /// Ours is done when neither reconciles nor writes (Events are published after their
    /// reconcile) change; the Go controller reconciles every Running Browser again every 30 s,
    /// so only its writes tell.
    pub fn activity(self, metrics: &str) -> Activity {
        let (done, in_flight) = self.reconciles(metrics);
        let counters = match self {
            Flavour::Ours => vec![
                done,
                measure::sum(metrics, "browser_controller_api_writes_total", |_| true),
            ],
            Flavour::Go => vec![self.writes(metrics).total()],
        };
        Activity {
            counters,
            in_flight,
        }
    }

    /// The writes the operator's own metrics show. The Go controller's client counts its
    /// requests by method only, every resource together (its BrowserConfig finalizer too).
    pub fn writes(self, metrics: &str) -> WriteCounts {
        match self {
            Flavour::Ours => WriteCounts::from_metrics(metrics),
            Flavour::Go => {
                let mut counts = WriteCounts::default();
                for (labels, value) in measure::samples(metrics, "rest_client_requests_total") {
                    let method = label(&labels, "method");
                    if method != "GET" {
                        *counts
                            .lifecycle
                            .entry(format!("{method} (any resource)"))
                            .or_default() += value;
                    }
                }
                counts
            }
        }
    }

    /// Time allowed per Browser when a phase's deadline is set. The Go controller's client
    /// sends at most 20 requests per second to each kind (controller-runtime's default, a
    /// limiter per kind), and a session takes it about 5 Browser writes, one at a time.
    pub fn pace(self) -> Duration {
        match self {
            Flavour::Ours => Duration::from_millis(50),
            Flavour::Go => Duration::from_millis(500),
        }
    }

    /// Whether the operator leaves pods to the cluster's garbage collector: the Go controller
    /// deletes a Browser whose session ended without deleting its pod first.
    pub fn needs_collector(self) -> bool {
        self == Flavour::Go
    }
}
