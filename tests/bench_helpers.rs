//! The provisioning benchmark's pure helpers — percentiles, metrics text, `/proc` lines,
//! request naming — tested here because a `harness = false` bench runs no tests itself.

#[allow(dead_code)]
#[path = "../benches/provision/measure.rs"]
mod measure;
#[allow(dead_code)]
#[path = "../benches/provision/requests.rs"]
mod requests;

use std::time::Duration;

use http::{Method, Uri};
use measure::{samples, stat_cpu, sum, summarize};
use requests::{RequestLog, classify};

#[test]
fn percentiles_use_the_nearest_rank() {
    let ms = |n: u64| Duration::from_millis(n);
    let s = summarize((1..=100).map(ms).collect()).unwrap();
    assert_eq!(
        (s.p50, s.p90, s.p99, s.max),
        (ms(50), ms(90), ms(99), ms(100))
    );
    let one = summarize(vec![ms(7)]).unwrap();
    assert_eq!((one.p50, one.p99, one.max), (ms(7), ms(7), ms(7)));
    assert!(summarize(Vec::new()).is_none());
}

#[test]
fn metric_samples_are_read_by_family_and_labels() {
    let text = "browser_controller_reconciles_total 12\n\
                browser_controller_reconciles_in_flight 0\n\
                browser_controller_api_writes_total{verb=\"apply\",resource=\"pods\"} 3\n\
                browser_controller_api_writes_total{verb=\"create\",resource=\"events\"} 2\n";
    assert_eq!(
        sum(text, "browser_controller_reconciles_total", |_| true),
        12.0
    );
    assert_eq!(
        sum(text, "browser_controller_api_writes_total", |l| !l
            .contains("events")),
        3.0
    );
    assert_eq!(
        samples(text, "browser_controller_api_writes_total").len(),
        2
    );
}

#[test]
fn cpu_times_are_read_after_the_command_name() {
    // utime 250 and stime 50 ticks of 10 ms; the name itself contains parentheses.
    let stat = "42 (tokio (worker)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
    assert_eq!(stat_cpu(stat), Some(Duration::from_secs(3)));
}

fn named(method: Method, uri: &str, apply: bool) -> (String, String, Option<String>) {
    let c = classify(&method, &uri.parse().unwrap(), apply);
    (c.verb, c.resource, c.name)
}

#[test]
fn requests_are_named_like_the_audit_log_names_them() {
    let s = |v: &str| v.to_string();
    assert_eq!(
        named(
            Method::PATCH,
            "/api/v1/namespaces/b/pods/p1?fieldManager=browser-controller&force=true",
            true
        ),
        (s("apply"), s("pods"), Some(s("p1")))
    );
    assert_eq!(
        named(
            Method::PATCH,
            "/apis/selenosis.io/v1/namespaces/b/browsers/x/status?fieldManager=m",
            true
        ),
        (s("apply"), s("browsers/status"), Some(s("x")))
    );
    assert_eq!(
        named(
            Method::PATCH,
            "/api/v1/namespaces/b/pods/p1?dryRun=All",
            true
        )
        .0,
        "apply-dry-run"
    );
    assert_eq!(
        named(
            Method::PATCH,
            "/apis/selenosis.io/v1/namespaces/b/browsers/x",
            false
        )
        .0,
        "patch"
    );
    assert_eq!(
        named(
            Method::GET,
            "/api/v1/pods?labelSelector=a&watch=true",
            false
        )
        .0,
        "watch"
    );
    assert_eq!(
        named(Method::GET, "/apis/selenosis.io/v1/browsers", false),
        (s("list"), s("browsers"), None)
    );
    assert_eq!(
        named(Method::GET, "/apis/selenosis.io/v1", false).0,
        "discovery"
    );
    assert_eq!(
        named(Method::DELETE, "/api/v1/namespaces/b/pods/p1", false).0,
        "delete"
    );
}

#[test]
fn only_real_pod_applies_mark_the_create_time() {
    let log = RequestLog::default();
    let uri = |q: &str| {
        format!("/api/v1/namespaces/b/pods/p1{q}")
            .parse::<Uri>()
            .unwrap()
    };
    log.record(&Method::PATCH, &uri("?dryRun=All"), true);
    log.record(&Method::GET, &uri(""), false);
    log.record(&Method::PATCH, &uri("/status?fieldManager=m"), true);
    assert!(log.pod_create_sent("b", "p1").is_none());
    log.record(&Method::PATCH, &uri("?fieldManager=m"), true);
    let first = log.pod_create_sent("b", "p1").unwrap();
    log.record(&Method::PATCH, &uri("?fieldManager=m"), true);
    assert_eq!(log.pod_create_sent("b", "p1"), Some(first));
    assert_eq!(log.counts().get("apply pods"), Some(&2));
    assert_eq!(log.counts().get("get pods"), Some(&1));
}
