//! Scenarios with the real Selenosis stack on the real node (`E2E_STACK_ASSETS`): a Selenium
//! client talks to the hub (selenosis), the hub creates Browsers through browser-service and
//! proxies the session to seleniferous in the pod, which forwards it to chromedriver and
//! Chromium. Each scenario also runs with the Go browser-controller in the operator's place
//! when `E2E_GO_CONTROLLER` names it: those runs are a parity report (docs/compatibility.md),
//! not checks of this operator. Transitions are read from the recorded watch history.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::images::{self, BUSYBOX, CHROMIUM, FIREFOX};
use crate::support::stack::{self, Component, LOOPBACK, Page, SIDECAR_PORT, Stack};
use crate::support::webdriver;
use crate::{Ctx, Seen, poll};

/// Chromium behind chromedriver.
pub(crate) const CHROME: &str = "139.0";
/// An image nobody can pull.
pub(crate) const MISSING: &str = "140.0";
/// A pod no node takes.
const NOWHERE: &str = "141.0";
/// A pod whose init container fails 8 s after it starts.
const FAILS_LATER: &str = "142.0";
/// Chromium behind an init container that takes 15 s: a pod still starting for a while.
pub(crate) const SLOW_START: &str = "143.0";
/// The hub's default wait for a Browser to run.
pub(crate) const HUB_TIMEOUT: Duration = Duration::from_secs(180);
/// The page every session loads, from the host.
pub(crate) const TITLE: &str = "browser-controller stack";

/// The seleniferous sidecar (of the scenario's set) as the Selenosis examples configure it;
/// `idle` is its `SESSION_IDLE_TIMEOUT`.
fn seleniferous(cx: &Ctx, idle: &str) -> Value {
    json!({
        "name": "seleniferous",
        "image": crate::stack_set(cx.layout).seleniferous(),
        "imagePullPolicy": "Never",
        "ports": [{"containerPort": SIDECAR_PORT}],
        "env": [
            {"name": "ROUTING_RULES", "value": "[]"},
            {"name": "BROWSER_PORT", "value": webdriver::PORT.to_string()},
            {"name": "SESSION_CREATE_TIMEOUT", "value": "1m"},
            {"name": "SESSION_IDLE_TIMEOUT", "value": idle},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    })
}

/// The BrowserConfig of the stack's scenarios, in the fields both operators read; once this
/// operator found it valid.
async fn config(cx: &Ctx, idle: &str) {
    write_config(cx, idle).await;
    if !cx.is_go() {
        cx.until_config("chrome", "Valid", "True").await;
    }
}

/// Writes the BrowserConfig of [`config`].
pub(crate) async fn write_config(cx: &Ctx, idle: &str) {
    let chromium = json!({
        "image": CHROMIUM,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
    });
    let mut chromium = chromium;
    // Session options may set the sidecar's env too (the browser container's always).
    chromium["optionsContainers"] = json!(["seleniferous"]);
    let mut nowhere = chromium.clone();
    nowhere["nodeSelector"] = json!({"e2e.selenosis.io/node": "none"});
    let mut fails_later = chromium.clone();
    fails_later["initContainers"] = json!([{
        "name": "setup",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", "sleep 8; exit 3"],
    }]);
    let mut slow_start = chromium.clone();
    slow_start["initContainers"] = json!([{
        "name": "setup",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sleep", "15"],
    }]);
    cx.create_config(
        "chrome",
        json!({
            "template": {
                "imagePullPolicy": "Never",
                "sidecars": [seleniferous(cx, idle)],
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Mi"}}],
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            },
            "browsers": {
                "chrome": {
                    CHROME: chromium,
                    MISSING: {"image": "localhost/does-not-exist:1.0", "imagePullPolicy": "IfNotPresent"},
                    NOWHERE: nowhere,
                    FAILS_LATER: fails_later,
                    SLOW_START: slow_start,
                },
                // More memory than Chromium, as the selenosis-deploy Firefox examples have it
                // (their 250m of CPU would not let ten sessions fit on the node's 2 cores),
                // named by the Firefox version (geckodriver matches it).
                "firefox": {firefox_version(): {
                    "image": FIREFOX,
                    "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1536Mi"}},
                }},
            },
        }),
    )
    .await;
}

