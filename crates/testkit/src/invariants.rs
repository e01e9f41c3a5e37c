//! The soak's invariants (docs/architecture.md, "The soak"): pure judgements of a recorded watch
//! history ([`crate::history`]) against the faults that happened, and of samples of the
//! operator's readiness and memory. Each obligation arises at a moment (a Browser created, its
//! pod running or failed, a Browser gone) and is due a bound later; a fault that starts before
//! an obligation is due moves its deadline to the bound after the fault's end.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant};

use browser_controller::api::browser::Phase;
use browser_controller::lifecycle::status::{
    critical_termination, pending_failure, pod_ip, pod_phase,
};
use serde_json::Value;

use crate::history::Seen;

/// How long each obligation may take.
#[derive(Clone, Debug)]
pub struct Bounds {
    /// A Browser has its pod (or a failure) this long after its creation.
    pub pod: Duration,
    /// A Browser shows its pod's progress (`Running` with the pod IP, a failure) this long
    /// after the pod showed it.
    pub status: Duration,
    /// A pod outlives its Browser at most this long.
    pub orphan: Duration,
    /// A Browser exists at most this long after its creation: its session and the bounds
    /// above, and the retention of ended Browsers.
    pub lifetime: Duration,
    /// After a fault, a replica may report not ready this long (a restarted replica, or one
    /// that took the Lease over, fills its caches first).
    pub ready_again: Duration,
    /// The most a replica's resident memory may reach, in bytes.
    pub rss: u64,
}

/// A fault's time span; `end` is `None` while it lasts.
#[derive(Clone, Debug)]
pub struct Span {
    pub start: Instant,
    pub end: Option<Instant>,
}

