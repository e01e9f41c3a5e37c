//! What the benchmark reads about itself: live heap bytes (a counting allocator), RSS and CPU
//! time from `/proc`, latency percentiles, and samples of the operator's metrics text.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The system allocator, counting the bytes requested and not yet freed. Unlike RSS this
/// does not depend on what the allocator keeps for reuse, so a before/after difference shows
/// what a component really holds.
pub struct CountingAllocator;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    if live > PEAK.load(Ordering::Relaxed) {
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every method forwards to the system allocator with the caller's arguments and
// returns its result unchanged; the counters never influence allocation.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (all our allocations are).
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, and the caller guarantees a valid `new_size`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        new
    }
}

/// Heap bytes live now and the most live since the last [`reset_heap_peak`].
#[derive(Clone, Copy, Debug)]
pub struct Heap {
    pub live: usize,
    pub peak: usize,
}

pub fn heap() -> Heap {
    Heap {
        live: LIVE.load(Ordering::Relaxed),
        peak: PEAK.load(Ordering::Relaxed),
    }
}

pub fn reset_heap_peak() {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Resident set size of the process now and its peak (`VmRSS`, `VmHWM`), in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub rss: u64,
    pub peak: u64,
}

pub fn memory() -> std::io::Result<Memory> {
    process_memory("self")
}

/// [`Memory`] of the process `pid` (`self` for this one).
pub fn process_memory(pid: &str) -> std::io::Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path)?;
    status_memory(&status)
        .ok_or_else(|| std::io::Error::other(format!("{path} has no VmRSS or VmHWM")))
}

/// `VmRSS` and `VmHWM` of a `/proc/.../status` text.
pub fn status_memory(status: &str) -> Option<Memory> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some(Memory {
        rss: field("VmRSS:")?,
        peak: field("VmHWM:")?,
    })
}

/// Resets the peak RSS to the current RSS (Linux ≥ 4.0); `false` when the kernel refused.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// `/proc` reports CPU times in USER_HZ ticks, which Linux fixes at 100 per second.
const TICKS_PER_SECOND: f64 = 100.0;

/// utime + stime of a `/proc/.../stat` line; the command name in parentheses may contain
/// spaces, so fields are counted from its closing parenthesis.
pub fn stat_cpu(stat: &str) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / TICKS_PER_SECOND))
}

/// CPU time of the whole process, exited threads included (10 ms resolution).
pub fn process_cpu() -> std::io::Result<Duration> {
    pid_cpu("self")
}

/// CPU time of the process `pid` (`self` for this one), exited threads included.
pub fn pid_cpu(pid: &str) -> std::io::Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)?;
    stat_cpu(&stat).ok_or_else(|| std::io::Error::other(format!("unreadable {path}")))
}

/// CPU time of the live threads called `name` (10 ms resolution per thread).
pub fn threads_cpu(name: &str) -> std::io::Result<Duration> {
    let mut total = Duration::ZERO;
    for task in std::fs::read_dir("/proc/self/task")? {
        let dir = task?.path();
        // A thread may exit between listing and reading.
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue;
        };
        if comm.trim_end() == name {
            total += stat_cpu(&stat).unwrap_or_default();
        }
    }
    Ok(total)
}

/// CPU time of the operator (its threads in this process, or its own process) and of this
/// whole process at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    pub operator: Duration,
    pub process: Duration,
}

impl Cpu {
    pub fn now(operator_threads: &str) -> std::io::Result<Self> {
        Ok(Self {
            operator: threads_cpu(operator_threads)?,
            process: process_cpu()?,
        })
    }

    pub fn since(&self, earlier: &Cpu) -> Cpu {
        Cpu {
            operator: self.operator.saturating_sub(earlier.operator),
            process: self.process.saturating_sub(earlier.process),
        }
    }
}

/// The processes of a control plane the benchmark started.
#[derive(Clone, Copy, Debug)]
pub struct ServerPids {
    pub apiserver: u32,
    pub etcd: u32,
}

impl ServerPids {
    /// Tells kube-apiserver from etcd among `pids` by their command names.
    pub fn identify(pids: &[u32]) -> Option<Self> {
        let comm = |pid: &u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok();
        let find = |name: &str| {
            pids.iter()
                .find(|pid| comm(pid).is_some_and(|c| c.trim_end() == name))
                .copied()
        };
        Some(Self {
            apiserver: find("kube-apiserver")?,
            etcd: find("etcd")?,
        })
    }

    pub fn cpu(&self) -> std::io::Result<ServerCpu> {
        Ok(ServerCpu {
            apiserver: pid_cpu(&self.apiserver.to_string())?,
            etcd: pid_cpu(&self.etcd.to_string())?,
        })
    }
}

/// CPU time (utime + stime) of kube-apiserver and etcd.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerCpu {
    pub apiserver: Duration,
    pub etcd: Duration,
}

impl ServerCpu {
    pub fn since(&self, earlier: &ServerCpu) -> ServerCpu {
        ServerCpu {
            apiserver: self.apiserver.saturating_sub(earlier.apiserver),
            etcd: self.etcd.saturating_sub(earlier.etcd),
        }
    }
}

pub use testkit::stats::summarize;

/// The samples of `family` in OpenMetrics text, by label set (`""` without labels).
pub fn samples(text: &str, family: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(family)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            Some((labels.to_string(), value.trim().parse::<f64>().ok()?))
        })
        .collect()
}

/// Sum of the samples of `family` whose label set satisfies `keep`.
pub fn sum(text: &str, family: &str, keep: impl Fn(&str) -> bool) -> f64 {
    samples(text, family)
        .iter()
        .filter(|(labels, _)| keep(labels))
        .map(|(_, v)| v)
        .sum()
}
