//! The operator's metrics after scripted lifecycles on the in-process API server double: every
//! family of docs/operations.md, "Metrics", with the values the lifecycle implies, read from
//! `Metrics::encode()` and from the real `/metrics` endpoint.

use testkit as support;

use std::time::Duration;

use kube::api::DeleteParams;

use support::apiserver::Fault;
use support::env::{Env, is_running, sample};
use support::fixtures::browser;
use support::host::{self, free_port};
use support::kubelet::Script;

/// Every sample of the family `name` (its lines that carry labels).
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let prefix = format!("{name}{{");
    text.lines().filter(|l| l.starts_with(&prefix)).collect()
}

const RUNNING_CHROME: &str = "browser_controller_browsers{namespace=\"sessions\",browser=\"chrome\",version=\"139.0\",phase=\"Running\"}";

fn stage_count(stage: &str) -> String {
    format!("browser_controller_startup_seconds_count{{stage=\"{stage}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_lifecycle_shows_in_every_family() {
    let mut env = Env::start(&[]).await;
    env.chrome_config().await;
    env.until_metric(
        "browser_controller_browserconfig_entries{namespace=\"sessions\"}",
        1.0,
    )
    .await;
    env.kubelet.set(
        "s1",
        Script::ExitAfterRunning {
            container: "seleniferous".into(),
            exit_code: 0,
            after: Duration::from_secs(2),
        },
    );
    env.create_browser(browser("s1")).await;
    env.until("s1 running", |e| is_running(&e.browser("s1")))
        .await;

    // While it runs: the gauge from the operator's cache, and each startup stage once.
    env.until_metric(RUNNING_CHROME, 1.0).await;
    for stage in ["pod_created", "scheduled", "running"] {
        env.until_metric(&stage_count(stage), 1.0).await;
    }
    let text = env.metrics.encode().unwrap();
    assert_eq!(
        samples(&text, "browser_controller_browsers"),
        [format!("{RUNNING_CHROME} 1").as_str()],
        "only s1, only Running: {text}"
    );
    assert_eq!(
        sample(
            &text,
            "browser_controller_browserconfig_conflicts{namespace=\"sessions\"}"
        ),
        Some(0.0)
    );

    env.create_browser(browser("nocfg").version("1.0")).await;
    env.until_gone("nocfg").await;
    env.until_gone("s1").await;
    // Gone from the cluster and from the operator's cache: no series is left.
    env.until("the browsers gauge to empty", |e| {
        samples(&e.metrics.encode().unwrap(), "browser_controller_browsers").is_empty()
    })
    .await;
    // The last reconciles (a deleted Browser's final events) finish.
    env.until("no reconcile in flight", |e| {
        sample(
            &e.metrics.encode().unwrap(),
            "browser_controller_reconciles_in_flight",
        ) == Some(0.0)
    })
    .await;

    let text = env.metrics.encode().unwrap();
    let value =
        |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
    assert!(value("browser_controller_reconciles_total") > 0.0);
    assert_eq!(value("browser_controller_reconciles_in_flight"), 0.0);
    assert!(value("browser_controller_reconcile_duration_seconds_count") > 0.0);
    let writes = |verb: &str, resource: &str| {
        value(&format!(
            "browser_controller_api_writes_total{{verb=\"{verb}\",resource=\"{resource}\"}}"
        ))
    };
    // One pod for s1 and none for nocfg; every Browser got its metadata and a status.
    assert_eq!(writes("apply", "pods"), 1.0);
    assert_eq!(writes("delete", "pods"), 1.0);
    assert!(writes("apply", "browsers") >= 2.0);
    assert!(writes("apply", "browsers/status") >= 4.0);
    assert!(writes("delete", "browsers") >= 2.0);
    assert!(writes("patch", "browsers") >= 2.0);
    assert!(writes("apply", "browserconfigs/status") >= 1.0);
    assert!(writes("apply-dry-run", "pods") >= 1.0);
    assert_eq!(
        value("browser_controller_browser_failures_total{reason=\"ConfigNotFound\"}"),
        1.0
    );
    assert_eq!(
        value("browser_controller_browser_failures_total{reason=\"ContainerTerminated\"}"),
        1.0
    );
    // Each stage once for s1 and never for nocfg, which got no pod.
    for stage in ["pod_created", "scheduled", "running"] {
        assert_eq!(value(&stage_count(stage)), 1.0, "{stage}");
    }
    // Each Browser let go once, by its outcome.
    let mut deletions = samples(&text, "browser_controller_browser_deletions_total");
    deletions.sort_unstable();
    assert_eq!(
        deletions,
        [
            "browser_controller_browser_deletions_total{reason=\"ConfigNotFound\"} 1",
            "browser_controller_browser_deletions_total{reason=\"ContainerTerminated\"} 1",
        ]
    );
    assert!(samples(&text, "browser_controller_pod_create_errors_total").is_empty());
    assert!(samples(&text, "browser_controller_watch_errors_total").is_empty());
    assert_eq!(
        value("browser_controller_browserconfig_entries{namespace=\"sessions\"}"),
        1.0
    );

    // A watch that fails is counted per resource while the watcher retries it.
    env.server.inject(Fault::new(
        "watch",
        "browserconfigs",
        500,
        "InternalError",
        "etcd leader changed",
    ));
    env.server.drop_watches();
    env.until("a counted BrowserConfig watch error", |e| {
        sample(
            &e.metrics.encode().unwrap(),
            "browser_controller_watch_errors_total{resource=\"browserconfigs\"}",
        )
        .is_some_and(|n| n >= 1.0)
    })
    .await;
    env.server.clear_faults();
    env.stop_operator().await;
}

/// A plain HTTP/1.1 GET on loopback; returns (status line, lower-cased headers, body).
fn get(port: u16, path: &str) -> Option<(String, String, String)> {
    let response = host::http_response(port, path)?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let (status, headers) = head.split_once("\r\n")?;
    Some((status.to_string(), headers.to_lowercase(), body.to_string()))
}

async fn http_get(port: u16, path: &'static str) -> Option<(String, String, String)> {
    tokio::task::spawn_blocking(move || get(port, path))
        .await
        .ok()
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_serves_the_families_after_an_external_delete() {
    let port = free_port();
    let addr = format!("--metrics-addr=127.0.0.1:{port}");
    let mut env = Env::start(&[&addr]).await;
    env.chrome_config().await;
    env.create_browser(browser("ext")).await;
    env.until("ext running", |e| is_running(&e.browser("ext")))
        .await;
    env.until_metric(RUNNING_CHROME, 1.0).await;

    let (status, headers, body) = http_get(port, "/metrics").await.expect("/metrics answers");
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        headers.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{headers}"
    );
    assert_eq!(sample(&body, RUNNING_CHROME), Some(1.0), "{body}");
    assert_eq!(sample(&body, &stage_count("running")), Some(1.0), "{body}");
    assert!(body.ends_with("# EOF\n"));

    // Deleted by someone else while it runs: the pod goes, then the finalizer.
    env.browsers()
        .delete("ext", &DeleteParams::default())
        .await
        .expect("browser deleted");
    env.until_gone("ext").await;
    env.until_metric(
        "browser_controller_browser_deletions_total{reason=\"external\"}",
        1.0,
    )
    .await;
    env.until("the browsers gauge to empty", |e| {
        samples(&e.metrics.encode().unwrap(), "browser_controller_browsers").is_empty()
    })
    .await;
    // The last reconciles (a deleted Browser's final events) finish.
    env.until("no reconcile in flight", |e| {
        sample(
            &e.metrics.encode().unwrap(),
            "browser_controller_reconciles_in_flight",
        ) == Some(0.0)
    })
    .await;

    let (_, _, body) = http_get(port, "/metrics").await.expect("/metrics answers");
    // Counter families without any sample yet (errors, failures) are left out entirely;
    // the cache-derived gauges are always described.
    for family in [
        "browser_controller_reconciles",
        "browser_controller_reconcile_duration_seconds",
        "browser_controller_reconciles_in_flight",
        "browser_controller_api_writes",
        "browser_controller_startup_seconds",
        "browser_controller_browser_deletions",
        "browser_controller_browsers",
        "browser_controller_browserconfig_entries",
        "browser_controller_browserconfig_conflicts",
    ] {
        assert!(
            body.contains(&format!("# TYPE {family} ")),
            "family {family} missing from\n{body}"
        );
    }
    assert_eq!(
        sample(
            &body,
            "browser_controller_browser_deletions_total{reason=\"external\"}"
        ),
        Some(1.0),
        "{body}"
    );
    assert!(
        samples(&body, "browser_controller_browsers").is_empty(),
        "{body}"
    );
    assert!(
        samples(&body, "browser_controller_browser_failures_total").is_empty(),
        "an external delete is no failure: {body}"
    );
    assert_eq!(
        sample(
            &body,
            "browser_controller_api_writes_total{verb=\"delete\",resource=\"pods\"}"
        ),
        Some(1.0)
    );

    env.stop_operator().await;
    assert!(
        http_get(port, "/metrics").await.is_none(),
        "the endpoint stops with the operator"
    );
}