/// When an obligation that arose at `at` with `bound` is due: `bound` after it, or after the
/// end of each fault that began before it was due (never while a fault lasts).
pub fn deadline(at: Instant, bound: Duration, faults: &[Span]) -> Option<Instant> {
    let mut due = at + bound;
    let mut spans: Vec<&Span> = faults.iter().collect();
    spans.sort_by_key(|s| s.start);
    for span in spans {
        if span.start <= due {
            due = due.max(span.end? + bound);
        }
    }
    Some(due)
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// More than one pod was ever created for the Browser.
    TwoPods { browser: String, pods: Vec<String> },
    /// No pod, and no failure, by the deadline.
    NoPod { browser: String },
    /// The pod ran (or failed) and the Browser did not say so by the deadline.
    StatusBehind { browser: String, pod: &'static str },
    /// The Browser was gone and its pod was still there past the deadline.
    Orphan { pod: String },
    /// The Browser outlived its session and every bound.
    TooOld { browser: String },
    /// A replica answered `/readyz` with an error outside every fault.
    NotReady { replica: String, code: u16 },
    /// A replica's resident memory exceeded the bound.
    Memory { replica: String, rss: u64 },
}

impl Violation {
    /// The Browser whose history explains the violation, if one does.
    pub fn browser(&self) -> Option<&str> {
        match self {
            Violation::TwoPods { browser, .. }
            | Violation::NoPod { browser }
            | Violation::StatusBehind { browser, .. }
            | Violation::TooOld { browser } => Some(browser),
            Violation::Orphan { pod } => Some(pod),
            Violation::NotReady { .. } | Violation::Memory { .. } => None,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::TwoPods { browser, pods } => {
                write!(f, "Browser {browser} had {} pods: {pods:?}", pods.len())
            }
            Violation::NoPod { browser } => {
                write!(f, "Browser {browser} got no pod and no failure in time")
            }
            Violation::StatusBehind { browser, pod } => {
                write!(
                    f,
                    "Browser {browser} did not show in time that its pod {pod}"
                )
            }
            Violation::Orphan { pod } => write!(f, "pod {pod} outlived its Browser"),
            Violation::TooOld { browser } => {
                write!(f, "Browser {browser} outlived its session and every bound")
            }
            Violation::NotReady { replica, code } => {
                write!(
                    f,
                    "replica {replica} answered /readyz {code} outside any fault"
                )
            }
            Violation::Memory { replica, rss } => write!(
                f,
                "replica {replica} reached {:.1} MiB of resident memory",
                *rss as f64 / (1024.0 * 1024.0)
            ),
        }
    }
}

/// What one Browser and its pod went through, by the history.
#[derive(Default, Debug)]
struct Life {
    created: Option<Instant>,
    gone: Option<Instant>,
    vanished: bool,
    /// First `Running` with the pod IP, first `Failed` (with a reason) or `Succeeded`.
    running: Option<Instant>,
    ended: Option<Instant>,
    pods: BTreeSet<String>,
    pod_seen: Option<Instant>,
    pod_running: Option<Instant>,
    pod_failed: Option<Instant>,
    pod_gone: Option<Instant>,
    pod_live: bool,
}

/// Whether a pod runs the session: `Running` with an IP, no critical container ended.
fn pod_runs(pod: &Value) -> bool {
    pod_phase(pod) == Phase::Running && pod_ip(pod).is_some() && critical_termination(pod).is_none()
}

/// Whether a pod shows the session's end or failure.
fn pod_ended(pod: &Value) -> bool {
    matches!(pod_phase(pod), Phase::Failed | Phase::Succeeded)
        || critical_termination(pod).is_some()
        || (pod_phase(pod) == Phase::Pending && pending_failure(pod).is_some())
}

fn lives(history: &[Seen]) -> BTreeMap<String, Life> {
    let mut lives: BTreeMap<String, Life> = BTreeMap::new();
    for seen in history {
        let Some(name) = seen.object["metadata"]["name"].as_str() else {
            continue;
        };
        let life = lives.entry(name.to_string()).or_default();
        match seen.kind {
            "Browser" => {
                life.created.get_or_insert(seen.at);
                if seen.deleted {
                    life.gone.get_or_insert(seen.at);
                    life.vanished |= seen.vanished;
                    continue;
                }
                let status = &seen.object["status"];
                match status["phase"].as_str() {
                    Some("Running") if status["podIP"].is_string() => {
                        life.running.get_or_insert(seen.at);
                    }
                    Some("Failed") if status["reason"].is_string() => {
                        life.ended.get_or_insert(seen.at);
                    }
                    Some("Succeeded") => {
                        life.ended.get_or_insert(seen.at);
                    }
                    _ => {}
                }
            }
            "Pod" => {
                if let Some(uid) = seen.object["metadata"]["uid"].as_str() {
                    life.pods.insert(uid.to_string());
                }
                life.pod_seen.get_or_insert(seen.at);
                if seen.deleted {
                    life.pod_gone = Some(seen.at);
                    life.pod_live = false;
                    continue;
                }
                life.pod_live = true;
                if pod_runs(&seen.object) {
                    life.pod_running.get_or_insert(seen.at);
                }
                if pod_ended(&seen.object) {
                    life.pod_failed.get_or_insert(seen.at);
                }
            }
            _ => {}
        }
    }
    lives
}

/// The judgement of a history at `now`.
#[derive(Debug, Default)]
pub struct Judgement {
    pub violations: Vec<Violation>,
    /// Browsers seen.
    pub browsers: usize,
    /// Browsers gone.
    pub ended: usize,
    /// Of those, gone while the history's watch was away (a relist no longer listed them):
    /// they ended, as an informer reports it, but how is not known.
    pub ended_while_away: usize,
}

/// Judges the Browser and pod invariants of `history` at `now`.
pub fn judge(history: &[Seen], faults: &[Span], bounds: &Bounds, now: Instant) -> Judgement {
    let mut judgement = Judgement::default();
    let met_by = |met: Option<Instant>, at: Instant, bound: Duration| -> bool {
        match deadline(at, bound, faults) {
            // Not due yet, or due while a fault lasts.
            None => true,
            Some(due) if now <= due => true,
            Some(due) => met.is_some_and(|m| m <= due),
        }
    };
    for (name, life) in lives(history) {
        if life.pods.len() > 1 {
            judgement.violations.push(Violation::TwoPods {
                browser: name.clone(),
                pods: life.pods.iter().cloned().collect(),
            });
        }
        let Some(created) = life.created else {
            // A pod of no Browser the history saw: not the operator's business.
            continue;
        };
        judgement.browsers += 1;
        if life.gone.is_some() {
            judgement.ended += 1;
            judgement.ended_while_away += usize::from(life.vanished);
        }
        let settled = |moment: Option<Instant>| -> Option<Instant> {
            [moment, life.ended, life.gone].into_iter().flatten().min()
        };
        if !met_by(settled(life.pod_seen), created, bounds.pod) {
            judgement.violations.push(Violation::NoPod {
                browser: name.clone(),
            });
        }
        if let Some(ran) = life.pod_running
            && !met_by(settled(life.running), ran, bounds.status)
        {
            judgement.violations.push(Violation::StatusBehind {
                browser: name.clone(),
                pod: "runs",
            });
        }
        if let Some(failed) = life.pod_failed
            && !met_by(settled(None), failed, bounds.status)
        {
            judgement.violations.push(Violation::StatusBehind {
                browser: name.clone(),
                pod: "ended",
            });
        }
        if let Some(gone) = life.gone
            && life.pod_seen.is_some()
        {
            let pod_gone = if life.pod_live { None } else { life.pod_gone };
            if !met_by(pod_gone, gone, bounds.orphan) {
                judgement
                    .violations
                    .push(Violation::Orphan { pod: name.clone() });
            }
        }
        if !met_by(life.gone, created, bounds.lifetime) {
            judgement
                .violations
                .push(Violation::TooOld { browser: name });
        }
    }
    judgement
}

/// One answer of a replica's `/readyz` (`None`: no answer, the process stopped or away).
#[derive(Clone, Debug)]
pub struct ReadySample {
    pub replica: String,
    pub at: Instant,
    pub code: Option<u16>,
}

/// `/readyz` answers not ready only during a fault or within `ready_again` after it.
pub fn judge_readiness(
    samples: &[ReadySample],
    faults: &[Span],
    bounds: &Bounds,
) -> Vec<Violation> {
    let excused = |at: Instant| {
        faults
            .iter()
            .any(|f| f.start <= at && f.end.is_none_or(|end| at <= end + bounds.ready_again))
    };
    let mut seen = BTreeSet::new();
    samples
        .iter()
        .filter_map(|s| match s.code {
            Some(code) if code != 200 && !excused(s.at) => Some((s.replica.clone(), code)),
            _ => None,
        })
        // One violation per replica and answer: the samples come ten a second.
        .filter(|key| seen.insert(key.clone()))
        .map(|(replica, code)| Violation::NotReady { replica, code })
        .collect()
}

/// Resident memory stays within the bound; one violation per replica, at its peak.
pub fn judge_memory(peaks: &BTreeMap<String, u64>, bounds: &Bounds) -> Vec<Violation> {
    peaks
        .iter()
        .filter(|(_, rss)| **rss > bounds.rss)
        .map(|(replica, rss)| Violation::Memory {
            replica: replica.clone(),
            rss: *rss,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bounds() -> Bounds {
        Bounds {
            pod: Duration::from_secs(10),
            status: Duration::from_secs(5),
            orphan: Duration::from_secs(30),
            lifetime: Duration::from_secs(120),
            ready_again: Duration::from_secs(10),
            rss: 256 << 20,
        }
    }

    struct At(Instant);

    impl At {
        fn s(&self, secs: u64) -> Instant {
            self.0 + Duration::from_secs(secs)
        }
    }

    fn seen(kind: &'static str, object: Value, at: Instant) -> Seen {
        Seen {
            kind,
            object,
            at,
            deleted: false,
            vanished: false,
        }
    }

    fn gone(kind: &'static str, object: Value, at: Instant, vanished: bool) -> Seen {
        Seen {
            deleted: true,
            vanished,
            ..seen(kind, object, at)
        }
    }

    fn browser(status: Value) -> Value {
        json!({"metadata": {"name": "b1"}, "status": status})
    }

    fn pod(uid: &str, status: Value) -> Value {
        json!({"metadata": {"name": "b1", "uid": uid}, "status": status})
    }

    fn running_pod(uid: &str) -> Value {
        pod(
            uid,
            json!({"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
                {"name": "browser", "state": {"running": {}}},
                {"name": "seleniferous", "state": {"running": {}}}
            ]}),
        )
    }

    fn ended_pod(uid: &str) -> Value {
        pod(
            uid,
            json!({"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
                {"name": "browser", "state": {"running": {}}},
                {"name": "seleniferous", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
            ]}),
        )
    }

    /// A session that runs and ends in time, as the operator serves it.
    fn normal(t: &At) -> Vec<Seen> {
        vec![
            seen("Browser", browser(json!({})), t.s(0)),
            seen("Pod", pod("p1", json!({"phase": "Pending"})), t.s(1)),
            seen("Pod", running_pod("p1"), t.s(3)),
            seen(
                "Browser",
                browser(json!({"phase": "Running", "podIP": "10.0.0.1"})),
                t.s(4),
            ),
            seen("Pod", ended_pod("p1"), t.s(20)),
            seen(
                "Browser",
                browser(json!({"phase": "Failed", "reason": "ContainerTerminated"})),
                t.s(21),
            ),
            gone("Pod", ended_pod("p1"), t.s(22), false),
            gone(
                "Browser",
                browser(json!({"phase": "Failed", "reason": "ContainerTerminated"})),
                t.s(23),
                false,
            ),
        ]
    }

    #[test]
    fn a_session_served_in_time_breaks_nothing() {
        let t = At(Instant::now());
        let judged = judge(&normal(&t), &[], &bounds(), t.s(600));
        assert_eq!(judged.violations, []);
        assert_eq!((judged.browsers, judged.ended), (1, 1));
    }

    #[test]
    fn a_second_pod_is_a_violation_whenever_it_came() {
        let t = At(Instant::now());
        let mut history = normal(&t);
        history.insert(3, seen("Pod", running_pod("p2"), t.s(3)));
        let judged = judge(&history, &[], &bounds(), t.s(600));
        assert_eq!(
            judged.violations,
            [Violation::TwoPods {
                browser: "b1".into(),
                pods: vec!["p1".into(), "p2".into()]
            }]
        );
    }

    #[test]
    fn a_status_late_after_its_pod_ran_is_a_violation_unless_a_fault_covers_it() {
        let t = At(Instant::now());
        let mut history = normal(&t);
        // Running shown 9 s after the pod ran: 4 s past the bound.
        history[3].at = t.s(12);
        let late = judge(&history, &[], &bounds(), t.s(600));
        assert_eq!(
            late.violations,
            [Violation::StatusBehind {
                browser: "b1".into(),
                pod: "runs"
            }]
        );
        // A fault from 2 s to 8 s: the bound counts from its end.
        let fault = Span {
            start: t.s(2),
            end: Some(t.s(8)),
        };
        let covered = judge(&history, &[fault], &bounds(), t.s(600));
        assert_eq!(covered.violations, []);
        // Not due yet: no verdict.
        let early = judge(&history[..3], &[], &bounds(), t.s(6));
        assert_eq!(early.violations, []);
    }

    #[test]
    fn a_browser_that_never_shows_its_pods_end_is_behind_and_too_old() {
        let t = At(Instant::now());
        let history = &normal(&t)[..5];
        let judged = judge(history, &[], &bounds(), t.s(600));
        assert_eq!(
            judged.violations,
            [
                Violation::StatusBehind {
                    browser: "b1".into(),
                    pod: "ended"
                },
                Violation::TooOld {
                    browser: "b1".into()
                }
            ]
        );
    }

    #[test]
    fn a_pod_left_after_its_browser_went_is_an_orphan() {
        let t = At(Instant::now());
        let mut history = normal(&t);
        history.swap(6, 7);
        // The pod goes 40 s after its Browser: 10 s past the bound.
        history[7].at = t.s(63);
        let judged = judge(&history, &[], &bounds(), t.s(600));
        assert_eq!(judged.violations, [Violation::Orphan { pod: "b1".into() }]);
    }

    #[test]
    fn a_browser_gone_while_the_watch_was_away_is_counted_apart() {
        let t = At(Instant::now());
        let history = vec![
            seen("Browser", browser(json!({})), t.s(0)),
            seen("Pod", running_pod("p1"), t.s(2)),
            seen(
                "Browser",
                browser(json!({"phase": "Running", "podIP": "10.0.0.1"})),
                t.s(3),
            ),
            gone("Pod", running_pod("p1"), t.s(30), true),
            gone(
                "Browser",
                browser(json!({"phase": "Running", "podIP": "10.0.0.1"})),
                t.s(30),
                true,
            ),
        ];
        let judged = judge(&history, &[], &bounds(), t.s(600));
        assert_eq!(judged.violations, []);
        assert_eq!((judged.ended, judged.ended_while_away), (1, 1));
    }

    #[test]
    fn a_lasting_fault_holds_every_deadline() {
        let t = At(Instant::now());
        let history = &normal(&t)[..1];
        let fault = Span {
            start: t.s(5),
            end: None,
        };
        assert_eq!(judge(history, &[fault], &bounds(), t.s(600)).violations, []);
        assert_eq!(
            judge(history, &[], &bounds(), t.s(600)).violations,
            [
                Violation::NoPod {
                    browser: "b1".into()
                },
                Violation::TooOld {
                    browser: "b1".into()
                }
            ]
        );
    }

    #[test]
    fn not_ready_counts_only_outside_faults_and_their_aftermath() {
        let t = At(Instant::now());
        let sample = |secs, code| ReadySample {
            replica: "a".into(),
            at: t.s(secs),
            code,
        };
        let fault = Span {
            start: t.s(10),
            end: Some(t.s(20)),
        };
        let samples = [
            sample(5, Some(200)),
            sample(12, Some(503)),
            sample(25, Some(503)),
            sample(31, None),
            sample(40, Some(503)),
            sample(41, Some(503)),
        ];
        assert_eq!(
            judge_readiness(&samples, &[fault], &bounds()),
            [Violation::NotReady {
                replica: "a".into(),
                code: 503
            }]
        );
    }

    #[test]
    fn memory_over_the_bound_is_reported_at_its_peak() {
        let peaks = BTreeMap::from([("a".to_string(), 100 << 20), ("b".to_string(), 300 << 20)]);
        assert_eq!(
            judge_memory(&peaks, &bounds()),
            [Violation::Memory {
                replica: "b".into(),
                rss: 300 << 20
            }]
        );
    }
}