/// browser-service and a hub for the scenario's namespace.
pub(crate) fn hub(cx: &Ctx, startup_timeout: Duration) -> (Stack, Component) {
    let stack = cx.stack();
    let hub = stack
        .hub(&cx.ns, startup_timeout)
        .unwrap_or_else(|e| panic!("the hub starts: {e}"));
    (stack, hub)
}

/// The version of the Firefox image's entry: the major version of its Firefox (Debian's ESR
/// of the day), which geckodriver matches against the session's `browserVersion`.
fn firefox_version() -> String {
    images::firefox_version(&images::cache_dir()).unwrap_or_else(|| "none".to_string())
}

/// What a Selenium client asks the hub for: headless Firefox ESR.
fn firefox_capabilities() -> Value {
    json!({"capabilities": {"alwaysMatch": {
        "browserName": "firefox",
        "browserVersion": firefox_version(),
        "moz:firefoxOptions": {"args": ["-headless"]},
    }}})
}

/// What a Selenium client asks the hub for: headless Chromium of `version`.
pub(crate) fn capabilities(version: &str) -> Value {
    let mut caps = webdriver::headless_chrome();
    caps["capabilities"]["alwaysMatch"]["browserVersion"] = json!(version);
    caps
}

/// [`capabilities`] with `selenosis:options`, as a client sets labels and env per session.
fn capabilities_with_options(version: &str, options: Value) -> Value {
    let mut caps = capabilities(version);
    caps["capabilities"]["alwaysMatch"]["selenosis:options"] = options;
    caps
}

/// A WebDriver request through the hub; its status and answer.
async fn send(hub: u16, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let path = format!("/wd/hub{path}");
    let method = method.to_string();
    tokio::task::spawn_blocking(move || {
        webdriver::request(
            LOOPBACK,
            hub,
            &method,
            &path,
            body.as_ref(),
            HUB_TIMEOUT + Duration::from_secs(30),
        )
    })
    .await
    .expect("the request's thread")
    .unwrap_or_else(|e| panic!("the hub answers: {e}"))
}

/// A session a client opened through the hub.
pub(crate) struct Session {
    id: String,
    /// When the new-session request was sent and answered.
    requested: Instant,
    answered: Instant,
}

/// Opens a session of `version` through the hub; `Err` with the hub's status and answer.
async fn new_session(hub: u16, version: &str) -> Result<Session, (u16, Value, Duration)> {
    open_session(hub, capabilities(version)).await
}

/// Opens a session asking for `capabilities`.
pub(crate) async fn open_session(
    hub: u16,
    capabilities: Value,
) -> Result<Session, (u16, Value, Duration)> {
    let requested = Instant::now();
    let (status, answer) = send(hub, "POST", "/session", Some(capabilities)).await;
    let answered = Instant::now();
    match answer["value"]["sessionId"].as_str() {
        Some(id) if status == 200 => Ok(Session {
            id: id.to_string(),
            requested,
            answered,
        }),
        _ => Err((status, answer, answered - requested)),
    }
}

/// Loads the host's page in the session and reads its title.
pub(crate) async fn title_of_page(
    hub: u16,
    session: &Session,
    page: &Page,
) -> Result<String, String> {
    let id = &session.id;
    let (status, answer) = send(
        hub,
        "POST",
        &format!("/session/{id}/url"),
        Some(json!({"url": page.url()})),
    )
    .await;
    if status != 200 {
        return Err(format!("navigate: {status}: {answer}"));
    }
    let (status, answer) = send(hub, "GET", &format!("/session/{id}/title"), None).await;
    match answer["value"].as_str() {
        Some(title) if status == 200 => Ok(title.to_string()),
        _ => Err(format!("title: {status}: {answer}")),
    }
}

