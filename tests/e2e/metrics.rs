//! The operator's metrics after scripted lifecycles, scraped from its `/metrics` endpoint:
//! every family of docs/operations.md, "Metrics", with the values the lifecycle implies.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::support::host;
use crate::support::kinds::{browser_resource, config_resource};
use crate::support::kubelet::Script;
use crate::{Ctx, Fault, sample, samples};

fn running_chrome(cx: &Ctx) -> String {
    format!(
        "browser_controller_browsers{{namespace=\"{}\",browser=\"chrome\",version=\"139.0\",phase=\"Running\"}}",
        cx.ns
    )
}

fn config_entries(cx: &Ctx) -> String {
    format!(
        "browser_controller_browserconfig_entries{{namespace=\"{}\"}}",
        cx.ns
    )
}

/// The samples of `name` that counted something: label values known ahead are there from the
/// start, at 0.
fn counted<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    samples(text, name)
        .into_iter()
        .filter(|l| !l.ends_with(" 0"))
        .collect()
}

fn stage_count(stage: &str) -> String {
    format!("browser_controller_startup_seconds_count{{stage=\"{stage}\"}}")
}

/// Once every Browser is gone: gone from the operator's cache too (no series of the browsers
/// gauge is left), and the last reconciles (a deleted Browser's final events) finished.
async fn until_settled(cx: &Ctx) -> String {
    cx.until_metrics(
        "the browsers gauge to empty and no reconcile in flight",
        |text| {
            samples(text, "browser_controller_browsers").is_empty()
                && sample(text, "browser_controller_reconciles_in_flight") == Some(0.0)
        },
    )
    .await
}

pub(crate) async fn metrics_of_a_scripted_lifecycle_show_in_every_family(cx: Arc<Ctx>) {
    cx.start_scraped_operator(&[]);
    cx.chrome_config().await;
    cx.until_metric(&config_entries(&cx), 1.0).await;
    // Running long enough for the gauge to be read while it lasts.
    cx.kubelet().set(
        "s1",
        Script::ExitAfterRunning {
            container: "seleniferous".into(),
            exit_code: 0,
            after: Duration::from_secs(10),
        },
    );
    cx.create_browser("s1", json!({})).await;
    cx.seen_running("s1").await;

    // While it runs: the gauge from the operator's cache, and each startup stage once.
    let running = running_chrome(&cx);
    cx.until_metric(&running, 1.0).await;
    for stage in ["pod_created", "scheduled", "running"] {
        cx.until_metric(&stage_count(stage), 1.0).await;
    }
    let text = cx.metrics().await;
    assert_eq!(
        samples(&text, "browser_controller_browsers"),
        [format!("{running} 1").as_str()],
        "only s1, only Running: {text}"
    );
    let conflicts = format!(
        "browser_controller_browserconfig_conflicts{{namespace=\"{}\"}}",
        cx.ns
    );
    assert_eq!(sample(&text, &conflicts), Some(0.0));

    cx.create(
        &browser_resource(cx.layout),
        json!({
            "metadata": {"name": "nocfg", "labels": {"selenosis.io/owner": "hub"}},
            "spec": {"browserName": "chrome", "browserVersion": "1.0"},
        }),
    )
    .await;
    cx.until_gone("nocfg").await;
    cx.until_gone("s1").await;
    let text = until_settled(&cx).await;

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
    let mut deletions = counted(&text, "browser_controller_browser_deletions_total");
    deletions.sort_unstable();
    assert_eq!(
        deletions,
        [
            "browser_controller_browser_deletions_total{reason=\"ConfigNotFound\"} 1",
            "browser_controller_browser_deletions_total{reason=\"ContainerTerminated\"} 1",
        ]
    );
    assert!(counted(&text, "browser_controller_pod_create_errors_total").is_empty());
    assert!(counted(&text, "browser_controller_watch_errors_total").is_empty());
    assert_eq!(value(&config_entries(&cx)), 1.0);

    // A watch that fails is counted per resource while the watcher retries it: the double
    // fails the next BrowserConfig watch of this namespace (a fault no real server takes).
    if let Some((server, _)) = &cx.be.double {
        // Named with its group: the shared double serves `browserconfigs` of both layouts,
        // and a bare plural names whichever CRD it got first.
        let configs = config_resource(cx.layout);
        server.inject(
            Fault {
                namespace: Some(cx.ns.clone()),
                ..Fault::new(
                    "watch",
                    &format!("{}.{}", configs.plural, configs.group),
                    500,
                    "InternalError",
                    "etcd leader changed",
                )
            }
            .times(1),
        );
        server.drop_watches();
        cx.until_metrics("a counted BrowserConfig watch error", |text| {
            sample(
                text,
                "browser_controller_watch_errors_total{resource=\"browserconfigs\"}",
            )
            .is_some_and(|n| n >= 1.0)
        })
        .await;
    } else {
        println!(
            "    {}: only the double fails a watch on demand: the watch error step skipped",
            cx.ns
        );
    }
    cx.stop_operator().await;
}

/// A plain HTTP/1.1 GET on loopback; returns (status line, lower-cased headers, body).
async fn http_get(port: u16, path: &'static str) -> Option<(String, String, String)> {
    let response = tokio::task::spawn_blocking(move || host::http_response(port, path))
        .await
        .ok()
        .flatten()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let (status, headers) = head.split_once("\r\n")?;
    Some((status.to_string(), headers.to_lowercase(), body.to_string()))
}

pub(crate) async fn the_metrics_endpoint_serves_the_families_after_an_external_delete(
    cx: Arc<Ctx>,
) {
    let port = cx.start_scraped_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("ext", json!({})).await;
    cx.until_running("ext").await;
    let running = running_chrome(&cx);
    cx.until_metric(&running, 1.0).await;

    let (status, headers, body) = http_get(port, "/metrics").await.expect("/metrics answers");
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        headers.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{headers}"
    );
    assert_eq!(sample(&body, &running), Some(1.0), "{body}");
    assert_eq!(sample(&body, &stage_count("running")), Some(1.0), "{body}");
    assert!(body.ends_with("# EOF\n"));

    // Deleted by someone else while it runs: the pod goes, then the finalizer.
    cx.delete_browser("ext").await;
    cx.until_gone("ext").await;
    cx.until_metric(
        "browser_controller_browser_deletions_total{reason=\"external\"}",
        1.0,
    )
    .await;
    until_settled(&cx).await;

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
        counted(&body, "browser_controller_browser_failures_total").is_empty(),
        "an external delete is no failure: {body}"
    );
    assert_eq!(
        sample(
            &body,
            "browser_controller_api_writes_total{verb=\"delete\",resource=\"pods\"}"
        ),
        Some(1.0)
    );

    cx.stop_operator().await;
    assert!(
        http_get(port, "/metrics").await.is_none(),
        "the endpoint stops with the operator"
    );
}
