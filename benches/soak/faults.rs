//! The soak's faults: which one comes next and when, drawn from the run's seeded random
//! stream (the same seed replays the same faults at the same moments), and how each is done.

use std::time::{Duration, Instant};

use rand_core::Rng;

use crate::SoakError;
use crate::support::invariants::Span;
use crate::system::{System, TAKEOVER};

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// SIGKILL of the leader, which is restarted a second later (then a standby).
    OperatorKill,
    /// SIGTERM of the leader: it ends gracefully, the standby takes over.
    HandOver,
    /// kube-apiserver restarts (the double: 503 for 8 s).
    ApiServerRestart,
    /// etcd is killed and started again.
    EtcdRestart,
    /// The replicas' link is cut for 10–40 s.
    Partition,
    /// The replicas' watches resume where the server cannot serve them (410 Gone).
    WatchExpiry,
    /// 200–800 ms added to every chunk to and from the API server, for 20–60 s.
    SlowApiServer,
    /// The leader is SIGSTOPped for 5–20 s.
    CpuStarvation,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::OperatorKill,
        Kind::HandOver,
        Kind::ApiServerRestart,
        Kind::EtcdRestart,
        Kind::Partition,
        Kind::WatchExpiry,
        Kind::SlowApiServer,
        Kind::CpuStarvation,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::OperatorKill => "operator SIGKILL",
            Kind::HandOver => "leader SIGTERM (hand-over)",
            Kind::ApiServerRestart => "API server restart",
            Kind::EtcdRestart => "etcd SIGKILL and restart",
            Kind::Partition => "partition",
            Kind::WatchExpiry => "watch window expired",
            Kind::SlowApiServer => "slow API server",
            Kind::CpuStarvation => "CPU starvation (SIGSTOP)",
        }
    }
}

/// What the next fault is and how long its parts last, drawn in advance.
#[derive(Clone, Debug)]
pub struct Planned {
    pub kind: Kind,
    pub length: Duration,
    pub delay: Duration,
}

/// The faults a system offers: etcd only on a real control plane.
pub fn available(system: &System) -> Vec<Kind> {
    Kind::ALL
        .into_iter()
        .filter(|k| !(system.is_double() && *k == Kind::EtcdRestart))
        .collect()
}

fn between(rng: &mut impl Rng, low: Duration, high: Duration) -> Duration {
    let (low, high) = (low.as_millis() as u64, high.as_millis() as u64);
    Duration::from_millis(low + rng.next_u64() % (high - low + 1))
}

/// The pause before the next fault: 30–120 s, or `smoke`'s shorter range.
pub fn gap(rng: &mut impl Rng, smoke: bool) -> Duration {
    if smoke {
        between(rng, Duration::from_secs(6), Duration::from_secs(10))
    } else {
        between(rng, Duration::from_secs(30), Duration::from_secs(120))
    }
}

/// The next fault, among `kinds`; `smoke`'s last a quarter as long, so that a minute holds
/// several.
pub fn plan(rng: &mut impl Rng, kinds: &[Kind], smoke: bool) -> Planned {
    let kind = kinds[(rng.next_u64() % kinds.len() as u64) as usize];
    let (length, delay) = match kind {
        Kind::Partition => (
            between(rng, Duration::from_secs(10), Duration::from_secs(40)),
            Duration::ZERO,
        ),
        Kind::SlowApiServer => (
            between(rng, Duration::from_secs(20), Duration::from_secs(60)),
            between(rng, Duration::from_millis(200), Duration::from_millis(800)),
        ),
        Kind::CpuStarvation => (
            between(rng, Duration::from_secs(5), Duration::from_secs(20)),
            Duration::ZERO,
        ),
        _ => (Duration::ZERO, Duration::ZERO),
    };
    Planned {
        kind,
        length: if smoke { length / 4 } else { length },
        delay,
    }
}

/// A fault that happened.
#[derive(Clone, Debug)]
pub struct Done {
    pub kind: Kind,
    pub span: Span,
    pub detail: String,
}

/// Carries out `planned` on `system`; returns once the fault is over. Its span ends when the
/// operator may be expected to serve again: for a replica that went, once the standby could
/// have taken the Lease.
pub async fn inject(system: &System, planned: &Planned) -> Result<Done, SoakError> {
    let start = Instant::now();
    let (end, detail) = match planned.kind {
        Kind::OperatorKill => {
            let name = system.kill_leader().await;
            (Instant::now() + TAKEOVER, name)
        }
        Kind::HandOver => {
            let name = system.terminate_leader().await;
            (Instant::now() + TAKEOVER, name)
        }
        Kind::ApiServerRestart => {
            system.restart_apiserver().await?;
            (Instant::now(), String::new())
        }
        Kind::EtcdRestart => {
            system.restart_etcd().await?;
            (Instant::now(), String::new())
        }
        Kind::Partition => {
            system.cut()?;
            tokio::time::sleep(planned.length).await;
            system.heal()?;
            (
                Instant::now(),
                format!(
                    "{:.0}s, {}",
                    planned.length.as_secs_f64(),
                    system.partition_kind()
                ),
            )
        }
        Kind::WatchExpiry => {
            system.expire_watches().await?;
            (Instant::now(), String::new())
        }
        Kind::SlowApiServer => {
            system.slow(planned.delay);
            tokio::time::sleep(planned.length).await;
            system.slow(Duration::ZERO);
            (
                Instant::now(),
                format!(
                    "{} ms a chunk for {:.0}s",
                    planned.delay.as_millis(),
                    planned.length.as_secs_f64()
                ),
            )
        }
        Kind::CpuStarvation => {
            let (replica, name) = system.freeze_leader().await;
            tokio::time::sleep(planned.length).await;
            system.thaw(replica);
            (
                Instant::now(),
                format!("{name} for {:.0}s", planned.length.as_secs_f64()),
            )
        }
    };
    Ok(Done {
        kind: planned.kind,
        span: Span {
            start,
            end: Some(end),
        },
        detail,
    })
}