pub(crate) async fn quit(hub: u16, session: &Session) {
    let (status, answer) = send(hub, "DELETE", &format!("/session/{}", session.id), None).await;
    assert_eq!(status, 200, "the session ends: {answer}");
}

/// Opens a session for each of `capabilities` at once through the hub and loads the page in
/// each; the sessions, in the order asked.
pub(crate) async fn open_at_once(
    hub: u16,
    page: &Arc<Page>,
    capabilities: Vec<Value>,
) -> Vec<Session> {
    let clients = capabilities.into_iter().map(|caps| {
        let page = page.clone();
        tokio::spawn(async move {
            let session = open_session(hub, caps)
                .await
                .map_err(|e| format!("{e:?}"))?;
            let title = title_of_page(hub, &session, &page).await?;
            Ok::<_, String>((session, title))
        })
    });
    let mut open = Vec::new();
    for result in futures::future::join_all(clients).await {
        let (session, title) = result
            .expect("the client's task")
            .expect("a usable session");
        assert_eq!(title, TITLE);
        open.push(session);
    }
    open
}

/// Quits `sessions`, checks one Browser per session and that each is gone with its one pod;
/// how long the new-session requests took, shortest first, in seconds.
async fn quit_all(cx: &Ctx, hub: u16, sessions: &[Session]) -> Vec<f64> {
    for session in sessions {
        quit(hub, session).await;
    }
    let names = browsers_seen(cx);
    assert_eq!(
        names.len(),
        sessions.len(),
        "one Browser per session: {names:?}"
    );
    for name in &names {
        ended_with_one_pod(cx, name).await;
    }
    let mut answered: Vec<f64> = sessions
        .iter()
        .map(|s| (s.answered - s.requested).as_secs_f64())
        .collect();
    answered.sort_by(f64::total_cmp);
    answered
}

/// The names of the Browsers the watch saw, in the order they appeared.
pub(crate) fn browsers_seen(cx: &Ctx) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for s in cx
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.kind == "Browser")
    {
        if let Some(name) = s.object["metadata"]["name"].as_str()
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_string());
        }
    }
    names
}

/// The only Browser the scenario saw.
fn only_browser(cx: &Ctx) -> String {
    let names = browsers_seen(cx);
    assert_eq!(names.len(), 1, "one Browser: {names:?}");
    names[0].clone()
}

/// When the history of `kind` `name` first shows `check`.
fn first(cx: &Ctx, kind: &str, name: &str, check: impl Fn(&Seen) -> bool) -> Option<Instant> {
    cx.history(kind, name)
        .into_iter()
        .find(|s| check(s))
        .map(|s| s.at)
}

/// Waits until the Browser `name` and its pod are gone, and checks it had one pod.
pub(crate) async fn ended_with_one_pod(cx: &Ctx, name: &str) {
    cx.until_gone(name).await;
    assert_eq!(cx.pod_uids(name).len(), 1, "{name} had one pod");
}

/// A WebDriver session through the hub: new session, a page served on the host loaded, its
/// title read, quit. The Browser and its pod are gone afterwards. Prints the time from the
/// new-session request to a usable session, and its parts from the recorded history.
pub(crate) async fn stack_webdriver_session_through_the_hub(cx: Arc<Ctx>) {
    cx.start_operator_under_test(&[]);
    config(&cx, "1m").await;
    let (_stack, hub) = hub(&cx, HUB_TIMEOUT);
    let (session, name) = a_usable_session(&cx, hub.port(), capabilities(CHROME), "Chrome").await;
    quit(hub.port(), &session).await;
    ended_with_one_pod(&cx, &name).await;
}

