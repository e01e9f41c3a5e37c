//! The operator binary as a process (docs/operations.md, "Start-up", "Endpoints"): kubeconfig
//! inference, start-up failures, `/healthz`, `/readyz`, `/metrics`, and a graceful stop on
//! SIGTERM — against the API server double served over loopback HTTP.

use testkit as support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use browser_controller::api::crd::{self, Layout};
use support::apiserver::{ApiServer, Fault};
use support::host::{self, TempDir, free_port, http_get};

const BIN: &str = env!("CARGO_BIN_EXE_browser-controller");

fn wait_for(what: &str, log: &std::path::Path, check: impl FnMut() -> bool) {
    host::wait_until(what, Duration::from_secs(20), check, || {
        format!(
            "operator log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        )
    });
}

fn spawn(kubeconfig: &std::path::Path, args: &[&str]) -> Child {
    let log = std::fs::File::create(kubeconfig.with_extension("log")).unwrap();
    Command::new(BIN)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("binary starts")
}

fn wait_exit(child: &mut Child, log: &std::path::Path) -> (i32, String) {
    let Some(status) = host::wait_exit(child, Duration::from_secs(20)) else {
        host::kill(child);
        panic!("process did not exit in time");
    };
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(log).unwrap_or_default(),
    )
}

/// An operator process with its probe endpoint on a free port and warn-level JSON logs, and
/// what it needs kept: the API server's serving handle and the directory of its files.
struct Probed {
    child: Child,
    health: u16,
    log: std::path::PathBuf,
    _served: support::apiserver::ServeHandle,
    _dir: TempDir,
}

/// Starts the operator against `server`, served over loopback.
async fn spawn_probed(server: &ApiServer, tag: &str) -> Probed {
    let served = server.serve().await.unwrap();
    let dir = TempDir::new(tag);
    let kubeconfig = dir.join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    let health = free_port();
    let child = spawn(
        &kubeconfig,
        &[
            "--metrics-addr=0",
            &format!("--health-probe-bind-address=127.0.0.1:{health}"),
            "--log-format=json",
            "--log-level=info",
        ],
    );
    Probed {
        child,
        health,
        log: kubeconfig.with_extension("log"),
        _served: served,
        _dir: dir,
    }
}

/// SIGTERM, then the exit: (exit code, stderr).
fn terminate(child: &mut Child, log: &std::path::Path) -> (i32, String) {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    wait_exit(child, log)
}

/// Waits for the warning that start-up waits for the API server.
fn until_start_up_waits(log: &std::path::Path) {
    wait_for("a warning that start-up waits", log, || {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("waiting for it")
    });
}

/// Waits for `/readyz` on `health` to answer 200 with the process still running, then stops
/// it: (exit code, stderr).
fn ready_then_terminate(mut child: Child, health: u16, log: &std::path::Path) -> (i32, String) {
    wait_for("/readyz", log, || {
        http_get(health, "/readyz").is_some_and(|(s, _)| s == 200)
    });
    assert!(
        child.try_wait().unwrap().is_none(),
        "the operator exited while waiting for the API server"
    );
    terminate(&mut child, log)
}

/// Runs the binary against `server` (served over loopback) with quiet logs and `flags`, and
/// waits for it to exit: (exit code, stderr).
async fn run_to_exit(server: &ApiServer, tag: &str, flags: &[&str]) -> (i32, String) {
    let mut all = vec!["--log-level=off"];
    all.extend_from_slice(flags);
    run_logging_to_exit(server, tag, &all).await
}

/// Like [`run_to_exit`], with the log flags among `flags`.
async fn run_logging_to_exit(server: &ApiServer, tag: &str, flags: &[&str]) -> (i32, String) {
    let served = server.serve().await.unwrap();
    let dir = TempDir::new(tag);
    let kubeconfig = dir.join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    run_kubeconfig_to_exit(&kubeconfig, flags).await
}

