//! The provisioning benchmark's pure helpers — percentiles, metrics text, `/proc` lines,
//! request naming, duplicate writes, targets, fair share's owners — tested here because a `harness = false` bench
//! runs no tests itself.

#[allow(dead_code)]
#[path = "../benches/provision/fair_share.rs"]
mod fair_share;
#[allow(dead_code)]
#[path = "../benches/provision/measure.rs"]
mod measure;
#[allow(dead_code)]
#[path = "../benches/provision/requests.rs"]
mod requests;
#[allow(dead_code)]
#[path = "../benches/provision/targets.rs"]
mod targets;

use std::collections::BTreeMap;
use std::time::Duration;

use fair_share::Owners;
use http::{Method, Uri};
use measure::{samples, stat_cpu, status_memory, sum, summarize};
use requests::{RequestLog, Step, classify};
use targets::{Figures, Restart, evaluate};

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

#[test]
fn resident_memory_is_read_from_proc_status_in_bytes() {
    let status =
        "Name:\tbrowser-controller\nVmHWM:\t   40960 kB\nVmRSS:\t   20480 kB\nThreads:\t3\n";
    let m = status_memory(status).unwrap();
    assert_eq!((m.rss, m.peak), (20 * 1024 * 1024, 40 * 1024 * 1024));
    assert!(status_memory("Name:\tkthreadd\n").is_none());
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
fn only_the_first_real_applies_mark_the_steps_to_a_pod() {
    let log = RequestLog::default();
    let uri = |path: &str| path.parse::<Uri>().unwrap();
    let pod = "/api/v1/namespaces/b/pods/p1";
    let browser = "/apis/selenosis.io/v1/namespaces/b/browsers/p1";
    let sent = |method: Method, path: String, apply: bool| log.record(&method, &uri(&path), apply);
    // Neither a dry run, a read, a status apply nor a merge patch is a step.
    assert!(sent(Method::PATCH, format!("{pod}?dryRun=All"), true).is_none());
    assert!(sent(Method::GET, pod.to_string(), false).is_none());
    assert!(sent(Method::PATCH, format!("{pod}/status?fieldManager=m"), true).is_none());
    assert!(
        sent(
            Method::PATCH,
            format!("{browser}/status?fieldManager=m"),
            true
        )
        .is_none()
    );
    assert!(sent(Method::PATCH, browser.to_string(), false).is_none());
    assert!(log.step(Step::Pod, "b", "p1").is_none());
    assert!(log.step(Step::Metadata, "b", "p1").is_none());

    let metadata = sent(Method::PATCH, format!("{browser}?fieldManager=m"), true)
        .expect("the metadata apply is a step");
    let first = log.step(Step::Metadata, "b", "p1").unwrap();
    assert!(first.answered.is_none(), "not answered yet");
    log.answered(metadata);
    let answered = log.step(Step::Metadata, "b", "p1").unwrap();
    assert_eq!(answered.sent, first.sent);
    assert!(answered.answered.is_some_and(|a| a >= first.sent));

    let pod_apply = sent(Method::PATCH, format!("{pod}?fieldManager=m"), true).expect("a step");
    let created = log.step(Step::Pod, "b", "p1").unwrap().sent;
    // A second apply is not the create: the first stays, and it is not pending.
    assert!(sent(Method::PATCH, format!("{pod}?fieldManager=m"), true).is_none());
    log.answered(pod_apply);
    assert_eq!(log.step(Step::Pod, "b", "p1").unwrap().sent, created);
    assert_eq!(log.counts().get("apply pods"), Some(&2));
    assert_eq!(log.counts().get("get pods"), Some(&1));
}

#[test]
fn writes_beyond_what_a_session_needs_are_duplicates() {
    let log = RequestLog::default();
    let send = |method: Method, path: &str, apply: bool| {
        log.record(&method, &path.parse::<Uri>().unwrap(), apply)
    };
    let browser = "/apis/selenosis.io/v1/namespaces/b/browsers";
    for name in ["s1", "s2"] {
        send(
            Method::PATCH,
            &format!("{browser}/{name}?fieldManager=m"),
            true,
        );
        send(
            Method::PATCH,
            &format!("/api/v1/namespaces/b/pods/{name}?fieldManager=m"),
            true,
        );
        // Pending and Running: the two a session needs.
        for _ in 0..2 {
            send(
                Method::PATCH,
                &format!("{browser}/{name}/status?fieldManager=m"),
                true,
            );
        }
        send(Method::DELETE, &format!("{browser}/{name}"), false);
        // Reads, dry runs and Events (no name) are never duplicates.
        send(
            Method::GET,
            &format!("/api/v1/namespaces/b/pods/{name}"),
            false,
        );
        send(
            Method::GET,
            &format!("/api/v1/namespaces/b/pods/{name}"),
            false,
        );
        send(
            Method::PATCH,
            &format!("/api/v1/namespaces/b/pods/{name}?dryRun=All"),
            true,
        );
        send(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/b/events",
            false,
        );
        send(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/b/events",
            false,
        );
    }
    assert!(
        log.duplicates(false).is_empty(),
        "{:?}",
        log.duplicates(false)
    );

    // A second DELETE of s1, a third status of s2, and two more pod applies to s2.
    send(Method::DELETE, &format!("{browser}/s1"), false);
    send(
        Method::PATCH,
        &format!("{browser}/s2/status?fieldManager=m"),
        true,
    );
    send(
        Method::PATCH,
        "/api/v1/namespaces/b/pods/s2?fieldManager=m",
        true,
    );
    send(
        Method::PATCH,
        "/api/v1/namespaces/b/pods/s2?fieldManager=m",
        true,
    );
    let expected: BTreeMap<String, u64> = [
        ("apply browsers/status", 1),
        ("apply pods", 2),
        ("delete browsers", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(log.duplicates(false), expected);
    // A session that ends by itself needs a third status apply (its end).
    let mut ended = expected.clone();
    ended.remove("apply browsers/status");
    assert_eq!(log.duplicates(true), ended);
}

fn figures() -> Figures {
    let ms = Duration::from_millis;
    Figures {
        steady: false,
        throughput: (90.0, 100.0),
        apiserver_cpu: Some((ms(12), ms(10))),
        to_pod_p99: (Some(ms(120)), Some(ms(100))),
        propagation_p99: (Some(ms(20)), Some(ms(10))),
        seen_running: (500, 500),
        writes_per_session: 6.0,
        duplicates: Some(0),
        events_per_session: 3.0,
        restarts: Vec::new(),
    }
}

fn restart(browsers: usize, peak_mib: u64, ready_s: u64) -> Restart {
    Restart {
        browsers,
        peak_rss: peak_mib * 1024 * 1024,
        ready: Duration::from_secs(ready_s),
    }
}

fn verdicts(f: &Figures) -> Vec<(&'static str, Option<bool>)> {
    evaluate(f).into_iter().map(|t| (t.what, t.met)).collect()
}

#[test]
fn burst_targets_are_relative_to_the_ideal_client() {
    assert_eq!(
        verdicts(&figures()),
        vec![
            ("Browsers/s with their pod created", Some(true)),
            ("kube-apiserver CPU per Browser", Some(true)),
            ("p99 Browser created -> pod created", Some(true)),
            ("p99 pod Running -> Browser Running", Some(false)),
            ("Browsers seen Running", Some(true)),
            ("API writes per session, Events apart", Some(true)),
            ("duplicate writes", Some(true)),
            ("Events per session", Some(true)),
            ("peak RSS, restart over 5000", None),
            ("peak RSS, restart over 50000", None),
            ("ready after a restart over 50000", None),
        ]
    );
    let mut worse = figures();
    worse.throughput = (79.0, 100.0);
    worse.apiserver_cpu = Some((Duration::from_millis(13), Duration::from_millis(10)));
    worse.seen_running = (499, 500);
    worse.writes_per_session = 8.5;
    worse.duplicates = Some(2);
    worse.events_per_session = 3.1;
    worse.restarts = vec![restart(5000, 65, 3), restart(50_000, 257, 31)];
    assert!(
        verdicts(&worse)
            .iter()
            .filter(|(what, _)| !what.starts_with("p99"))
            .all(|(_, met)| *met == Some(false)),
        "{:?}",
        verdicts(&worse)
    );
}

#[test]
fn steady_rate_targets_are_absolute_and_unmeasured_ones_have_no_verdict() {
    let mut steady = figures();
    steady.steady = true;
    steady.to_pod_p99 = (
        Some(Duration::from_millis(50)),
        Some(Duration::from_millis(1)),
    );
    steady.propagation_p99 = (Some(Duration::from_millis(51)), None);
    steady.apiserver_cpu = None;
    steady.duplicates = None;
    steady.restarts = vec![restart(1000, 10, 1), restart(50_000, 160, 17)];
    let v = verdicts(&steady);
    assert!(!v.iter().any(|(what, _)| what.starts_with("Browsers/s")));
    let of = |what: &str| v.iter().find(|(w, _)| *w == what).unwrap().1;
    assert_eq!(of("p99 Browser created -> pod created"), Some(true));
    assert_eq!(of("p99 pod Running -> Browser Running"), Some(false));
    assert_eq!(of("kube-apiserver CPU per Browser"), None);
    assert_eq!(of("duplicate writes"), None);
    // A restart over another number of Browsers says nothing about the 5000 target.
    assert_eq!(of("peak RSS, restart over 5000"), None);
    assert_eq!(of("peak RSS, restart over 50000"), Some(true));
    assert_eq!(of("ready after a restart over 50000"), Some(true));
}

#[test]
fn fair_share_gives_owner_0_the_first_half_and_the_other_owners_the_second_in_turn() {
    let owners = Owners {
        groups: 3,
        single: false,
    };
    let groups: Vec<usize> = (0..8).map(|i| owners.group(i, 8)).collect();
    assert_eq!(groups, [0, 0, 0, 0, 1, 2, 1, 2]);
    assert_eq!(owners.first_wave(8), 4);
    assert_eq!(owners.owner(2), "owner-2");
    let single = Owners {
        single: true,
        ..owners
    };
    assert_eq!(single.owner(2), "owner-0", "the same groups, one owner");
    // Each group's waits, create sent -> seen Running; one never ran.
    let t0 = tokio::time::Instant::now();
    let ms = |n: u64| Duration::from_millis(n);
    let sent = [t0, t0, t0 + ms(1000), t0 + ms(1000)];
    let running = [
        Some(t0 + ms(10)),
        Some(t0 + ms(30)),
        Some(t0 + ms(1005)),
        None,
    ];
    let waits = fair_share::waits(&owners, &[0, 0, 1, 2], &sent, &running);
    let of = |g: usize| {
        let w = &waits[g];
        (w.browsers, w.wait.as_ref().map(|s| (s.count, s.max)))
    };
    assert_eq!(of(0), (2, Some((2, ms(30)))));
    assert_eq!(of(1), (1, Some((1, ms(5)))));
    assert_eq!(of(2), (1, None));
}