/// Opens a session asking for `capabilities` through the hub, loads a page served on the host
/// and reads its title; prints the time from the new-session request to each step, from the
/// recorded history. The session and its Browser's name.
async fn a_usable_session(
    cx: &Ctx,
    hub: u16,
    capabilities: Value,
    what: &str,
) -> (Session, String) {
    let page = Page::serve(&format!("<html><head><title>{TITLE}</title></head></html>"));
    let session = open_session(hub, capabilities)
        .await
        .unwrap_or_else(|e| panic!("a new {what} session: {e:?}"));
    let title = title_of_page(hub, &session, &page)
        .await
        .expect("the page's title");
    let usable = Instant::now();
    assert_eq!(title, TITLE);
    let name = only_browser(cx);
    let since = |at: Option<Instant>| {
        at.map_or("?".to_string(), |at| {
            format!("{:.1}s", (at - session.requested).as_secs_f64())
        })
    };
    let phase = |s: &Seen, phase: &str| s.object["status"]["phase"] == phase;
    println!(
        "    stack ({what}): Browser seen {}, pod seen {}, pod Running {}, Browser Running {}, session answered {}, page title read {} after the new-session request",
        since(first(cx, "Browser", &name, |_| true)),
        since(first(cx, "Pod", &name, |_| true)),
        since(first(cx, "Pod", &name, |s| phase(s, "Running"))),
        since(first(cx, "Browser", &name, |s| phase(s, "Running"))),
        since(Some(session.answered)),
        since(Some(usable)),
    );
    (session, name)
}

/// Ten clients open sessions at once: one pod each, every session usable, all cleaned up
/// once the clients quit.
pub(crate) async fn stack_ten_sessions_at_once_one_pod_each(cx: Arc<Ctx>) {
    cx.start_operator_under_test(&[]);
    config(&cx, "1m").await;
    let (_stack, hub) = hub(&cx, HUB_TIMEOUT);
    let page = Arc::new(Page::serve(&format!(
        "<html><head><title>{TITLE}</title></head></html>"
    )));
    let sessions = open_at_once(hub.port(), &page, vec![capabilities(CHROME); 10]).await;
    let answered = quit_all(&cx, hub.port(), &sessions).await;
    println!(
        "    stack: 10 sessions at once answered in {:.1}s to {:.1}s",
        answered[0], answered[9]
    );
}

/// A version whose image nobody can pull: the client's new-session error comes back within
/// seconds, not after the hub's timeout, and the Browser's failure names the pull error.
pub(crate) async fn stack_a_missing_image_reaches_the_client_fast(cx: Arc<Ctx>) {
    cx.start_operator_under_test(&[]);
    config(&cx, "1m").await;
    let (_stack, hub) = hub(&cx, HUB_TIMEOUT);
    let (status, answer, took) = match new_session(hub.port(), MISSING).await {
        Ok(session) => panic!("a session of a missing image: {}", session.id),
        Err(refused) => refused,
    };
    println!(
        "    stack: the client's error {:.1}s after its request: {status} {answer}",
        took.as_secs_f64()
    );
    assert_eq!(status, 500, "{answer}");
    assert!(
        answer.to_string().contains("browser failed to start"),
        "the hub's answer: {answer}"
    );
    assert!(
        took < Duration::from_secs(60),
        "answered within a minute, not after the hub's {HUB_TIMEOUT:?}: {took:?}"
    );
    let name = only_browser(&cx);
    let failure = cx.failure_of(&name).await;
    let message = failure["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("ErrImagePull") || message.contains("ImagePullBackOff"),
        "the Browser's failure names the pull error: {failure}"
    );
    cx.until_gone(&name).await;
}

