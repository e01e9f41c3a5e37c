//! The performance targets, checked against one run's figures. Information only: the
//! benchmark reports each as met or missed and never fails on one.

use std::time::Duration;

/// The figures the targets are about. Pairs are (operator, ideal client).
pub struct Figures {
    /// Browsers created at a steady `--rate` rather than all at once.
    pub steady: bool,
    /// Browsers per second with their pod created.
    pub throughput: (f64, f64),
    /// kube-apiserver CPU per Browser; `None` when the server's process was not measured.
    pub apiserver_cpu: Option<(Duration, Duration)>,
    /// p99 of Browser created → pod created.
    pub to_pod_p99: (Option<Duration>, Option<Duration>),
    /// p99 of pod Running → Browser Running with its pod IP.
    pub propagation_p99: (Option<Duration>, Option<Duration>),
    /// Browsers seen Running, of how many.
    pub seen_running: (usize, usize),
    /// The operator's writes to Browsers and pods per session, Events apart.
    pub writes_per_session: f64,
    /// Writes beyond what the path needs, whole run; `None` when not recorded.
    pub duplicates: Option<u64>,
    pub events_per_session: f64,
    /// Restarts of the operator's process over Running Browsers (with `--operator-binary`).
    pub restarts: Vec<Restart>,
}

/// A restart of the operator's process over Running Browsers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Restart {
    pub browsers: usize,
    /// Peak RSS since the start, the start-up lists included.
    pub peak_rss: u64,
    /// Until every Browser was reconciled once.
    pub ready: Duration,
}

/// One target: what, the goal, the figure measured, and whether it is met (`None`: not
/// measured in this run).
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub what: &'static str,
    pub goal: String,
    pub measured: String,
    pub met: Option<bool>,
}

impl Target {
    pub fn verdict(&self) -> &'static str {
        match self.met {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "-",
        }
    }
}

/// `x / of`; `None` when `of` is not positive.
pub fn ratio(x: f64, of: f64) -> Option<f64> {
    (of > 0.0).then(|| x / of)
}

/// Targets in a burst are relative to the ideal client in the same run; at a steady rate,
/// latencies have an absolute bound.
const THROUGHPUT_SHARE: f64 = 0.8;
const COST_FACTOR: f64 = 1.25;
const STEADY_LATENCY: Duration = Duration::from_millis(50);
const WRITES_PER_SESSION: f64 = 8.0;
const EVENTS_PER_SESSION: f64 = 3.0;
const MIB: u64 = 1024 * 1024;
/// Peak RSS of a restart over this many Running Browsers, at most (each a target of its own).
const PEAK_RSS: [(usize, u64, &str); 2] = [
    (5000, 64 * MIB, "peak RSS, restart over 5000"),
    (50_000, 256 * MIB, "peak RSS, restart over 50000"),
];
/// A restart over this many Running Browsers is ready within `READY`.
const READY_BROWSERS: usize = 50_000;
const READY: Duration = Duration::from_secs(30);

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// A figure of the operator against `factor` × the ideal client's (lower is better).
fn relative(what: &'static str, pair: (Option<Duration>, Option<Duration>)) -> Target {
    let goal = format!("<= {COST_FACTOR} x ideal client");
    match pair {
        (Some(op), Some(ideal)) => {
            let r = ratio(op.as_secs_f64(), ideal.as_secs_f64());
            Target {
                what,
                goal,
                measured: match r {
                    Some(r) => format!("{r:.2} x ({} vs {})", ms(op), ms(ideal)),
                    None => format!("{} vs {}", ms(op), ms(ideal)),
                },
                met: Some(r.map_or(op.is_zero(), |r| r <= COST_FACTOR)),
            }
        }
        _ => Target {
            what,
            goal,
            measured: "no samples".into(),
            met: None,
        },
    }
}

fn absolute(what: &'static str, p99: Option<Duration>) -> Target {
    Target {
        what,
        goal: format!("<= {}", ms(STEADY_LATENCY)),
        measured: p99.map_or("no samples".into(), ms),
        met: p99.map(|p| p <= STEADY_LATENCY),
    }
}

