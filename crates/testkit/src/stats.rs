//! Latency percentiles for the benchmarks: nearest-rank p50/p90/p99 and the maximum.

use std::time::Duration;

/// p50/p90/p99/max of a set of durations (nearest rank).
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub count: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// The summary of `samples`; `None` when there are none.
pub fn summarize(mut samples: Vec<Duration>) -> Option<Summary> {
    samples.sort_unstable();
    let n = samples.len();
    let rank = |p: f64| {
        let index = ((p / 100.0) * n as f64).ceil() as usize;
        samples[index.clamp(1, n) - 1]
    };
    (n > 0).then(|| Summary {
        count: n,
        p50: rank(50.0),
        p90: rank(90.0),
        p99: rank(99.0),
        max: samples[n - 1],
    })
}