/// The client disappears without quitting. This seleniferous ends nothing on its idle
/// timeout (its process stays); the operator's maximum lifetime ends the session, and the
/// Browser and its pod go.
pub(crate) async fn stack_an_abandoned_session_ends(cx: Arc<Ctx>) {
    let lifetime = Duration::from_secs(45);
    cx.start_operator_under_test(&[&format!("--browser-max-lifetime={}s", lifetime.as_secs())]);
    config(&cx, "10s").await;
    let (_stack, hub) = hub(&cx, HUB_TIMEOUT);
    let session = new_session(hub.port(), CHROME)
        .await
        .unwrap_or_else(|e| panic!("a new session: {e:?}"));
    let name = only_browser(&cx);
    // The client is gone: nothing more is sent.
    cx.until_within(
        lifetime + Duration::from_secs(60),
        Duration::from_millis(500),
        "the abandoned session's Browser and pod to be gone",
        |s| s.browser(&name).is_none() && s.pod(&name).is_none(),
    )
    .await;
    let failure = cx.failure_of(&name).await;
    println!(
        "    stack: the abandoned session ended {:.1}s after its request: {} {}",
        session.requested.elapsed().as_secs_f64(),
        failure["reason"],
        failure["message"]
    );
    assert_eq!(cx.pod_uids(&name).len(), 1);
}

/// `selenosis:options` from the client: labels reach the pod and env the sidecar, where the
/// BrowserConfig entry lets session options set its env (`optionsContainers`); a variable of
/// the dynamic loader is refused, and the client hears of it at once.
pub(crate) async fn stack_session_options_reach_the_sidecar_and_loader_variables_are_refused(
    cx: Arc<Ctx>,
) {
    cx.start_operator_under_test(&[]);
    config(&cx, "1m").await;
    let (_stack, hub) = hub(&cx, HUB_TIMEOUT);
    let options = json!({
        "labels": {"team": "qa"},
        "containers": {"seleniferous": {"env": {"E2E_OPTION": "from-the-client"}}},
    });
    let session = open_session(hub.port(), capabilities_with_options(CHROME, options))
        .await
        .unwrap_or_else(|e| panic!("a session with options: {e:?}"));
    let name = only_browser(&cx);
    let pod = cx
        .seen("Pod", &name)
        .into_iter()
        .next()
        .expect("the session's pod");
    assert_eq!(pod["metadata"]["labels"]["team"], "qa", "{pod}");
    let sidecar = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "seleniferous")
        .expect("the sidecar")
        .clone();
    let env = sidecar["env"].as_array().cloned().unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e["name"] == "E2E_OPTION" && e["value"] == "from-the-client"),
        "the sidecar's env: {env:?}"
    );
    quit(hub.port(), &session).await;
    ended_with_one_pod(&cx, &name).await;

    let hostile = json!({"containers": {"browser": {"env": {"LD_PRELOAD": "/tmp/evil.so"}}}});
    let (status, answer, took) =
        match open_session(hub.port(), capabilities_with_options(CHROME, hostile)).await {
            Ok(session) => panic!("a session with LD_PRELOAD: {}", session.id),
            Err(refused) => refused,
        };
    println!(
        "    stack: LD_PRELOAD refused, the client's error {:.1}s after its request: {status} {answer}",
        took.as_secs_f64()
    );
    assert_eq!(status, 500, "{answer}");
    let refused = browsers_seen(&cx)
        .into_iter()
        .find(|n| *n != name)
        .expect("the second Browser");
    cx.fails_without_a_pod(&refused, "InvalidSelenosisOptions")
        .await;
}

/// A Browser the cluster cannot start (no node takes its pod): the hub gives up after its
/// startup timeout, and the operator still fails the Browser at its creation timeout and
/// removes it with its pod.
pub(crate) async fn stack_the_hub_gives_up_first_and_nothing_lingers(cx: Arc<Ctx>) {
    let creation = Duration::from_secs(30);
    cx.start_operator_under_test(&[&format!(
        "--browser-pod-creation-timeout={}s",
        creation.as_secs()
    )]);
    config(&cx, "1m").await;
    let hub_timeout = Duration::from_secs(10);
    let (_stack, hub) = hub(&cx, hub_timeout);
    let (status, answer, took) = match new_session(hub.port(), NOWHERE).await {
        Ok(session) => panic!("a session nowhere: {}", session.id),
        Err(refused) => refused,
    };
    println!(
        "    stack: the hub gave up after {:.1}s: {status} {answer}",
        took.as_secs_f64()
    );
    assert_eq!(status, 500, "{answer}");
    let name = only_browser(&cx);
    cx.until_within(
        creation + Duration::from_secs(60),
        Duration::from_millis(500),
        "the Browser and its pod to be gone after the creation timeout",
        |s| s.browser(&name).is_none() && s.pod(&name).is_none(),
    )
    .await;
    let failure = cx.failure_of(&name).await;
    assert_eq!(failure["reason"], "PodCreationTimeout", "{failure}");
}