pub fn evaluate(f: &Figures) -> Vec<Target> {
    let mut targets = Vec::new();
    if !f.steady {
        let (op, ideal) = f.throughput;
        let r = ratio(op, ideal);
        targets.push(Target {
            what: "Browsers/s with their pod created",
            goal: format!(">= {THROUGHPUT_SHARE} x ideal client"),
            measured: match r {
                Some(r) => format!("{r:.2} x ({op:.1}/s vs {ideal:.1}/s)"),
                None => format!("{op:.1}/s vs {ideal:.1}/s"),
            },
            met: r.map(|r| r >= THROUGHPUT_SHARE),
        });
    }
    targets.push(match f.apiserver_cpu {
        Some((op, ideal)) => {
            let mut t = relative("kube-apiserver CPU per Browser", (Some(op), Some(ideal)));
            if ideal.is_zero() {
                // Below the 10 ms resolution of /proc for the whole phase: no verdict.
                t.met = None;
            }
            t
        }
        None => Target {
            what: "kube-apiserver CPU per Browser",
            goal: format!("<= {COST_FACTOR} x ideal client"),
            measured: "not measured (the benchmark did not start the API server)".into(),
            met: None,
        },
    });
    if f.steady {
        targets.push(absolute(
            "p99 Browser created -> pod created",
            f.to_pod_p99.0,
        ));
        targets.push(absolute(
            "p99 pod Running -> Browser Running",
            f.propagation_p99.0,
        ));
    } else {
        targets.push(relative("p99 Browser created -> pod created", f.to_pod_p99));
        targets.push(relative(
            "p99 pod Running -> Browser Running",
            f.propagation_p99,
        ));
    }
    let (running, of) = f.seen_running;
    targets.push(Target {
        what: "Browsers seen Running",
        goal: "all".into(),
        measured: format!("{running} of {of}"),
        met: Some(running == of),
    });
    targets.push(Target {
        what: "API writes per session, Events apart",
        goal: format!("<= {WRITES_PER_SESSION}"),
        measured: format!("{:.2}", f.writes_per_session),
        met: Some(f.writes_per_session <= WRITES_PER_SESSION),
    });
    targets.push(Target {
        what: "duplicate writes",
        goal: "none".into(),
        measured: f.duplicates.map_or(
            "not measured (no request log of a separate process)".into(),
            |d| d.to_string(),
        ),
        met: f.duplicates.map(|d| d == 0),
    });
    targets.push(Target {
        what: "Events per session",
        goal: format!("<= {EVENTS_PER_SESSION}"),
        measured: format!("{:.2}", f.events_per_session),
        met: Some(f.events_per_session <= EVENTS_PER_SESSION),
    });
    for (browsers, limit, what) in PEAK_RSS {
        targets.push(on_restarts(
            what,
            format!("<= {} MiB", limit / MIB),
            (&f.restarts, browsers, |r| r.peak_rss),
            |peak| format!("{:.1} MiB", peak as f64 / MIB as f64),
            |peak| peak <= limit,
        ));
    }
    targets.push(on_restarts(
        "ready after a restart over 50000",
        format!("<= {} s", READY.as_secs()),
        (&f.restarts, READY_BROWSERS, |r| r.ready),
        |ready| format!("{:.1} s", ready.as_secs_f64()),
        |ready| ready <= READY,
    ));
    targets
}

/// A target on the worst figure (`figure`, the largest) of the restarts over exactly
/// `browsers` Running Browsers; not measured without one.
fn on_restarts<T: Ord + Copy>(
    what: &'static str,
    goal: String,
    (restarts, browsers, figure): (&[Restart], usize, fn(&Restart) -> T),
    show: impl Fn(T) -> String,
    met: impl Fn(T) -> bool,
) -> Target {
    let worst = restarts
        .iter()
        .filter(|r| r.browsers == browsers)
        .map(figure)
        .max();
    Target {
        what,
        goal,
        measured: worst.map_or_else(
            || format!("not measured (needs --operator-binary and --idle {browsers})"),
            show,
        ),
        met: worst.map(met),
    }
}
