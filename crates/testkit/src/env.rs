//! The scenario language of the lifecycle suite, which runs the operator inside the test
//! process against the API server double: one `Env` holds the server, a kubelet on `node-1`,
//! the operator and a watcher's view of the Browsers, and speaks in Browsers, configs and
//! conditions.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use browser_controller::api::crd::{self, Layout};
use browser_controller::cli::Cli;
use browser_controller::link::Link;
use browser_controller::metrics::Metrics;
use browser_controller::operator;

use super::apiserver::{ApiServer, Fault};
use super::fixtures::{self, Browser, Fixture};
use super::host;
use super::kinds::{browser_resource, config_resource, pod_resource};
use super::kubelet::{Kubelet, KubeletHandle, Script};

pub const NS: &str = "sessions";
pub const WAIT: Duration = Duration::from_secs(20);

/// One API server double with CRDs installed, a kubelet, and (once started) the operator.
pub struct Env {
    pub server: ApiServer,
    pub client: Client,
    /// Shared by every run of the operator in this Env, so a restart keeps counting.
    pub metrics: Arc<Metrics>,
    pub kubelet: KubeletHandle,
    stop: Option<oneshot::Sender<()>>,
    operator: Option<JoinHandle<()>>,
    events: Arc<Mutex<Vec<Value>>>,
}

/// How an [`Env`] is set up: by default a fresh server with our CRDs of the default layout.
pub struct EnvBuilder {
    server: ApiServer,
}

impl Env {
    pub fn builder() -> EnvBuilder {
        EnvBuilder {
            server: ApiServer::new(),
        }
    }

    /// The common case: our default-layout CRDs, the Browsers watched, the operator running
    /// with `flags`.
    pub async fn start(flags: &[&str]) -> Env {
        Env::builder().start(flags).await
    }
}

impl EnvBuilder {
    /// A server the test prepared (an older cluster, say).
    pub fn server(mut self, server: ApiServer) -> Self {
        self.server = server;
        self
    }

    /// Installs our CRDs, starts the kubelet, watches the Browsers and starts the operator
    /// with `flags`.
    pub async fn start(self, flags: &[&str]) -> Env {
        for crd in &crd::crds(Layout::Default) {
            self.server.install_crd(crd).expect("CRD installs");
        }
        let client = self.server.client();
        let kubelet = Kubelet::start(client.clone(), "node-1", Script::Run);
        let mut env = Env {
            server: self.server,
            client,
            metrics: Arc::new(Metrics::new()),
            kubelet,
            stop: None,
            operator: None,
            events: Arc::new(Mutex::new(Vec::new())),
        };
        env.record_browser_events();
        env.start_operator(flags);
        env
    }
}

/// The config every suite runs Chrome 139.0 with: the browser and a seleniferous sidecar.
pub fn chrome_spec() -> Value {
    json!({
        "template": {
            "sidecars": [{"name": "seleniferous", "image": "alcounit/seleniferous:v2", "ports": [{"containerPort": 4445}]}],
            "ports": [{"containerPort": 4444}],
        },
        "browsers": {"chrome": {"139.0": {"image": "selenium/standalone-chrome:139.0"}}}
    })
}

pub fn is_running(b: &Option<Value>) -> bool {
    b.as_ref()
        .is_some_and(|b| b["status"]["phase"] == "Running")
}

pub fn condition<'a>(conditions: &'a [Value], kind: &str) -> Option<&'a Value> {
    conditions.iter().find(|c| c["type"] == kind)
}

impl Env {
    /// Starts the operator as the binary would with `flags`, its endpoints off.
    pub fn start_operator(&mut self, flags: &[&str]) {
        let mut argv = vec![
            "browser-controller",
            "--health-probe-bind-address=0",
            "--metrics-addr=0",
        ];
        argv.extend_from_slice(flags);
        let args = Cli::try_parse_from(argv).expect("flags parse").run;
        let (tx, rx) = oneshot::channel::<()>();
        let client = self.client.clone();
        let metrics = self.metrics.clone();
        self.stop = Some(tx);
        self.operator = Some(tokio::spawn(async move {
            let stop = async move {
                let _ = rx.await;
            };
            operator::run_with_client(client, Link::new(), args, metrics, stop)
                .await
                .expect("operator runs");
        }));
    }

    /// Stops the operator as SIGTERM does and waits for it to end.
    pub async fn stop_operator(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(handle) = self.operator.take() {
            tokio::time::timeout(WAIT, handle)
                .await
                .expect("operator stops in time")
                .expect("operator task ends cleanly");
        }
    }