async fn run_kubeconfig_to_exit(kubeconfig: &std::path::Path, flags: &[&str]) -> (i32, String) {
    let mut args = vec!["--metrics-addr=0", "--health-probe-bind-address=0"];
    args.extend_from_slice(flags);
    let mut child = spawn(kubeconfig, &args);
    let log = kubeconfig.with_extension("log");
    tokio::task::spawn_blocking(move || wait_exit(&mut child, &log))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_crds_exit_non_zero_with_one_line_naming_them() {
    let server = ApiServer::new();
    let (code, stderr) = run_to_exit(&server, "nocrd", &[]).await;
    assert_ne!(code, 0);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("browsers.selenosis.io"), "{stderr}");
    assert!(lines[0].contains("kubectl apply -f crds/"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flag_values_are_clear_errors() {
    let output = Command::new(BIN)
        .arg("--browser-pod-creation-timeout=banana")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid value 'banana' for '--browser-pod-creation-timeout"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_serve_health_readiness_and_metrics_then_sigterm_exits_zero() {
    let server = ApiServer::new();
    for crd in crd::crds(Layout::Default) {
        server.install_crd(&crd).unwrap();
    }
    let served = server.serve().await.unwrap();
    let dir = TempDir::new("endpoints");
    let kubeconfig = dir.join("kubeconfig");
    served.write_kubeconfig(&kubeconfig).unwrap();
    let (metrics, health) = (free_port(), free_port());
    let mut child = spawn(
        &kubeconfig,
        &[
            &format!("--metrics-addr=127.0.0.1:{metrics}"),
            &format!("--health-probe-bind-address=127.0.0.1:{health}"),
            "--log-format=json",
            "--log-level=info",
        ],
    );
    let log_path = kubeconfig.with_extension("log");
    let result = tokio::task::spawn_blocking(move || {
        wait_for("/healthz", &log_path, || {
            http_get(health, "/healthz").is_some_and(|(s, _)| s == 200)
        });
        wait_for("/readyz", &log_path, || {
            http_get(health, "/readyz").is_some_and(|(s, _)| s == 200)
        });
        let (status, body) = http_get(metrics, "/metrics").expect("metrics answer");
        assert_eq!(status, 200);
        assert!(
            body.contains("browser_controller_reconciles_total"),
            "{body}"
        );
        assert!(body.contains("# EOF"), "{body}");
        assert_eq!(http_get(health, "/metrics").map(|(s, _)| s), Some(404));
        terminate(&mut child, &log_path)
    })
    .await
    .unwrap();
    let (code, stderr) = result;
    assert_eq!(code, 0, "{stderr}");
    // JSON log lines, one object per line.
    for line in stderr.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not JSON: {line}"
        );
    }
    assert!(stderr.contains("stopped"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_exits_non_zero_naming_it() {
    let server = ApiServer::new();
    for crd in crd::crds(Layout::Default) {
        server.install_crd(&crd).unwrap();
    }
    server.deny_in("team-a", "patch", "selenosis.io", "browsers/status");
    server.deny_in("team-a", "watch", "", "pods");
    let (code, stderr) = run_to_exit(&server, "perms", &["--namespace=team-a"]).await;
    assert_ne!(code, 0);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines[..2],
        [
            "browser-controller: missing permission: cannot patch browsers.selenosis.io/status in namespace \"team-a\"",
            "browser-controller: missing permission: cannot watch pods in namespace \"team-a\"",
        ],
        "{stderr}"
    );
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(lines[2].contains("rbac/namespaced/"), "{stderr}");
    // Nothing was watched or written before the check stopped the operator.
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.resource == "selfsubjectaccessreviews" || r.verb == "discovery"),
        "{:?}",
        server.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_to_a_file_have_no_colour_codes_and_a_fatal_error_shows_once() {
    let server = ApiServer::new();
    let (code, stderr) = run_logging_to_exit(&server, "textlog", &["--log-level=info"]).await;
    assert_ne!(code, 0);
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a file: {stderr:?}"
    );
    assert_eq!(
        stderr.matches("kubectl apply -f crds/").count(),
        1,
        "{stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(
            "browser-controller: the Browser CustomResourceDefinition is not installed"
        ),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_json_logs_a_fatal_error_is_one_json_record() {
    let server = ApiServer::new();
    let (code, stderr) = run_logging_to_exit(
        &server,
        "jsonlog",
        &["--log-format=json", "--log-level=info"],
    )
    .await;
    assert_ne!(code, 0);
    let records: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    let errors: Vec<&serde_json::Value> =
        records.iter().filter(|r| r["level"] == "ERROR").collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    let error = errors[0]["fields"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("kubectl apply -f crds/"), "{stderr}");
    assert_eq!(
        stderr.matches("kubectl apply -f crds/").count(),
        1,
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_error_shows_the_servers_message_code_and_reason() {
    let server = ApiServer::new();
    for crd in crd::crds(Layout::Default) {
        server.install_crd(&crd).unwrap();
    }
    server.inject(Fault::new(
        "create",
        "selfsubjectaccessreviews",
        500,
        "InternalError",
        "etcdserver: request timed out",
    ));
    // Not waited for: the message of the first failure is what this test reads.
    let (code, stderr) = run_to_exit(&server, "apierror", &["--startup-timeout=0"]).await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains("failed: etcdserver: request timed out (500 InternalError)"),
        "{stderr}"
    );
    for dump in ["Status {", "shard_info", "ApiError:"] {
        assert!(!stderr.contains(dump), "{dump} in {stderr}");
    }
}

/// A kubeconfig in `dir` for the API server at `url`, without credentials.
fn kubeconfig_of(dir: &TempDir, url: &str) -> std::path::PathBuf {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .unwrap();
    kubeconfig
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_is_named_with_the_cause() {
    let dir = TempDir::new("unreachable");
    // A port nobody listens on: the connection is refused.
    let url = format!("http://127.0.0.1:{}", free_port());
    let kubeconfig = kubeconfig_of(&dir, &url);
    let (code, stderr) =
        run_kubeconfig_to_exit(&kubeconfig, &["--log-level=off", "--startup-timeout=2s"]).await;
    assert_ne!(code, 0);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "browser-controller: cannot reach the Kubernetes API server at {url}/: "
        )),
        "{stderr}"
    );
    assert!(stderr.contains("Connection refused"), "{stderr}");
    assert!(
        stderr.ends_with("(still failing after --startup-timeout=2s)\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("ServiceError"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_api_server_is_given_up_on_at_the_startup_timeout() {
    // Connections are taken and never answered, as behind a partition: start-up must not
    // wait on them for ever.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().collect();
        drop(held);
    });
    let dir = TempDir::new("silent");
    let kubeconfig = kubeconfig_of(&dir, &url);
    let (code, stderr) =
        run_kubeconfig_to_exit(&kubeconfig, &["--log-level=off", "--startup-timeout=2s"]).await;
    assert_ne!(code, 0);
    assert_eq!(
        stderr,
        format!(
            "browser-controller: cannot reach the Kubernetes API server at {url}/: no answer within 2s\n"
        )
    );
}

/// A kube-apiserver that is starting answers before it has loaded its CRDs (and RBAC), with
/// its `/readyz` still failing: a missing CRD then is not the operator's to report yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starting_api_server_without_its_crds_yet_is_waited_for() {
    let server = ApiServer::new();
    server.set_starting(true);
    let Probed {
        child,
        health,
        log: log_path,
        _served,
        _dir,
    } = spawn_probed(&server, "starting").await;
    let log = log_path.clone();
    tokio::task::spawn_blocking(move || until_start_up_waits(&log))
        .await
        .unwrap();
    for crd in crd::crds(Layout::Default) {
        server.install_crd(&crd).unwrap();
    }
    server.set_starting(false);
    let (code, stderr) =
        tokio::task::spawn_blocking(move || ready_then_terminate(child, health, &log_path))
            .await
            .unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("is not installed"), "{stderr}");
}