/// Across a kube-apiserver restart: a running session survives, a session whose pod fails
/// while the API server is away reaches its client as a failure (browser-service's informer
/// relists after the return, on its own backoff: the Browser must still be there, `Failed`),
/// and new sessions work afterwards.
pub(crate) async fn stack_a_session_survives_an_api_server_restart(cx: Arc<Ctx>) {
    cx.start_operator_under_test(&[]);
    config(&cx, "5m").await;
    let hub_timeout = Duration::from_secs(120);
    let (_stack, hub) = hub(&cx, hub_timeout);
    let port = hub.port();
    let page = Page::serve(&format!("<html><head><title>{TITLE}</title></head></html>"));
    let running = new_session(port, CHROME)
        .await
        .unwrap_or_else(|e| panic!("a new session: {e:?}"));
    let first_browser = only_browser(&cx);
    // A session whose init container fails 8 s after it starts, while the API server is away.
    let failing = tokio::spawn(new_session(port, FAILS_LATER));
    let failing_name = poll(crate::WAIT, Duration::from_millis(20), || async {
        browsers_seen(&cx)
            .into_iter()
            .find(|n| *n != first_browser && first(&cx, "Pod", n, |_| true).is_some())
            .ok_or_else(|| "the failing session's pod".to_string())
    })
    .await;
    let away = Instant::now();
    cx.be.outage().await.expect("the API server restarts");
    let back = Instant::now();
    println!(
        "    stack: the API server was away {:.1}s",
        (back - away).as_secs_f64()
    );
    let (refused, refused_with) = match failing.await.expect("the failing client's task") {
        Ok(session) => panic!("a session of a failing pod: {}", session.id),
        Err((status, answer, _)) => {
            let after_return = Instant::now().saturating_duration_since(back);
            println!(
                "    stack: the failed session's client heard {status} {answer} {:.1}s after the API server's return",
                after_return.as_secs_f64()
            );
            (after_return, answer)
        }
    };
    assert!(
        refused_with.to_string().contains("browser failed to start"),
        "the hub saw the Browser fail: {refused_with}"
    );
    assert!(
        refused < Duration::from_secs(30),
        "the client heard of the failure within 30 s of the API server's return, not after the hub's {hub_timeout:?}: {refused:?}"
    );
    // The session that ran through the restart still works, then ends.
    let title = title_of_page(port, &running, &page)
        .await
        .expect("the running session still works");
    assert_eq!(title, TITLE);
    quit(port, &running).await;
    ended_with_one_pod(&cx, &first_browser).await;
    // A new session after the restart.
    let after = new_session(port, CHROME)
        .await
        .unwrap_or_else(|e| panic!("a new session after the restart: {e:?}"));
    assert_eq!(
        title_of_page(port, &after, &page).await.expect("its title"),
        TITLE
    );
    quit(port, &after).await;
    cx.until_gone(&failing_name).await;
    cx.until_within(
        crate::WAIT,
        Duration::from_millis(200),
        "nothing left",
        |s| s.browsers.is_empty() && s.pods.is_empty(),
    )
    .await;
    // The init container's failure fails the pod (restartPolicy Never): the failure names the
    // container and its exit.
    let failure = cx.failure_of(&failing_name).await;
    assert_eq!(
        failure["message"], "pod container setup terminated: Error (exit code 3)",
        "{failure}"
    );
}