    /// Every watch event of Browsers, as a client (the hub, `kubectl get -w`) sees them.
    fn record_browser_events(&self) {
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &browser_resource(Layout::Default));
        let events = self.events.clone();
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(event)) = stream.next().await {
                if let watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) = event
                    && let Ok(v) = serde_json::to_value(&obj)
                {
                    events.lock().unwrap().push(v);
                }
            }
        });
    }

    /// The statuses a watcher saw for `name`, in order.
    pub fn seen_statuses(&self, name: &str) -> Vec<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|o| o["metadata"]["name"] == name)
            .filter_map(|o| o.get("status").cloned())
            .collect()
    }

    /// The first failed status a watcher saw for `name`.
    pub async fn failure_of(&self, name: &str) -> Value {
        self.until(&format!("{name} to fail"), |e| {
            e.seen_statuses(name).iter().any(|s| s["phase"] == "Failed")
        })
        .await;
        self.seen_statuses(name)
            .into_iter()
            .find(|s| s["phase"] == "Failed")
            .unwrap()
    }

    pub fn browsers(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), NS, &browser_resource(Layout::Default))
    }

    pub fn configs(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), NS, &config_resource(Layout::Default))
    }

    pub fn pods(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), NS, &pod_resource())
    }

    /// Creates `browser` (a [`fixtures::browser`]) in [`NS`].
    pub async fn create_browser(&self, browser: Fixture<Browser>) {
        let obj = browser
            .namespace(NS)
            .api_version(&browser_resource(Layout::Default).api_version)
            .object();
        self.browsers()
            .create(&PostParams::default(), &obj)
            .await
            .expect("browser created");
    }

    pub async fn create_config(&self, name: &str, spec: Value) {
        let obj = fixtures::config(name)
            .namespace(NS)
            .api_version(&config_resource(Layout::Default).api_version)
            .spec(spec)
            .object();
        self.configs()
            .create(&PostParams::default(), &obj)
            .await
            .expect("config created");
    }

    /// The config named `chrome` with [`chrome_spec`].
    pub async fn chrome_config(&self) {
        self.create_config("chrome", chrome_spec()).await;
    }

    pub fn browser(&self, name: &str) -> Option<Value> {
        self.server.get("browsers", NS, name)
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        self.server.get("pods", NS, name)
    }

    /// Waits until `check` holds, polling the server state; on timeout it shows the
    /// Browsers, the pods and the operator's metrics.
    pub async fn until(&self, what: &str, check: impl Fn(&Env) -> bool) {
        host::until_async(
            what,
            WAIT,
            || check(self),
            || {
                format!(
                    "browsers: {:#?}; pods: {:#?}; metrics:\n{}",
                    self.server.list("browsers", NS),
                    self.server.list("pods", NS),
                    self.metrics.encode().unwrap()
                )
            },
        )
        .await;
    }

    pub async fn until_gone(&self, name: &str) {
        self.until(&format!("{name} and its pod to be gone"), |e| {
            e.browser(name).is_none() && e.pod(name).is_none()
        })
        .await;
    }

    /// Waits until BrowserConfig `name` carries a condition of type `kind`.
    pub async fn until_config_condition(&self, name: &str, kind: &str) {
        self.until(&format!("the {kind} condition of {name}"), |e| {
            e.server
                .get("browserconfigs", NS, name)
                .and_then(|c| c["status"]["conditions"].as_array().cloned())
                .is_some_and(|cs| condition(&cs, kind).is_some())
        })
        .await;
    }

    /// Reasons of the Events about object `name`, sorted.
    pub fn event_reasons(&self, name: &str) -> Vec<String> {
        let mut reasons: Vec<String> = self
            .server
            .list("events.events.k8s.io", NS)
            .iter()
            .filter(|e| e["regarding"]["name"] == name)
            .filter_map(|e| e["reason"].as_str().map(String::from))
            .collect();
        reasons.sort();
        reasons
    }
}

/// What the suites ask of a running scenario beyond its objects: the operator's own
/// metrics, the server's request log, Events, and faults.
impl Env {
    /// API writes the operator issued to Browsers and Pods (its own metrics).
    pub fn operator_writes(&self) -> u64 {
        let text = self.metrics.encode().unwrap();
        text.lines()
            .filter(|l| l.starts_with("browser_controller_api_writes_total{"))
            .filter(|l| l.contains("resource=\"browsers") || l.contains("resource=\"pods\""))
            .filter(|l| !l.contains("dry-run"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Pod applies of the operator that created a pod `name` (201).
    pub fn pod_creates(&self, name: &str) -> usize {
        self.server
            .requests()
            .iter()
            .filter(|r| {
                r.resource == "pods"
                    && r.name.as_deref() == Some(name)
                    && r.patch_type.as_deref() == Some("apply")
                    && r.status == 201
            })
            .count()
    }

    /// Makes the operator's Browser cache stall: every Browser watch and list fails, so the
    /// cache keeps what it last saw, while the other watches resume at once.
    pub fn stall_browser_watch(&self) {
        for verb in ["watch", "list"] {
            self.server.inject(Fault::new(
                verb,
                "browsers",
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ));
        }
        self.server.drop_watches();
    }

    pub fn pod_applies(&self) -> usize {
        self.server
            .requests()
            .iter()
            .filter(|r| {
                r.resource == "pods"
                    && r.patch_type.as_deref() == Some("apply")
                    && !r.dry_run
                    && r.subresource.is_none()
            })
            .count()
    }

    /// Notes of the Warning events about `name` with `reason`.
    pub fn warnings(&self, name: &str, reason: &str) -> Vec<String> {
        self.server
            .list("events.events.k8s.io", NS)
            .iter()
            .filter(|e| e["regarding"]["name"] == name && e["reason"] == reason)
            .filter(|e| e["type"] == "Warning")
            .filter_map(|e| e["note"].as_str().map(String::from))
            .collect()
    }

    /// The BrowserConfig's conditions once it reports `Valid` for its current generation.
    pub async fn judged_conditions(&self, name: &str) -> Vec<Value> {
        self.until(&format!("{name} judged"), |e| {
            e.server.get("browserconfigs", NS, name).is_some_and(|c| {
                c["status"]["observedGeneration"] == c["metadata"]["generation"]
                    && c["status"]["conditions"]
                        .as_array()
                        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Valid"))
            })
        })
        .await;
        self.server.get("browserconfigs", NS, name).unwrap()["status"]["conditions"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// GETs of an OpenAPI document, with their status codes.
    pub fn openapi_requests(&self) -> Vec<(String, u16)> {
        self.server
            .requests()
            .iter()
            .filter(|r| r.path.starts_with("/openapi/"))
            .map(|r| (r.path.clone(), r.status))
            .collect()
    }

    pub fn daemon_sets(&self) -> Vec<Value> {
        self.server.list("daemonsets.apps", NS)
    }
}
