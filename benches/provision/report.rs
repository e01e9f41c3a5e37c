//! The results: a table for people and JSON for tools.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fair_share::{self, GroupWait, Owners};
use crate::flavour::Flavour;
use crate::measure::{self, Cpu, Memory, ServerCpu};
use crate::requests;
use crate::targets::{self, Figures, Restart, Target};
use testkit::stats::Summary;

pub struct Setup {
    pub backend: String,
    /// Which operator, and how it runs: in this process or as a separate one.
    pub operator: String,
    /// Where the operator's writes are counted from.
    pub writes: String,
    pub browsers: usize,
    /// Bare pods and ideal-client Browsers, when not `browsers`.
    pub reference: usize,
    pub concurrency: usize,
    pub rate: Option<f64>,
    pub step_delay: Duration,
    pub max_workers: Option<u16>,
    /// Mixed load: the operator run's sessions end this long after their pod runs.
    pub session_end: Option<Duration>,
    /// The operator run's ResourceQuota of pods, if it had one.
    pub quota: Option<usize>,
    /// Fair share: the owners of the operator run's Browsers.
    pub owners: Option<Owners>,
    /// The operator ran before the ideal client.
    pub operator_first: bool,
    /// An unmeasured phase of the ideal client ran before the measured ones.
    pub warm_phase: bool,
    /// Worker threads of each runtime (operator, benchmark).
    pub threads: usize,
    pub smoke: bool,
}

pub struct Baseline {
    pub pods: usize,
    pub elapsed: Duration,
    pub throughput: f64,
    pub latency: Option<Summary>,
    /// From the first create sent to the last answered; `None` when not measured.
    pub server_cpu: Option<ServerCpu>,
}

/// What the benchmark's watches saw of one set of Browsers, from the first create sent to
/// the last Browser seen Running, and what that cost.
pub struct Flow {
    pub browsers: usize,
    /// The benchmark's Browser create, sent → answered.
    pub create_latency: Option<Summary>,
    /// Browser create sent → the pod seen by the benchmark's watch.
    pub to_pod_created: Option<Summary>,
    /// Where the time before the pod went, from the client's request log (when there is one).
    pub path: Option<PathToPod>,
    pub pods_seen: usize,
    /// Pod seen Running → Browser seen Running with its pod IP.
    pub propagation: Option<Summary>,
    /// Browser create sent → Browser seen Running with its pod IP.
    pub end_to_end: Option<Summary>,
    pub seen_running: usize,
    /// First Browser create sent → last pod seen.
    pub to_pods: Duration,
    /// First Browser create sent → last Browser seen Running.
    pub to_running: Duration,
    /// CPU of kube-apiserver and etcd over the flow; `None` when not measured.
    pub server_cpu: Option<ServerCpu>,
    /// CPU of the client (operator or ideal client) over the flow.
    pub client_cpu: Cpu,
}

/// A client's path from a Browser's create to its pod's create, step by step (the first
/// metadata apply and pod apply of each Browser; answered: the answer's headers arrived).
pub struct PathToPod {
    /// Browser create sent → metadata apply sent: the create's watch event reaching the
    /// client, and the client's own queue.
    pub to_metadata_sent: Option<Summary>,
    /// The metadata apply, sent → answered.
    pub metadata_round_trip: Option<Summary>,
    /// Metadata apply answered → pod apply sent: the client's own decision and rendering.
    pub metadata_to_pod_sent: Option<Summary>,
    /// Browser create sent → pod apply sent.
    pub to_pod_sent: Option<Summary>,
    /// The pod apply, sent → answered.
    pub pod_round_trip: Option<Summary>,
}

impl Flow {
    pub fn throughput_pods(&self) -> f64 {
        per_second(self.pods_seen, self.to_pods)
    }

    pub fn throughput_running(&self) -> f64 {
        per_second(self.seen_running, self.to_running)
    }

    fn server_per_browser(&self) -> Option<ServerCpu> {
        self.server_cpu.map(|c| per_object(&c, self.browsers))
    }
}

pub fn per_second(n: usize, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        0.0
    } else {
        n as f64 / elapsed.as_secs_f64()
    }
}

fn per_object(c: &ServerCpu, n: usize) -> ServerCpu {
    let n = n.max(1) as u32;
    ServerCpu {
        apiserver: c.apiserver / n,
        etcd: c.etcd / n,
    }
}

/// The ideal client's phase: its flow and its writes from its request log.
pub struct Ideal {
    pub flow: Flow,
    /// Writes by `verb resource`, whole phase.
    pub writes: BTreeMap<String, u64>,
    pub duplicates: BTreeMap<String, u64>,
}

pub struct Run {
    pub flow: Flow,
    pub rate: Option<f64>,
    /// Deletion of every Browser started → the last Browser, and the last pod, gone.
    pub delete_browsers: Option<Duration>,
    pub delete_pods: Option<Duration>,
    /// CPU of kube-apiserver and etcd from the first create to the last object gone.
    pub server_cpu_with_deletion: Option<ServerCpu>,
    /// Fair share: each group's waits (empty without --owners).
    pub waits: Vec<GroupWait>,
    /// The operator's pod creates the API server refused (a full quota), from the audit log.
    pub refused_pod_creates: Option<u64>,
}