/// A replica that starts while the API server is away (restarting, partitioned) waits for
/// it, alive and not ready, instead of exiting into a restart loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_away_at_start_up_is_waited_for_alive_and_not_ready() {
    let server = ApiServer::new();
    for crd in crd::crds(Layout::Default) {
        server.install_crd(&crd).unwrap();
    }
    server.set_unavailable(true);
    let Probed {
        child,
        health,
        log: log_path,
        _served,
        _dir,
    } = spawn_probed(&server, "away-at-start").await;
    let url = _served.url();
    let log = log_path.clone();
    let waiting = tokio::task::spawn_blocking(move || {
        until_start_up_waits(&log);
        (http_get(health, "/healthz"), http_get(health, "/readyz"))
    })
    .await
    .unwrap();
    assert_eq!(waiting.0.map(|(s, _)| s), Some(200));
    let (status, body) = waiting.1.expect("/readyz answers");
    assert_eq!(
        (status, body.as_str()),
        (503, "starting: waiting for the API server")
    );

    server.set_unavailable(false);
    let (code, stderr) =
        tokio::task::spawn_blocking(move || ready_then_terminate(child, health, &log_path))
            .await
            .unwrap();
    assert_eq!(code, 0, "{stderr}");
    let warning = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["level"] == "WARN")
        .expect("a warning per failed attempt");
    let error = warning["fields"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("503"), "{warning}");
    // Each waiting line names the server waited for; once it answers, one line says what the
    // operator runs with.
    let server = warning["fields"]["server"].as_str().unwrap_or_default();
    assert!(server.starts_with(&url), "{server} is not {url}: {warning}");
    let started = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["fields"]["message"] == "started")
        .expect("the start-up line");
    let fields = &started["fields"];
    assert_eq!(fields["version"], env!("CARGO_PKG_VERSION"), "{started}");
    assert!(
        fields["server"]
            .as_str()
            .unwrap_or_default()
            .starts_with(&url),
        "{started}"
    );
    assert_eq!(
        (
            &fields["browser"],
            &fields["browserconfig"],
            &fields["namespaces"]
        ),
        (
            &serde_json::json!("selenosis.io/v1"),
            &serde_json::json!("selenosis.io/v1"),
            &serde_json::json!("all")
        ),
        "{started}"
    );
}
