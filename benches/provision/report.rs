//! The results: a table for people and JSON for tools.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::measure::{self, Cpu, Summary};

pub struct Setup {
    pub backend: String,
    pub browsers: usize,
    pub concurrency: usize,
    pub rate: Option<f64>,
    pub step_delay: Duration,
    pub max_workers: Option<u16>,
    /// Worker threads of each runtime (operator, benchmark).
    pub threads: usize,
    pub smoke: bool,
}

pub struct Baseline {
    pub pods: usize,
    pub elapsed: Duration,
    pub throughput: f64,
    pub latency: Option<Summary>,
}

pub struct Run {
    pub browsers: usize,
    pub rate: Option<f64>,
    /// The benchmark's Browser create, sent → answered.
    pub create_latency: Option<Summary>,
    /// Browser create sent → the operator sent the pod's create.
    pub to_pod_create: Option<Summary>,
    /// Browsers whose pod create the operator's client never sent.
    pub missing_pod_create: usize,
    /// Pod seen Running → Browser seen Running with its pod IP.
    pub propagation: Option<Summary>,
    /// Browser create sent → Browser seen Running with its pod IP.
    pub end_to_end: Option<Summary>,
    /// First Browser create sent → last pod create sent.
    pub to_pods: Duration,
    /// First Browser create sent → last Browser Running.
    pub to_running: Duration,
    pub throughput_pods: f64,
    pub throughput_running: f64,
    /// Deletion of every Browser started → the last Browser, and the last pod, gone.
    pub delete_browsers: Option<Duration>,
    pub delete_pods: Option<Duration>,
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

fn label<'a>(labels: &'a str, key: &str) -> &'a str {
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
    /// Every request the operator's client sent, by `verb resource`.
    pub requests: BTreeMap<String, u64>,
    /// CPU from the first Browser create to the last Browser Running, and during deletion.
    pub cpu_provision: Cpu,
    pub cpu_delete: Cpu,
}

impl Cost {
    pub fn from_metrics(
        running: &str,
        end: &str,
        requests: BTreeMap<String, u64>,
        cpu_provision: Cpu,
        cpu_delete: Cpu,
    ) -> Self {
        let reconciles =
            |text: &str| measure::sum(text, "browser_controller_reconciles_total", |_| true);
        Cost {
            writes_running: WriteCounts::from_metrics(running),
            writes: WriteCounts::from_metrics(end),
            reconciles_running: reconciles(running),
            reconciles: reconciles(end),
            requests,
            cpu_provision,
            cpu_delete,
        }
    }
}