/// The operator's API writes from its `api_writes_total` counter.
#[derive(Default)]
pub struct WriteCounts {
    /// Writes to Browsers and Pods, by `verb resource`.
    pub lifecycle: BTreeMap<String, f64>,
    pub events: f64,
    /// BrowserConfig status writes.
    pub config_status: f64,
    /// Dry-run pod applies validating BrowserConfig entries (nothing is stored).
    pub dry_runs: f64,
}

/// The value of `key` in a metric sample's label set (`""` when absent).
pub fn label<'a>(labels: &'a str, key: &str) -> &'a str {
    labels
        .split(',')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix("=\"")?.strip_suffix('"'))
        .unwrap_or_default()
}

impl WriteCounts {
    pub fn from_metrics(text: &str) -> Self {
        let mut counts = WriteCounts::default();
        for (labels, value) in measure::samples(text, "browser_controller_api_writes_total") {
            let (verb, resource) = (label(&labels, "verb"), label(&labels, "resource"));
            if resource == "events" {
                counts.events += value;
            } else if verb.ends_with("dry-run") {
                counts.dry_runs += value;
            } else if resource.starts_with("browserconfigs") {
                counts.config_status += value;
            } else {
                *counts
                    .lifecycle
                    .entry(format!("{verb} {resource}"))
                    .or_default() += value;
            }
        }
        counts
    }

    pub fn total(&self) -> f64 {
        // A fold from +0.0: an empty float `sum` is -0.0, which would print as "-0".
        self.lifecycle.values().fold(0.0, |a, b| a + b)
    }

    fn to_json(&self, per: f64) -> Value {
        let lifecycle: serde_json::Map<String, Value> = self
            .lifecycle
            .iter()
            .map(|(k, v)| (k.clone(), json!(round(v / per))))
            .collect();
        json!({
            "browsers_and_pods": round(self.total() / per),
            "by_verb_and_resource": lifecycle,
            "events": round(self.events / per),
            "browserconfig_status": round(self.config_status / per),
            "browserconfig_dry_runs": round(self.dry_runs / per),
        })
    }
}

pub struct Cost {
    pub writes_running: WriteCounts,
    pub writes: WriteCounts,
    pub reconciles_running: f64,
    pub reconciles: f64,
    /// Every request the operator's client sent, by `verb resource`; `None` for a separate
    /// process, whose requests the benchmark does not see.
    pub requests: Option<BTreeMap<String, u64>>,
    /// Writes beyond what the path needs, by `verb resource` (same source as `requests`).
    pub duplicates: Option<BTreeMap<String, u64>>,
    /// The operator's CPU while deleting (the last Browser Running → the last object gone).
    pub cpu_delete: Cpu,
    /// RSS and peak RSS of a separate operator process at the end of the run.
    pub memory: Option<Memory>,
    /// Pods the garbage collector's stand-in deleted; `None` when it did not run.
    pub collected: Option<usize>,
}

impl Cost {
    /// From the operator's metrics when the last Browser ran (`running`) and at the end.
    pub fn from_metrics(flavour: Flavour, running: &str, end: &str) -> Self {
        Cost {
            writes_running: flavour.writes(running),
            writes: flavour.writes(end),
            reconciles_running: flavour.reconciles(running).0,
            reconciles: flavour.reconciles(end).0,
            requests: None,
            duplicates: None,
            cpu_delete: Cpu::default(),
            memory: None,
            collected: None,
        }
    }

    /// The operator's requests for Browsers, pods and Events (reads and writes, no lists or
    /// watches), and the rest: discovery, permission checks, lists, watches, BrowserConfig
    /// validation — a cost per start or per config, not per Browser.
    fn requests_split(
        requests: &BTreeMap<String, u64>,
    ) -> (BTreeMap<String, f64>, BTreeMap<String, u64>) {
        let mut per_browser = BTreeMap::new();
        let mut fixed = BTreeMap::new();
        for (key, count) in requests {
            let (verb, resource) = key.split_once(' ').unwrap_or((key, ""));
            let browser_scoped = ["browsers", "pods", "events"]
                .iter()
                .any(|r| resource == *r || resource.starts_with(&format!("{r}/")));
            if browser_scoped && !matches!(verb, "list" | "watch") && !verb.ends_with("dry-run") {
                per_browser.insert(key.clone(), *count as f64);
            } else {
                fixed.insert(key.clone(), *count);
            }
        }
        (per_browser, fixed)
    }
}