/// browser-ui lists a live session through its API, and its page shows it: headless Chromium
/// renders the page (its DOM must name the session's browser) and saves a screenshot.
pub(crate) async fn stack_browser_ui_lists_a_live_session(cx: Arc<Ctx>) {
    cx.start_operator_under_test(&[]);
    config(&cx, "1m").await;
    let (stack, hub) = hub(&cx, HUB_TIMEOUT);
    let ui = stack
        .ui(&cx.ns, &hub)
        .expect("the runner runs this scenario only where the set has browser-ui")
        .unwrap_or_else(|e| panic!("browser-ui starts: {e}"));
    let session = new_session(hub.port(), CHROME)
        .await
        .unwrap_or_else(|e| panic!("a new session: {e:?}"));
    let name = only_browser(&cx);
    let port = ui.port();
    let listed = poll(
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let answer = tokio::task::spawn_blocking(move || {
                crate::support::host::http_get(port, "/api/v1/browsers")
            })
            .await
            .ok()
            .flatten();
            match answer {
                Some((200, body)) if body.contains(&session.id) => Ok(body),
                other => Err(format!("browser-ui lists {}: {other:?}", session.id)),
            }
        },
    )
    .await;
    println!("    stack: browser-ui lists {listed}");
    let shot = stack::screenshots_dir().join(format!("{}.png", cx.ns));
    let url = format!("{}/ui/", ui.url());
    let dom =
        stack::render_page(&url, &[&session.id, &name], &shot).expect("headless Chromium renders");
    println!("    stack: browser-ui's page, rendered: {}", shot.display());
    assert!(
        dom.contains(&session.id) && dom.contains(&name),
        "the page shows the session {} of Browser {name}: {dom}",
        session.id
    );
    quit(hub.port(), &session).await;
    ended_with_one_pod(&cx, &name).await;
    drop(ui);
}

/// Whether the node has the Firefox image (made where `$E2E_GECKODRIVER` names geckodriver);
/// says so when not.
/// A Firefox session through the hub, as the Chrome one: a page loaded, its title read, quit,
/// the Browser and its pod gone. Prints how long the session took to be usable.
pub(crate) async fn stack_firefox_session_through_the_hub(cx: Arc<Ctx>) {
    cx.start_operator_under_test(&[]);
    config(&cx, "1m").await;
    let (_stack, hub) = hub(&cx, HUB_TIMEOUT);
    let (session, name) =
        a_usable_session(&cx, hub.port(), firefox_capabilities(), "Firefox").await;
    let quit_at = Instant::now();
    quit(hub.port(), &session).await;
    ended_with_one_pod(&cx, &name).await;
    println!(
        "    stack (Firefox): Browser and pod gone {:.1}s after the quit",
        quit_at.elapsed().as_secs_f64()
    );
}

/// Ten clients at once, five asking for Chrome and five for Firefox: every session usable,
/// one pod each, all gone after the clients quit.
pub(crate) async fn stack_ten_mixed_chrome_and_firefox_sessions_at_once(cx: Arc<Ctx>) {
    cx.start_operator_under_test(&[]);
    config(&cx, "1m").await;
    let (_stack, hub) = hub(&cx, HUB_TIMEOUT);
    let page = Arc::new(Page::serve(&format!(
        "<html><head><title>{TITLE}</title></head></html>"
    )));
    let mixed = (0..10).map(|i| {
        if i % 2 == 0 {
            capabilities(CHROME)
        } else {
            firefox_capabilities()
        }
    });
    let sessions = open_at_once(hub.port(), &page, mixed.collect()).await;
    let answered = quit_all(&cx, hub.port(), &sessions).await;
    println!(
        "    stack: 5 Chrome and 5 Firefox sessions at once answered in {:.1}s to {:.1}s",
        answered[0], answered[9]
    );
}