impl Cost {
    /// The operator's requests for Browsers, pods and Events (reads and writes, no lists or
    /// watches), and the rest: discovery, permission checks, lists, watches, BrowserConfig
    /// validation — a cost per start or per config, not per Browser.
    fn requests_split(&self) -> (BTreeMap<String, f64>, BTreeMap<String, u64>) {
        let mut per_browser = BTreeMap::new();
        let mut fixed = BTreeMap::new();
        for (key, count) in &self.requests {
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
    /// Live heap bytes with the operator stopped, at the end of the idle window, and at the
    /// most since the restart.
    pub heap_before: usize,
    pub heap_after: usize,
    pub heap_peak: usize,
    pub rss_before: u64,
    pub rss_after: u64,
    /// Peak RSS since the restart; `None` when the kernel did not reset the peak.
    pub rss_peak: Option<u64>,
}

pub struct Report {
    pub setup: Setup,
    pub baseline: Baseline,
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

fn ratio(x: f64, baseline: f64) -> f64 {
    if baseline > 0.0 { x / baseline } else { 0.0 }
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
            "  {name:<44}{:>9}{:>9}{:>9}{:>9}{:>7}",
            fmt_ms(s.p50),
            fmt_ms(s.p90),
            fmt_ms(s.p99),
            fmt_ms(s.max),
            s.count
        ),
        None => writeln!(out, "  {name:<44}{:>9}", "-"),
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

impl Report {
    pub fn table(&self) -> String {
        let mut out = String::new();
        let s = &self.setup;
        let b = &self.baseline;
        let r = &self.run;
        let c = &self.cost;
        let n = r.browsers;
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
        let _ = writeln!(
            out,
            "  kubelet       simulator, {} per step (bind, Pending, Running)",
            fmt_ms(s.step_delay) + " ms"
        );
        let _ = writeln!(
            out,
            "  load          {n} Browsers, client concurrency {}, {rate}; operator --max-workers {workers}; {} worker threads each for operator and benchmark",
            s.concurrency, s.threads
        );

        let _ = writeln!(
            out,
            "\nbaseline: {} bare pods of the same shape, server-side apply, concurrency {}",
            b.pods, s.concurrency
        );
        let _ = writeln!(
            out,
            "  pod create throughput   {:.1} pods/s ({} pods in {} ms)",
            b.throughput,
            b.pods,
            fmt_ms(b.elapsed)
        );

        let _ = writeln!(
            out,
            "\n{:<46}{:>9}{:>9}{:>9}{:>9}{:>7}",
            "latency (ms)", "p50", "p90", "p99", "max", "n"
        );
        summary_row(&mut out, "baseline pod create (round trip)", &b.latency);
        summary_row(&mut out, "Browser create (round trip)", &r.create_latency);
        summary_row(
            &mut out,
            "Browser created -> pod create sent",
            &r.to_pod_create,
        );
        summary_row(
            &mut out,
            "pod Running -> Browser Running with podIP",
            &r.propagation,
        );
        summary_row(
            &mut out,
            "Browser created -> Running (end to end)",
            &r.end_to_end,
        );
        if r.missing_pod_create > 0 {
            let _ = writeln!(
                out,
                "  ({} Browsers without a recorded pod create)",
                r.missing_pod_create
            );
        }

        let _ = writeln!(
            out,
            "\n{:<46}{:>12}{:>12}",
            "throughput", "Browsers/s", "x baseline"
        );
        let _ = writeln!(
            out,
            "  {:<44}{:>12.1}{:>12.2}",
            format!("to every pod create sent ({} ms)", fmt_ms(r.to_pods)),
            r.throughput_pods,
            ratio(r.throughput_pods, b.throughput)
        );
        let _ = writeln!(
            out,
            "  {:<44}{:>12.1}{:>12.2}",
            format!("to every Browser Running ({} ms)", fmt_ms(r.to_running)),
            r.throughput_running,
            ratio(r.throughput_running, b.throughput)
        );

        let gone = |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{} ms", fmt_ms(d)));
        let _ = writeln!(out, "\ndeleting all {n} Browsers");
        let _ = writeln!(out, "  until zero Browsers     {}", gone(r.delete_browsers));
        let _ = writeln!(out, "  until zero pods         {}", gone(r.delete_pods));

        let _ = writeln!(
            out,
            "\ncost per Browser (created, Running, deleted by the client)"
        );
        let _ = writeln!(
            out,
            "  API writes to Browsers and pods     {:.2}  [{}]",
            per(c.writes.total(), n),
            breakdown(&c.writes.lifecycle, n)
        );
        let _ = writeln!(
            out,
            "    of them until Running            {:.2}",
            per(c.writes_running.total(), n)
        );
        let _ = writeln!(
            out,
            "  Events                              {:.2}",
            per(c.writes.events, n)
        );
        let _ = writeln!(
            out,
            "  reconciles                          {:.2}  ({:.2} until Running)",
            per(c.reconciles, n),
            per(c.reconciles_running, n)
        );
        let (per_browser, fixed) = c.requests_split();
        let _ = writeln!(
            out,
            "  requests to Browsers, pods, Events  {:.2}  [{}]",
            per(per_browser.values().fold(0.0, |a, b| a + b), n),
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
        let _ = writeln!(
            out,
            "  operator CPU                        {:.2} ms until Running, {:.2} ms deleting (whole process: {:.2} / {:.2} ms)",
            per(c.cpu_provision.operator.as_secs_f64() * 1000.0, n),
            per(c.cpu_delete.operator.as_secs_f64() * 1000.0, n),
            per(c.cpu_provision.process.as_secs_f64() * 1000.0, n),
            per(c.cpu_delete.process.as_secs_f64() * 1000.0, n),
        );

        if !self.idle.is_empty() {
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
            for i in &self.idle {
                let heap = delta(i.heap_after as f64, i.heap_before as f64);
                let window = i.window.as_secs_f64().max(f64::EPSILON);
                let _ = writeln!(
                    out,
                    "  {:>6}{:>10}{:>8}{:>8}{:>8}{:>11.2}{:>13.2}{:>11.2}{:>10.2}{:>11}{:>10.1}{:>12.2}%{:>12.2}%",
                    i.browsers,
                    fmt_ms(i.sync),
                    i.writes.total(),
                    i.writes.config_status,
                    i.writes.events,
                    mib(heap),
                    per(heap, i.browsers) / 1024.0,
                    mib(delta(i.heap_peak as f64, i.heap_before as f64)),
                    mib(delta(i.rss_after as f64, i.rss_before as f64)),
                    i.rss_peak.map_or("-".to_string(), |p| format!(
                        "{:.2}",
                        mib(delta(p as f64, i.rss_before as f64))
                    )),
                    mib(i.rss_after as f64),
                    100.0 * i.idle_cpu.operator.as_secs_f64() / window,
                    100.0 * i.idle_cpu.process.as_secs_f64() / window,
                );
            }
            for pair in self.idle.windows(2) {
                let (a, b) = (&pair[0], &pair[1]);
                let more = (b.browsers - a.browsers) as f64;
                let growth = |x: f64, y: f64| (x - y) / more / 1024.0;
                let _ = writeln!(
                    out,
                    "  from N={} to N={}: heap +{:.2} KiB, RSS +{:.2} KiB per additional Browser",
                    a.browsers,
                    b.browsers,
                    growth(
                        b.heap_after as f64 - b.heap_before as f64,
                        a.heap_after as f64 - a.heap_before as f64
                    ),
                    growth(
                        b.rss_after as f64 - b.rss_before as f64,
                        a.rss_after as f64 - a.rss_before as f64
                    ),
                );
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
        out
    }

    pub fn to_json(&self) -> Value {
        let s = &self.setup;
        let b = &self.baseline;
        let r = &self.run;
        let c = &self.cost;
        let n = r.browsers.max(1) as f64;
        let idle: Vec<Value> = self
            .idle
            .iter()
            .map(|i| {
                let heap = delta(i.heap_after as f64, i.heap_before as f64);
                let count = i.browsers.max(1) as f64;
                json!({
                    "browsers": i.browsers,
                    "ready_ms": ms(i.sync),
                    "startup_cpu": cpu_json(&i.startup_cpu),
                    "writes": i.writes.to_json(1.0),
                    "idle_window_ms": ms(i.window),
                    "idle_reconciles": i.idle_reconciles,
                    "idle_cpu": cpu_json(&i.idle_cpu),
                    "idle_cpu_fraction_of_a_core": {
                        "operator": round(i.idle_cpu.operator.as_secs_f64() / i.window.as_secs_f64().max(f64::EPSILON)),
                        "process": round(i.idle_cpu.process.as_secs_f64() / i.window.as_secs_f64().max(f64::EPSILON)),
                    },
                    "heap_bytes": {
                        "before": i.heap_before, "after": i.heap_after, "peak": i.heap_peak,
                        "growth": heap, "growth_per_browser": round(heap / count),
                        "peak_growth": delta(i.heap_peak as f64, i.heap_before as f64),
                    },
                    "rss_bytes": {
                        "before": i.rss_before, "after": i.rss_after, "peak_since_restart": i.rss_peak,
                        "growth": delta(i.rss_after as f64, i.rss_before as f64),
                        "growth_per_browser": round(delta(i.rss_after as f64, i.rss_before as f64) / count),
                        "peak_growth": i.rss_peak.map(|p| delta(p as f64, i.rss_before as f64)),
                    },
                })
            })
            .collect();
        json!({
            "setup": {
                "api_server": s.backend,
                "browsers": s.browsers,
                "concurrency": s.concurrency,
                "rate_per_second": s.rate,
                "kubelet_step_delay_ms": ms(s.step_delay),
                "operator_max_workers": s.max_workers,
                "worker_threads": s.threads,
                "smoke": s.smoke,
            },
            "baseline": {
                "pods": b.pods,
                "elapsed_ms": ms(b.elapsed),
                "pod_create_throughput_per_second": round(b.throughput),
                "pod_create_latency": summary_json(&b.latency),
            },
            "operator": {
                "browsers": r.browsers,
                "rate_per_second": r.rate,
                "latency": {
                    "browser_create": summary_json(&r.create_latency),
                    "created_to_pod_create_sent": summary_json(&r.to_pod_create),
                    "pod_running_to_browser_running": summary_json(&r.propagation),
                    "created_to_running": summary_json(&r.end_to_end),
                },
                "missing_pod_create": r.missing_pod_create,
                "throughput": {
                    "to_pod_create_per_second": round(r.throughput_pods),
                    "to_pod_create_ratio_to_baseline": round(ratio(r.throughput_pods, b.throughput)),
                    "to_running_per_second": round(r.throughput_running),
                    "to_running_ratio_to_baseline": round(ratio(r.throughput_running, b.throughput)),
                    "to_pod_create_ms": ms(r.to_pods),
                    "to_running_ms": ms(r.to_running),
                },
                "delete": {
                    "to_zero_browsers_ms": r.delete_browsers.map(ms),
                    "to_zero_pods_ms": r.delete_pods.map(ms),
                },
            },
            "cost_per_browser": {
                "writes": c.writes.to_json(n),
                "writes_until_running": c.writes_running.to_json(n),
                "reconciles": round(c.reconciles / n),
                "reconciles_until_running": round(c.reconciles_running / n),
                "requests_total": c.requests,
                "operator_cpu_ms_until_running": round(c.cpu_provision.operator.as_secs_f64() * 1000.0 / n),
                "operator_cpu_ms_deleting": round(c.cpu_delete.operator.as_secs_f64() * 1000.0 / n),
                "process_cpu_ms_until_running": round(c.cpu_provision.process.as_secs_f64() * 1000.0 / n),
                "process_cpu_ms_deleting": round(c.cpu_delete.process.as_secs_f64() * 1000.0 / n),
            },
            "idle": idle,
        })
    }
}
