//! Chaos soak (docs/architecture.md, "The soak"): a steady mixed load of Browsers for a long
//! time against a real control plane (`KUBEBUILDER_ASSETS`) or the API server double
//! (`--smoke`), two operator replicas with leader election, a seeded random fault every
//! 30–120 s, and invariants judged throughout from the API server's own records (watches that
//! relist like an informer, the audit log) and samples of the replicas, never from the
//! operator's word. Prints a timeline of faults, checks and violations, each violation with the
//! Browser's recorded history; exits non-zero when an invariant broke.
//!
//! ```sh
//! KUBEBUILDER_ASSETS=$HOME/k8s/1.24 cargo bench --bench soak -- --duration 30m --seed 7
//! cargo test --bench soak -- --smoke        # 60 s on the double
//! ```

use testkit as support;

#[path = "soak/faults.rs"]
mod faults;
#[path = "soak/load.rs"]
mod load;
#[path = "soak/system.rs"]
mod system;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use browser_controller::duration;
use clap::Parser;
use rand_core::SeedableRng;
use rand_xorshift::XorShiftRng;
use serde_json::{Value, json};

use support::controlplane::Assets;
use support::history::Seen;
use support::invariants::{self, Bounds, Judgement, Span, Violation};
use system::System;

#[derive(Debug, Parser)]
#[command(
    name = "soak",
    about = "Random faults under a steady load of Browsers, invariants checked all the time"
)]
struct Args {
    /// How long the load and the faults last (the end waits for the last sessions besides).
    #[arg(long, default_value = "30m", value_parser = duration::parse)]
    duration: Duration,
    /// Seeds the faults and the sessions: the same seed replays the same run.
    #[arg(long)]
    seed: Option<u64>,
    /// Browsers created per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// 60 seconds on the API server double at 5 Browsers a second, a fault every 6–10 s,
    /// each a quarter as long as in a full run.
    #[arg(long)]
    smoke: bool,
    /// Write the report as JSON to this file too; when an invariant broke, the replicas' logs
    /// go to the directory of the same name ending in `.logs`.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Passed by `cargo bench` to every bench binary; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error("setting up: {0}")]
    Setup(String),
    #[error("a fault could not be made: {0}")]
    Fault(String),
    #[error("writing the report: {0}")]
    Report(#[from] std::io::Error),
}

impl SoakError {
    fn setup<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> SoakError {
        move |e| SoakError::Setup(format!("{what}: {e}"))
    }
}

/// The bounds of the invariants (docs/architecture.md, "The soak").
fn bounds() -> Bounds {
    Bounds {
        pod: Duration::from_secs(20),
        status: Duration::from_secs(15),
        orphan: system::DELETION_TIMEOUT + Duration::from_secs(15),
        // The longest session (20 s), its pod and status bounds, and the retention of Browsers
        // that ended while the API server was away (60 s).
        lifetime: Duration::from_secs(140),
        ready_again: system::TAKEOVER + Duration::from_secs(10),
        rss: 256 << 20,
    }
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    if args.smoke {
        args.duration = Duration::from_secs(60);
        args.rate = 5.0;
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("soak: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(soak(&args, seed)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Minutes and seconds since the start.
fn clock(t0: Instant, at: Instant) -> String {
    // Rounded to tenths first, so that 59.96 s reads 1:00.0, not 0:60.0.
    let tenths = (at.saturating_duration_since(t0).as_millis() + 50) / 100;
    format!(
        "{:>2}:{:02}.{}",
        tenths / 600,
        tenths % 600 / 10,
        tenths % 10
    )
}

/// Runs the soak; `Ok(true)` when every invariant held.
async fn soak(args: &Args, seed: u64) -> Result<bool, SoakError> {
    let assets = if args.smoke {
        None
    } else {
        Assets::from_env().map_err(SoakError::setup("KUBEBUILDER_ASSETS"))?
    };
    let system = System::start(assets.as_ref()).await?;
    let t0 = Instant::now();
    println!(
        "soak: seed {seed}, {} at {}/s on {}; partitions: {}",
        duration::format(args.duration),
        args.rate,
        system.describe(),
        system.partition_kind()
    );
    create_config(&system).await?;
    let until = t0 + args.duration;
    let bounds = bounds();
    let counts = Arc::new(load::Counts::default());
    let mut fault_rng = XorShiftRng::seed_from_u64(seed);
    let mut load_rng = XorShiftRng::seed_from_u64(seed ^ 0x5eed_10ad);
    let kinds = faults::available(&system);
    let done = std::sync::Mutex::new(Vec::<faults::Done>::new());
    // The fault under way: an interim check holds its deadlines too, as the final one does.
    let ongoing = std::sync::Mutex::new(None::<Instant>);

    let load = load::run(&system, &mut load_rng, args.rate, until, counts.clone());
    let chaos = async {
        loop {
            tokio::time::sleep(faults::gap(&mut fault_rng, args.smoke)).await;
            if Instant::now() >= until {
                return Ok::<(), SoakError>(());
            }
            let planned = faults::plan(&mut fault_rng, &kinds, args.smoke);
            let at = Instant::now();
            println!("{} fault: {} …", clock(t0, at), planned.kind.name());
            *lock(&ongoing) = Some(at);
            let fault = faults::inject(&system, &planned).await?;
            println!(
                "{} fault: {} over{}",
                clock(t0, Instant::now()),
                planned.kind.name(),
                if fault.detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", fault.detail)
                }
            );
            lock(&done).push(fault);
            *lock(&ongoing) = None;
        }
    };
    let watch = async {
        let mut next_check = t0 + Duration::from_secs(60);
        while Instant::now() < until {
            system.supervise()?;
            system.sample().await;
            if Instant::now() >= next_check {
                let mut spans = spans(&lock(&done));
                spans.extend(lock(&ongoing).map(|start| Span { start, end: None }));
                let judged =
                    system.with_history(|h| invariants::judge(h, &spans, &bounds, Instant::now()));
                println!(
                    "{} check: {} Browsers, {} ended ({} while the watch was away), {} violations",
                    clock(t0, Instant::now()),
                    judged.browsers,
                    judged.ended,
                    judged.ended_while_away,
                    judged.violations.len()
                );
                next_check += Duration::from_secs(60);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok::<(), SoakError>(())
    };
    let (_, chaos, watch) = tokio::join!(load, chaos, watch);
    chaos?;
    watch?;

    // The last sessions end: until nothing is left, or the lifetime bound passed.
    let drain_until = Instant::now() + bounds.lifetime;
    loop {
        system.supervise()?;
        system.sample().await;
        if system.with_history(nothing_left) || Instant::now() >= drain_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let done = lock(&done).clone();
    let spans = spans(&done);
    let history = system.history();
    let mut judged = invariants::judge(&history, &spans, &bounds, Instant::now());
    for (pod, creates) in system.pod_creates() {
        if creates > 1 {
            judged.violations.push(Violation::TwoPods {
                browser: pod,
                pods: vec![format!("{creates} creates in the API server's records")],
            });
        }
    }
    judged.violations.extend(invariants::judge_readiness(
        &system.ready_samples(),
        &spans,
        &bounds,
    ));
    let peaks = system.rss_peaks();
    judged
        .violations
        .extend(invariants::judge_memory(&peaks, &bounds));
    let held = judged.violations.is_empty();
    let report = report(
        args, seed, t0, &system, &done, &judged, &history, &peaks, &counts,
    );
    println!("{}", report.text);
    if !held {
        println!("{}", system.logs(40));
        if let Some(path) = &args.json {
            let dir = path.with_extension("logs");
            system.keep_logs(&dir)?;
            println!("the replicas' logs are in {}", dir.display());
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(
            path,
            serde_json::to_string_pretty(&report.json).unwrap_or_default(),
        )?;
    }
    system.stop();
    Ok(held)
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn spans(done: &[faults::Done]) -> Vec<Span> {
    done.iter().map(|f| f.span.clone()).collect()
}

/// Whether the history's last word on every Browser and pod is its deletion.
fn nothing_left(history: &[Seen]) -> bool {
    let mut live = std::collections::BTreeMap::new();
    for seen in history {
        if let Some(name) = seen.object["metadata"]["name"].as_str() {
            live.insert((seen.kind, name), !seen.deleted);
        }
    }
    !live.is_empty() && !live.values().any(|l| *l)
}

/// The BrowserConfig of the bundled example, in the soak's namespace; waits for it to be valid.
async fn create_config(system: &System) -> Result<(), SoakError> {
    use kube::api::{Api, DynamicObject, PostParams};
    let path = support::repo().join("testdata/configs/single-sidecar.yaml");
    let mut config = browser_controller::manifest::read_file(&path)
        .map_err(SoakError::setup("BrowserConfig"))?
        .into_iter()
        .next()
        .ok_or_else(|| SoakError::Setup(format!("{} is empty", path.display())))?;
    config["metadata"]["namespace"] = json!(system::NAMESPACE);
    let name = config["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ar = support::kinds::config_resource(browser_controller::api::crd::Layout::Default);
    let api: Api<DynamicObject> =
        Api::namespaced_with(system.admin.clone(), system::NAMESPACE, &ar);
    let object: DynamicObject =
        serde_json::from_value(config).map_err(SoakError::setup("BrowserConfig"))?;
    api.create(&PostParams::default(), &object)
        .await
        .map_err(SoakError::setup("BrowserConfig"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let valid = api.get(&name).await.is_ok_and(|c| {
            c.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        });
        if valid {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(SoakError::Setup(format!(
                "the BrowserConfig {name} was not ready within a minute:\n{}",
                system.logs(20)
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

struct Report {
    text: String,
    json: Value,
}

/// The timeline of faults, the replicas' own exits and the verdict, each violation with the
/// recorded history of its Browser.
#[allow(clippy::too_many_arguments)]
fn report(
    args: &Args,
    seed: u64,
    t0: Instant,
    system: &System,
    done: &[faults::Done],
    judged: &Judgement,
    history: &[Seen],
    peaks: &std::collections::BTreeMap<String, u64>,
    counts: &load::Counts,
) -> Report {
    let mut timeline: Vec<(Instant, String)> = done
        .iter()
        .map(|f| {
            let end = f.span.end.map(|e| clock(t0, e)).unwrap_or_default();
            let detail = if f.detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", f.detail)
            };
            (
                f.span.start,
                format!("fault {}{detail}, until {end}", f.kind.name()),
            )
        })
        .chain(system.notes().into_iter().map(|n| (n.at, n.text)))
        .collect();
    timeline.sort_by_key(|(at, _)| *at);
    let mut text = String::from("\ntimeline:\n");
    for (at, what) in &timeline {
        text.push_str(&format!("  {} {what}\n", clock(t0, *at)));
    }
    let created = counts.created.load(Ordering::Relaxed);
    text.push_str(&format!(
        "\n{} Browsers created ({} creates not taken while the API server was away, {} deleted by their client), {} seen, {} ended ({} while the soak's watch was away); {} faults; peak RSS {}\n",
        created,
        counts.not_created.load(Ordering::Relaxed),
        counts.deleted_by_client.load(Ordering::Relaxed),
        judged.browsers,
        judged.ended,
        judged.ended_while_away,
        done.len(),
        peaks
            .iter()
            .map(|(r, b)| format!("{r} {:.1} MiB", *b as f64 / (1024.0 * 1024.0)))
            .collect::<Vec<_>>()
            .join(", "),
    ));
    let mut violations = Vec::new();
    for violation in &judged.violations {
        text.push_str(&format!("\nviolation: {violation}\n"));
        let lines: Vec<String> = violation
            .browser()
            .map(|name| {
                history
                    .iter()
                    .filter(|s| s.object["metadata"]["name"] == name)
                    .map(|s| {
                        format!(
                            "{} {}{} {}",
                            clock(t0, s.at),
                            s.kind,
                            match (s.deleted, s.vanished) {
                                (_, true) => " gone (relist)",
                                (true, _) => " deleted",
                                _ => "",
                            },
                            support::history::summary(s.kind, &s.object)
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        for line in &lines {
            text.push_str(&format!("    {line}\n"));
        }
        violations.push(json!({"violation": violation.to_string(), "history": lines}));
    }
    text.push_str(&format!(
        "\nsoak (seed {seed}): {}\n",
        if judged.violations.is_empty() {
            "every invariant held".to_string()
        } else {
            format!("{} violations", judged.violations.len())
        }
    ));
    let json = json!({
        "seed": seed,
        "duration_seconds": args.duration.as_secs(),
        "rate": args.rate,
        "server": system.describe(),
        "partitions": system.partition_kind(),
        "created": created,
        "not_created": counts.not_created.load(Ordering::Relaxed),
        "deleted_by_client": counts.deleted_by_client.load(Ordering::Relaxed),
        "browsers_seen": judged.browsers,
        "ended": judged.ended,
        "ended_while_away": judged.ended_while_away,
        "peak_rss_bytes": peaks,
        "timeline": timeline.iter().map(|(at, what)| json!({"at_seconds": at.saturating_duration_since(t0).as_secs_f64(), "what": what})).collect::<Vec<_>>(),
        "violations": violations,
        "held": judged.violations.is_empty(),
    });
    Report { text, json }
}