/// Writes (by `verb resource`) among a request log's counts.
pub fn writes_of(requests: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    requests
        .iter()
        .filter(|(key, _)| requests::is_write(key.split(' ').next().unwrap_or_default()))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The operator's memory after a restart.
pub enum IdleMemory {
    /// In this process: live heap bytes with the operator stopped, at the end of the idle
    /// window and at the most since the restart; RSS of the whole process likewise (peak
    /// `None` when the kernel did not reset it).
    InProcess {
        heap_before: usize,
        heap_after: usize,
        heap_peak: usize,
        rss_before: u64,
        rss_after: u64,
        rss_peak: Option<u64>,
    },
    /// The restarted process's own RSS at the end of the idle window, and its peak since it
    /// started (the start-up list included).
    Process(Memory),
}

pub struct Idle {
    pub browsers: usize,
    /// Operator start → every Browser reconciled once, none in flight.
    pub sync: Duration,
    pub startup_cpu: Cpu,
    /// Everything the restarted operator wrote (start-up and idle window).
    pub writes: WriteCounts,
    pub window: Duration,
    pub idle_reconciles: f64,
    pub idle_cpu: Cpu,
    pub memory: IdleMemory,
    /// The operator process's memory once it had provisioned these Browsers itself (all at
    /// once, without `--prefill`), its peak since it started: what a burst of them costs.
    pub provisioned: Option<Memory>,
}

pub struct Report {
    pub setup: Setup,
    pub baseline: Baseline,
    pub ideal: Ideal,
    pub run: Run,
    pub cost: Cost,
    pub idle: Vec<Idle>,
}

fn ms(d: Duration) -> f64 {
    round(d.as_secs_f64() * 1000.0)
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

fn delta(after: f64, before: f64) -> f64 {
    after - before
}

fn summary_json(s: &Option<Summary>) -> Value {
    match s {
        Some(s) => json!({
            "count": s.count, "p50_ms": ms(s.p50), "p90_ms": ms(s.p90), "p99_ms": ms(s.p99), "max_ms": ms(s.max),
        }),
        None => Value::Null,
    }
}

fn cpu_json(c: &Cpu) -> Value {
    json!({"operator_s": round(c.operator.as_secs_f64()), "process_s": round(c.process.as_secs_f64())})
}

fn server_json(c: &Option<ServerCpu>) -> Value {
    match c {
        Some(c) => json!({
            "kube_apiserver_ms": ms(c.apiserver), "etcd_ms": ms(c.etcd),
        }),
        None => Value::Null,
    }
}

fn ratio_json(r: Option<f64>) -> Value {
    r.map_or(Value::Null, |r| json!(round(r)))
}

fn fmt_ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.1}")
    }
}

fn summary_row(out: &mut String, name: &str, s: &Option<Summary>) {
    let _ = match s {
        Some(s) => writeln!(
            out,
            "  {name:<50}{:>9}{:>9}{:>9}{:>9}{:>7}",
            fmt_ms(s.p50),
            fmt_ms(s.p90),
            fmt_ms(s.p99),
            fmt_ms(s.max),
            s.count
        ),
        None => writeln!(out, "  {name:<50}{:>9}", "-"),
    };
}

fn per(x: f64, n: usize) -> f64 {
    if n == 0 { 0.0 } else { x / n as f64 }
}

fn breakdown(map: &BTreeMap<String, f64>, n: usize) -> String {
    map.iter()
        .filter(|(_, v)| **v > 0.0)
        .map(|(k, v)| format!("{k} {:.2}", per(*v, n)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn as_f64(map: &BTreeMap<String, u64>) -> BTreeMap<String, f64> {
    map.iter().map(|(k, v)| (k.clone(), *v as f64)).collect()
}

fn sum_f64(map: &BTreeMap<String, f64>) -> f64 {
    // A fold from +0.0: an empty float `sum` is -0.0, which would print as "-0".
    map.values().fold(0.0, |a, b| a + b)
}

/// A cell of the comparison table: a figure, or `-`.
fn cell(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".to_string(), |x| format!("{x:.digits$}"))
}

fn p99(s: &Option<Summary>) -> Option<Duration> {
    s.map(|s| s.p99)
}

fn ms_f64(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1000.0)
}

impl Report {
    fn duplicate_total(&self) -> Option<u64> {
        self.cost.duplicates.as_ref().map(|d| d.values().sum())
    }

    /// The targets, evaluated on this run.
    pub fn targets(&self) -> Vec<Target> {
        let (op, ideal) = (&self.run.flow, &self.ideal.flow);
        let n = op.browsers;
        let restarts = self
            .idle
            .iter()
            .filter_map(|i| match &i.memory {
                IdleMemory::Process(m) => Some(Restart {
                    browsers: i.browsers,
                    peak_rss: m.peak,
                    ready: i.sync,
                }),
                IdleMemory::InProcess { .. } => None,
            })
            .collect();
        targets::evaluate(&Figures {
            steady: self.run.rate.is_some(),
            throughput: (op.throughput_pods(), ideal.throughput_pods()),
            apiserver_cpu: op
                .server_per_browser()
                .zip(ideal.server_per_browser())
                .map(|(o, i)| (o.apiserver, i.apiserver)),
            to_pod_p99: (p99(&op.to_pod_created), p99(&ideal.to_pod_created)),
            propagation_p99: (p99(&op.propagation), p99(&ideal.propagation)),
            seen_running: (op.seen_running, n),
            writes_per_session: per(self.cost.writes.total(), n),
            duplicates: self.duplicate_total(),
            events_per_session: per(self.cost.writes.events, n),
            restarts,
        })
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        let s = &self.setup;
        let b = &self.baseline;
        let ideal = &self.ideal.flow;
        let r = &self.run;
        let op = &r.flow;
        let c = &self.cost;
        let n = op.browsers;
        let rate = s
            .rate
            .map_or("all at once".to_string(), |r| format!("{r} Browsers/s"));
        let workers = s
            .max_workers
            .map_or("default".to_string(), |w| w.to_string());
        let _ = writeln!(
            out,
            "\nbrowser-controller provisioning benchmark{}",
            if s.smoke {
                " (smoke run: sizes too small for meaningful figures)"
            } else {
                ""
            }
        );
        let _ = writeln!(out, "  API server    {}", s.backend);
        let _ = writeln!(out, "  operator      {}", s.operator);
        let _ = writeln!(out, "  writes        {}", s.writes);
        let _ = writeln!(
            out,
            "  kubelet       simulator, {} per step (bind, Pending, Running)",
            fmt_ms(s.step_delay) + " ms"
        );
        let _ = writeln!(
            out,
            "  load          {n} Browsers ({} bare pods and ideal-client Browsers), client concurrency {}, {rate}; operator --max-workers {workers}; {} worker threads for each runtime",
            s.reference, s.concurrency, s.threads
        );
        let order = match (s.warm_phase, s.operator_first) {
            (false, false) => None,
            (false, true) => Some("bare pods, operator, ideal client"),
            (true, false) => Some("bare pods, ideal client unmeasured, ideal client, operator"),
            (true, true) => Some("bare pods, ideal client unmeasured, operator, ideal client"),
        };
        if let Some(order) = order {
            let _ = writeln!(out, "  order         {order}");
        }
        if let Some(end) = s.session_end {
            let _ = writeln!(
                out,
                "  mixed load    the operator run's sessions end {} ms after their pod runs (the ideal client's last)",
                fmt_ms(end)
            );
        }

        if let Some(quota) = s.quota {
            let owners = match s.owners {
                None => String::new(),
                Some(o) if o.single => format!(
                    "; half the Browsers at once, the rest {} s later, all of one owner",
                    fair_share::SECOND_WAVE.as_secs()
                ),
                Some(o) => format!(
                    "; owner 0's half at once, {} s later owners 1 to {} in turn",
                    fair_share::SECOND_WAVE.as_secs(),
                    o.groups - 1
                ),
            };
            let _ = writeln!(
                out,
                "  quota         the operator run under a ResourceQuota of {quota} pods{owners}"
            );
        }

        // The comparison: bare pods, the ideal client and the operator side by side.
        let _ = writeln!(
            out,
            "\n{:<46}{:>11}{:>11}{:>11}{:>10}{:>10}",
            "phase", "bare pods", "ideal", "operator", "op/ideal", "op/bare"
        );
        let row = |out: &mut String,
                   name: &str,
                   bare: Option<f64>,
                   ideal: Option<f64>,
                   op: Option<f64>,
                   digits: usize| {
            let r = |of: Option<f64>| op.zip(of).and_then(|(o, f)| targets::ratio(o, f));
            let _ = writeln!(
                out,
                "  {name:<44}{:>11}{:>11}{:>11}{:>10}{:>10}",
                cell(bare, digits),
                cell(ideal, digits),
                cell(op, digits),
                cell(r(ideal), 2),
                cell(r(bare), 2),
            );
        };
        row(
            &mut out,
            "pods created per s",
            Some(b.throughput),
            Some(ideal.throughput_pods()),
            Some(op.throughput_pods()),
            1,
        );
        row(
            &mut out,
            "Browsers Running per s",
            None,
            Some(ideal.throughput_running()),
            Some(op.throughput_running()),
            1,
        );
        row(
            &mut out,
            "p99 created -> pod created, ms",
            ms_f64(p99(&b.latency)),
            ms_f64(p99(&ideal.to_pod_created)),
            ms_f64(p99(&op.to_pod_created)),
            1,
        );
        row(
            &mut out,
            "p99 pod Running -> Browser Running, ms",
            None,
            ms_f64(p99(&ideal.propagation)),
            ms_f64(p99(&op.propagation)),
            1,
        );
        let _ = writeln!(
            out,
            "  {:<44}{:>11}{:>11}{:>11}",
            "Browsers seen Running",
            "-",
            format!("{}/{}", ideal.seen_running, ideal.browsers),
            format!("{}/{}", op.seen_running, n),
        );
        let server = |f: &Flow, pick: fn(&ServerCpu) -> Duration| {
            f.server_per_browser()
                .map(|c| pick(&c).as_secs_f64() * 1000.0)
        };
        let bare_server = |pick: fn(&ServerCpu) -> Duration| {
            b.server_cpu
                .map(|c| pick(&per_object(&c, b.pods)).as_secs_f64() * 1000.0)
        };
        if b.server_cpu.is_some() {
            row(
                &mut out,
                "kube-apiserver CPU per Browser, ms",
                bare_server(|c| c.apiserver),
                server(ideal, |c| c.apiserver),
                server(op, |c| c.apiserver),
                2,
            );
            row(
                &mut out,
                "etcd CPU per Browser, ms",
                bare_server(|c| c.etcd),
                server(ideal, |c| c.etcd),
                server(op, |c| c.etcd),
                2,
            );
        } else {
            let _ = writeln!(
                out,
                "  {:<44}{:>11}",
                "API server CPU per Browser", "not measured (the benchmark did not start it)"
            );
        }
        row(
            &mut out,
            "client CPU per Browser, ms",
            None,
            Some(per(
                ideal.client_cpu.operator.as_secs_f64() * 1000.0,
                ideal.browsers,
            )),
            Some(per(op.client_cpu.operator.as_secs_f64() * 1000.0, n)),
            2,
        );
        let with_deletion = r
            .server_cpu_with_deletion
            .map(|c| per_object(&c, n))
            .map_or("not measured".to_string(), |c| {
                format!(
                    "kube-apiserver {} ms, etcd {} ms",
                    fmt_ms(c.apiserver),
                    fmt_ms(c.etcd)
                )
            });
        let _ = writeln!(
            out,
            "  (from the first create sent to the last pod seen / Browser Running; bare pods: to the last create answered;\n   CPU to the last Browser Running, 10 ms resolution; operator per Browser including deletion: {with_deletion})"
        );

        let _ = writeln!(
            out,
            "\n{:<52}{:>9}{:>9}{:>9}{:>9}{:>7}",
            "latency (ms)", "p50", "p90", "p99", "max", "n"
        );
        summary_row(&mut out, "bare pod create (round trip)", &b.latency);
        // The benchmark's own creates, the same request in both phases: how busy the server
        // was for every client in each.
        summary_row(
            &mut out,
            "ideal: Browser create (round trip)",
            &ideal.create_latency,
        );
        path_rows(&mut out, "ideal", &ideal.path);
        summary_row(
            &mut out,
            "ideal: Browser created -> pod created",
            &ideal.to_pod_created,
        );
        summary_row(
            &mut out,
            "ideal: pod Running -> Browser Running",
            &ideal.propagation,
        );
        summary_row(
            &mut out,
            "ideal: Browser created -> Running",
            &ideal.end_to_end,
        );
        summary_row(
            &mut out,
            "operator: Browser create (round trip)",
            &op.create_latency,
        );
        path_rows(&mut out, "operator", &op.path);
        summary_row(
            &mut out,
            "operator: Browser created -> pod created",
            &op.to_pod_created,
        );
        summary_row(
            &mut out,
            "operator: pod Running -> Browser Running",
            &op.propagation,
        );
        summary_row(
            &mut out,
            "operator: Browser created -> Running",
            &op.end_to_end,
        );
        let _ = writeln!(
            out,
            "  (pod created, pod and Browser Running: the first event of the benchmark's own watches showing it)"
        );
        if op.pods_seen < n {
            let _ = writeln!(out, "  ({} Browsers without a pod seen)", n - op.pods_seen);
        }

        self.waits_table(&mut out);

        let gone = |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{} ms", fmt_ms(d)));
        let _ = writeln!(
            out,
            "\ndeleting all {n} Browsers: zero Browsers after {}, zero pods after {}",
            gone(r.delete_browsers),
            gone(r.delete_pods)
        );

        let _ = writeln!(
            out,
            "\nwrites per session (Browser created, Running, deleted by the client)"
        );
        let _ = writeln!(
            out,
            "  operator       {:.2}  [{}]; until Running {:.2}",
            per(c.writes.total(), n),
            breakdown(&c.writes.lifecycle, n),
            per(c.writes_running.total(), n)
        );
        let duplicates = |d: &BTreeMap<String, u64>| {
            if d.is_empty() {
                "none".to_string()
            } else {
                d.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let _ = writeln!(
            out,
            "                 Events {:.2}; duplicates (whole run): {}",
            per(c.writes.events, n),
            c.duplicates.as_ref().map_or(
                "not measured (no request log of a separate process)".to_string(),
                duplicates
            )
        );
        let ideal_writes = as_f64(&self.ideal.writes);
        let _ = writeln!(
            out,
            "  ideal client   {:.2}  [{}]; duplicates: {}",
            per(sum_f64(&ideal_writes), ideal.browsers),
            breakdown(&ideal_writes, ideal.browsers),
            duplicates(&self.ideal.duplicates)
        );
        let _ = writeln!(
            out,
            "  (duplicates, from a request log: writes of one verb to one Browser or pod beyond what a session needs: two status applies, one of anything else; from the audit log: see writes above)"
        );

        let _ = writeln!(out, "\noperator cost per Browser");
        let _ = writeln!(
            out,
            "  reconciles                          {:.2}  ({:.2} until Running)",
            per(c.reconciles, n),
            per(c.reconciles_running, n)
        );
        if let Some(requests) = &c.requests {
            let (per_browser, fixed) = Cost::requests_split(requests);
            let _ = writeln!(
                out,
                "  requests to Browsers, pods, Events  {:.2}  [{}]",
                per(sum_f64(&per_browser), n),
                breakdown(&per_browser, n)
            );
            let _ = writeln!(
                out,
                "  other requests (whole run)          {}",
                fixed
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let _ = writeln!(
            out,
            "  operator CPU                        {:.2} ms until Running, {:.2} ms deleting (benchmark process: {:.2} / {:.2} ms)",
            per(op.client_cpu.operator.as_secs_f64() * 1000.0, n),
            per(c.cpu_delete.operator.as_secs_f64() * 1000.0, n),
            per(op.client_cpu.process.as_secs_f64() * 1000.0, n),
            per(c.cpu_delete.process.as_secs_f64() * 1000.0, n),
        );
        if let Some(m) = &c.memory {
            let _ = writeln!(
                out,
                "  operator process memory             RSS {:.1} MiB, peak {:.1} MiB (end of the run)",
                mib(m.rss as f64),
                mib(m.peak as f64)
            );
        }
        if let Some(collected) = c.collected {
            let _ = writeln!(
                out,
                "  pods left to the garbage collector  {collected} (deleted by its stand-in once their Browser was gone)"
            );
        }

        if !self.idle.is_empty() {
            self.idle_table(&mut out);
        }

        let _ = writeln!(
            out,
            "\ntargets (information only: the benchmark never fails on them)"
        );
        for t in self.targets() {
            let _ = writeln!(
                out,
                "  {:<5} {:<40} {:<38} {}",
                t.verdict(),
                t.what,
                t.goal,
                t.measured
            );
        }
        out
    }

    /// Fair share: each group's wait, and the refused creates.
    fn waits_table(&self, out: &mut String) {
        if self.run.waits.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\n{:<52}{:>9}{:>9}{:>9}{:>9}{:>7}",
            "wait by group: created -> Running (ms)", "p50", "p90", "p99", "max", "n"
        );
        for w in &self.run.waits {
            let name = format!("group {} ({} Browsers of {})", w.group, w.browsers, w.owner);
            summary_row(out, &name, &w.wait);
        }
        if let Some(refused) = self.run.refused_pod_creates {
            let _ = writeln!(
                out,
                "  pod creates refused by the quota: {refused} (audit log)"
            );
        }
    }

    fn idle_table(&self, out: &mut String) {
        let in_process = matches!(
            self.idle.first().map(|i| &i.memory),
            Some(IdleMemory::InProcess { .. })
        );
        if in_process {
            let _ = writeln!(
                out,
                "\nidle: operator restarted over N Running Browsers and their pods (writes: to Browsers and pods; config: BrowserConfig status writes; heap: bytes live in the process; RSS: whole process)"
            );
            let _ = writeln!(
                out,
                "  {:>6}{:>10}{:>8}{:>8}{:>8}{:>11}{:>13}{:>11}{:>10}{:>11}{:>10}{:>13}{:>13}",
                "N",
                "ready ms",
                "writes",
                "config",
                "events",
                "heap +MiB",
                "KiB/Browser",
                "peak +MiB",
                "RSS +MiB",
                "peak +MiB",
                "RSS MiB",
                "idle CPU op",
                "idle CPU all"
            );
        } else {
            let _ = writeln!(
                out,
                "\nidle: operator process restarted over N Running Browsers and their pods (writes: to Browsers and pods; config: BrowserConfig status writes; RSS and peak RSS of the restarted process, the start-up list included)"
            );
            let _ = writeln!(
                out,
                "  {:>6}{:>10}{:>8}{:>8}{:>8}{:>10}{:>11}{:>13}",
                "N", "ready ms", "writes", "config", "events", "RSS MiB", "peak MiB", "idle CPU op"
            );
        }
        for i in &self.idle {
            let window = i.window.as_secs_f64().max(f64::EPSILON);
            let idle_op = 100.0 * i.idle_cpu.operator.as_secs_f64() / window;
            let head = format!(
                "  {:>6}{:>10}{:>8}{:>8}{:>8}",
                i.browsers,
                fmt_ms(i.sync),
                i.writes.total(),
                i.writes.config_status,
                i.writes.events
            );
            let _ = match &i.memory {
                IdleMemory::InProcess {
                    heap_before,
                    heap_after,
                    heap_peak,
                    rss_before,
                    rss_after,
                    rss_peak,
                } => {
                    let heap = delta(*heap_after as f64, *heap_before as f64);
                    writeln!(
                        out,
                        "{head}{:>11.2}{:>13.2}{:>11.2}{:>10.2}{:>11}{:>10.1}{:>12.2}%{:>12.2}%",
                        mib(heap),
                        per(heap, i.browsers) / 1024.0,
                        mib(delta(*heap_peak as f64, *heap_before as f64)),
                        mib(delta(*rss_after as f64, *rss_before as f64)),
                        rss_peak.map_or("-".to_string(), |p| format!(
                            "{:.2}",
                            mib(delta(p as f64, *rss_before as f64))
                        )),
                        mib(*rss_after as f64),
                        idle_op,
                        100.0 * i.idle_cpu.process.as_secs_f64() / window,
                    )
                }
                IdleMemory::Process(m) => writeln!(
                    out,
                    "{head}{:>10.1}{:>11.1}{:>12.2}%",
                    mib(m.rss as f64),
                    mib(m.peak as f64),
                    idle_op,
                ),
            };
        }
        for i in &self.idle {
            if let Some(m) = &i.provisioned {
                let _ = writeln!(
                    out,
                    "  N={}: the operator that provisioned them (all at once): RSS {:.1} MiB, peak {:.1} MiB since its start",
                    i.browsers,
                    mib(m.rss as f64),
                    mib(m.peak as f64)
                );
            }
        }
        for pair in self.idle.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            if a.browsers == b.browsers {
                continue;
            }
            let more = (b.browsers - a.browsers) as f64;
            let growth = |x: f64, y: f64| (x - y) / more / 1024.0;
            let _ = match (&a.memory, &b.memory) {
                (
                    IdleMemory::InProcess {
                        heap_before: ab,
                        heap_after: aa,
                        rss_before: rb,
                        rss_after: ra,
                        ..
                    },
                    IdleMemory::InProcess {
                        heap_before: bb,
                        heap_after: ba,
                        rss_before: sb,
                        rss_after: sa,
                        ..
                    },
                ) => writeln!(
                    out,
                    "  from N={} to N={}: heap +{:.2} KiB, RSS +{:.2} KiB per additional Browser",
                    a.browsers,
                    b.browsers,
                    growth(*ba as f64 - *bb as f64, *aa as f64 - *ab as f64),
                    growth(*sa as f64 - *sb as f64, *ra as f64 - *rb as f64),
                ),
                (IdleMemory::Process(ma), IdleMemory::Process(mb)) => writeln!(
                    out,
                    "  from N={} to N={}: RSS +{:.2} KiB, peak RSS +{:.2} KiB per additional Browser",
                    a.browsers,
                    b.browsers,
                    growth(mb.rss as f64, ma.rss as f64),
                    growth(mb.peak as f64, ma.peak as f64),
                ),
                _ => Ok(()),
            };
        }
        let _ = writeln!(
            out,
            "  (start-up CPU of the operator: {}; idle window {} ms; CPU has 10 ms resolution per thread)",
            self.idle
                .iter()
                .map(|i| format!("{} ms at N={}", fmt_ms(i.startup_cpu.operator), i.browsers))
                .collect::<Vec<_>>()
                .join(", "),
            self.idle
                .first()
                .map_or("0".to_string(), |i| fmt_ms(i.window))
        );
    }

    pub fn to_json(&self) -> Value {
        let s = &self.setup;
        let b = &self.baseline;
        let r = &self.run;
        let op = &r.flow;
        let ideal = &self.ideal.flow;
        let c = &self.cost;
        let n = op.browsers.max(1) as f64;
        let idle: Vec<Value> = self.idle.iter().map(idle_json).collect();
        let server_ratio = |of: Option<ServerCpu>| {
            op.server_per_browser().zip(of).and_then(|(o, f)| {
                targets::ratio(o.apiserver.as_secs_f64(), f.apiserver.as_secs_f64())
            })
        };
        let p99_ratio = |a: &Option<Summary>, b: &Option<Summary>| {
            p99(a)
                .zip(p99(b))
                .and_then(|(a, b)| targets::ratio(a.as_secs_f64(), b.as_secs_f64()))
        };
        let targets: Vec<Value> = self
            .targets()
            .iter()
            .map(|t| {
                json!({
                    "target": t.what, "goal": t.goal, "measured": t.measured,
                    "met": t.met,
                })
            })
            .collect();
        json!({
            "setup": {
                "api_server": s.backend,
                "operator": s.operator,
                "writes_counted_from": s.writes,
                "browsers": s.browsers,
                "reference_browsers": s.reference,
                "concurrency": s.concurrency,
                "rate_per_second": s.rate,
                "kubelet_step_delay_ms": ms(s.step_delay),
                "operator_max_workers": s.max_workers,
                "session_end_ms": s.session_end.map(ms),
                "quota_pods": s.quota,
                "owners": s.owners.map(|o| json!({"groups": o.groups, "single_owner": o.single})),
                "operator_first": s.operator_first,
                "warm_phase": s.warm_phase,
                "worker_threads": s.threads,
                "smoke": s.smoke,
            },
            "baseline": {
                "pods": b.pods,
                "elapsed_ms": ms(b.elapsed),
                "pod_create_throughput_per_second": round(b.throughput),
                "pod_create_latency": summary_json(&b.latency),
                "server_cpu": server_json(&b.server_cpu),
                "server_cpu_per_pod": server_json(&b.server_cpu.map(|c| per_object(&c, b.pods))),
            },
            "ideal_client": {
                "flow": flow_json(ideal),
                "writes_per_browser": per_browser_json(&self.ideal.writes, ideal.browsers),
                "duplicates": self.ideal.duplicates,
            },
            "operator": {
                "browsers": op.browsers,
                "rate_per_second": r.rate,
                "flow": flow_json(op),
                "delete": {
                    "to_zero_browsers_ms": r.delete_browsers.map(ms),
                    "to_zero_pods_ms": r.delete_pods.map(ms),
                },
                "server_cpu_with_deletion": server_json(&r.server_cpu_with_deletion),
                "waits_by_group": r.waits.iter().map(|w| json!({
                    "group": w.group, "owner": w.owner, "browsers": w.browsers,
                    "created_to_running": summary_json(&w.wait),
                })).collect::<Vec<_>>(),
                "refused_pod_creates": r.refused_pod_creates,
                "server_cpu_per_browser_with_deletion": server_json(&r.server_cpu_with_deletion.map(|c| per_object(&c, op.browsers))),
            },
            "ratios": {
                "pods_created_per_second": {
                    "to_ideal_client": ratio_json(targets::ratio(op.throughput_pods(), ideal.throughput_pods())),
                    "to_bare_pods": ratio_json(targets::ratio(op.throughput_pods(), b.throughput)),
                },
                "browsers_running_per_second_to_ideal_client": ratio_json(targets::ratio(op.throughput_running(), ideal.throughput_running())),
                "p99_created_to_pod_created": {
                    "to_ideal_client": ratio_json(p99_ratio(&op.to_pod_created, &ideal.to_pod_created)),
                    "to_bare_pod_create": ratio_json(p99_ratio(&op.to_pod_created, &b.latency)),
                },
                "p99_pod_running_to_browser_running_to_ideal_client": ratio_json(p99_ratio(&op.propagation, &ideal.propagation)),
                "kube_apiserver_cpu_per_browser": {
                    "to_ideal_client": ratio_json(server_ratio(ideal.server_per_browser())),
                    "to_bare_pods": ratio_json(server_ratio(b.server_cpu.map(|c| per_object(&c, b.pods)))),
                },
            },
            "cost_per_browser": {
                "writes": c.writes.to_json(n),
                "writes_until_running": c.writes_running.to_json(n),
                "duplicates": c.duplicates,
                "reconciles": round(c.reconciles / n),
                "reconciles_until_running": round(c.reconciles_running / n),
                "requests_total": c.requests,
                "operator_cpu_ms_until_running": round(op.client_cpu.operator.as_secs_f64() * 1000.0 / n),
                "operator_cpu_ms_deleting": round(c.cpu_delete.operator.as_secs_f64() * 1000.0 / n),
                "benchmark_process_cpu_ms_until_running": round(op.client_cpu.process.as_secs_f64() * 1000.0 / n),
                "benchmark_process_cpu_ms_deleting": round(c.cpu_delete.process.as_secs_f64() * 1000.0 / n),
                "operator_process_memory_bytes": c.memory.map(|m| json!({"rss": m.rss, "peak": m.peak})),
                "pods_left_to_the_garbage_collector": c.collected,
            },
            "targets": targets,
            "idle": idle,
        })
    }
}

impl PathToPod {
    /// Each step: its row label, its JSON key, its figures.
    fn steps(&self) -> [(&'static str, &'static str, &Option<Summary>); 5] {
        [
            (
                "Browser created -> metadata apply sent",
                "created_to_metadata_apply_sent",
                &self.to_metadata_sent,
            ),
            (
                "metadata apply (round trip)",
                "metadata_apply_round_trip",
                &self.metadata_round_trip,
            ),
            (
                "metadata answered -> pod apply sent",
                "metadata_answered_to_pod_apply_sent",
                &self.metadata_to_pod_sent,
            ),
            (
                "Browser created -> pod apply sent",
                "created_to_pod_apply_sent",
                &self.to_pod_sent,
            ),
            (
                "pod apply (round trip)",
                "pod_apply_round_trip",
                &self.pod_round_trip,
            ),
        ]
    }
}

/// The steps of a client's path to its pods, one latency row each.
fn path_rows(out: &mut String, client: &str, path: &Option<PathToPod>) {
    for (label, _, summary) in path.iter().flat_map(PathToPod::steps) {
        summary_row(out, &format!("{client}: {label}"), summary);
    }
}

fn path_json(path: &Option<PathToPod>) -> Value {
    path.as_ref().map_or(Value::Null, |p| {
        p.steps()
            .into_iter()
            .map(|(_, key, summary)| (key.to_string(), summary_json(summary)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    })
}

fn flow_json(f: &Flow) -> Value {
    let n = f.browsers.max(1) as f64;
    json!({
        "browsers": f.browsers,
        "latency": {
            "browser_create": summary_json(&f.create_latency),
            "created_to_pod_created": summary_json(&f.to_pod_created),
            "path_to_pod": path_json(&f.path),
            "pod_running_to_browser_running": summary_json(&f.propagation),
            "created_to_running": summary_json(&f.end_to_end),
        },
        "pods_seen": f.pods_seen,
        "browsers_seen_running": f.seen_running,
        "share_seen_running": round(f.seen_running as f64 / n),
        "throughput": {
            "pods_created_per_second": round(f.throughput_pods()),
            "browsers_running_per_second": round(f.throughput_running()),
            "to_last_pod_created_ms": ms(f.to_pods),
            "to_last_running_ms": ms(f.to_running),
        },
        "server_cpu": server_json(&f.server_cpu),
        "server_cpu_per_browser": server_json(&f.server_per_browser()),
        "client_cpu": cpu_json(&f.client_cpu),
        "client_cpu_ms_per_browser": round(f.client_cpu.operator.as_secs_f64() * 1000.0 / n),
    })
}

fn per_browser_json(map: &BTreeMap<String, u64>, n: usize) -> Value {
    let by: serde_json::Map<String, Value> = map
        .iter()
        .map(|(k, v)| (k.clone(), json!(round(per(*v as f64, n)))))
        .collect();
    json!({
        "total": round(per(map.values().sum::<u64>() as f64, n)),
        "by_verb_and_resource": by,
    })
}

fn idle_json(i: &Idle) -> Value {
    let count = i.browsers.max(1) as f64;
    let window = i.window.as_secs_f64().max(f64::EPSILON);
    let memory = match &i.memory {
        IdleMemory::InProcess {
            heap_before,
            heap_after,
            heap_peak,
            rss_before,
            rss_after,
            rss_peak,
        } => {
            let heap = delta(*heap_after as f64, *heap_before as f64);
            let rss = delta(*rss_after as f64, *rss_before as f64);
            json!({
                "heap_bytes": {
                    "before": heap_before, "after": heap_after, "peak": heap_peak,
                    "growth": heap, "growth_per_browser": round(heap / count),
                    "peak_growth": delta(*heap_peak as f64, *heap_before as f64),
                },
                "rss_bytes": {
                    "before": rss_before, "after": rss_after, "peak_since_restart": rss_peak,
                    "growth": rss, "growth_per_browser": round(rss / count),
                    "peak_growth": rss_peak.map(|p| delta(p as f64, *rss_before as f64)),
                },
            })
        }
        IdleMemory::Process(m) => json!({
            "operator_process_rss_bytes": {"rss": m.rss, "peak_since_start": m.peak},
        }),
    };
    let mut value = json!({
        "browsers": i.browsers,
        "ready_ms": ms(i.sync),
        "startup_cpu": cpu_json(&i.startup_cpu),
        "writes": i.writes.to_json(1.0),
        "idle_window_ms": ms(i.window),
        "idle_reconciles": i.idle_reconciles,
        "idle_cpu": cpu_json(&i.idle_cpu),
        "idle_cpu_fraction_of_a_core": {
            "operator": round(i.idle_cpu.operator.as_secs_f64() / window),
            "process": round(i.idle_cpu.process.as_secs_f64() / window),
        },
    });
    if let (Some(v), Value::Object(m)) = (value.as_object_mut(), memory) {
        v.extend(m);
    }
    if let (Some(v), Some(m)) = (value.as_object_mut(), &i.provisioned) {
        v.insert(
            "provisioning_process_rss_bytes".into(),
            json!({"rss": m.rss, "peak_since_start": m.peak}),
        );
    }
    value
}
