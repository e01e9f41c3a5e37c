//! The dry-run verdicts on BrowserConfig entries (docs/behaviour.md, "BrowserConfig
//! validation and status"): written by the BrowserConfig reconcile, read by Browser
//! reconciles (`InvalidConfig`). Kept here, apart from both, so that neither reconcile reaches
//! into the other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::config::report::DryRun;
use crate::pod::schema::PodSchema;

/// The cluster's verdict on one entry.
#[derive(Debug, Clone, Default)]
pub(super) struct Verdict {
    pub(super) rejection: Option<String>,
    /// The cluster refused to judge the entry (kept for this reconcile only).
    pub(super) refusal: Option<String>,
    pub(super) removed: Vec<String>,
}

/// Verdicts by lower-cased (browser, version key) of one config.
type EntryVerdicts = HashMap<(String, String), Verdict>;

/// What was judged of a config: its generation, against which Pod schema (if any).
pub(super) type Judged = (i64, Option<Weak<PodSchema>>);

/// Whether `judged` is the judgement of `generation` against `schema`.
fn judged_as(judged: &Judged, generation: i64, schema: Option<&Arc<PodSchema>>) -> bool {
    match (judged, schema) {
        ((g, None), None) => *g == generation,
        ((g, Some(weak)), Some(schema)) => {
            *g == generation && Weak::ptr_eq(weak, &Arc::downgrade(schema))
        }
        _ => false,
    }
}

/// Dry runs of a config that the cluster refused to judge, kept until the retry is due, so
/// that reconciles in between (the watch event of the config's own status write) do not ask
/// again.
struct Refused {
    judged: Judged,
    runs: Vec<DryRun>,
    /// When the cluster first refused, in this run of refusals.
    since: Instant,
    retry_at: Instant,
}

/// Dry-run verdicts by namespace and config name.
#[derive(Default)]
pub struct Verdicts {
    by_config: Mutex<HashMap<(String, String), EntryVerdicts>>,
    judged: Mutex<HashMap<String, Judged>>,
    refused: Mutex<HashMap<String, Refused>>,
}

impl Verdicts {
    /// The cluster's rejection of an entry, if any.
    pub fn rejection(
        &self,
        ns: &str,
        config: &str,
        browser: &str,
        version_key: &str,
    ) -> Option<String> {
        self.verdict(ns, config, browser, version_key).rejection
    }

    pub(super) fn verdict(
        &self,
        ns: &str,
        config: &str,
        browser: &str,
        version_key: &str,
    ) -> Verdict {
        let by_config = self.by_config.lock().unwrap_or_else(|e| e.into_inner());
        by_config
            .get(&(ns.to_string(), config.to_string()))
            .and_then(|entries| entries.get(&(browser.to_lowercase(), version_key.to_lowercase())))
            .cloned()
            .unwrap_or_default()
    }

    /// Records the verdicts of `runs`; `judged` is `None` while some entry is not judged yet
    /// (the cluster refused the dry run), so that the next reconcile tries again.
    pub(super) fn record(
        &self,
        ns: &str,
        config: &str,
        uid: &str,
        judged: Option<Judged>,
        runs: &[DryRun],
    ) {
        let entries = runs
            .iter()
            .filter(|r| r.rejection.is_some() || !r.removed.is_empty())
            .map(|r| {
                let verdict = Verdict {
                    rejection: r.rejection.clone(),
                    refusal: None,
                    removed: r.removed.clone(),
                };
                (
                    (r.browser.to_lowercase(), r.version.to_lowercase()),
                    verdict,
                )
            })
            .collect();
        self.by_config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((ns.to_string(), config.to_string()), entries);
        let mut all = self.judged.lock().unwrap_or_else(|e| e.into_inner());
        match judged {
            Some(judged) => {
                all.insert(uid.to_string(), judged);
                // Judged in full: a run of refusals, if any, has ended.
                self.refused
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(uid);
            }
            None => {
                all.remove(uid);
            }
        }
    }

    pub(super) fn judged(
        &self,
        uid: &str,
        generation: i64,
        schema: Option<&Arc<PodSchema>>,
    ) -> bool {
        let judged = self.judged.lock().unwrap_or_else(|e| e.into_inner());
        judged
            .get(uid)
            .is_some_and(|j| judged_as(j, generation, schema))
    }

    /// Remembers refused dry runs of a config; returns the wait before the next attempt and
    /// whether this is the first refusal of a run of them.
    pub(super) fn refused(
        &self,
        uid: &str,
        judged: Judged,
        runs: Vec<DryRun>,
        now: Instant,
    ) -> (Duration, bool) {
        let mut all = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let since = all.get(uid).map(|r| r.since);
        let wait = refused_retry_after(now.saturating_duration_since(since.unwrap_or(now)));
        let refused = Refused {
            judged,
            runs,
            since: since.unwrap_or(now),
            retry_at: now + wait,
        };
        all.insert(uid.to_string(), refused);
        (wait, since.is_none())
    }

    /// The refused dry runs of this generation and schema while their retry is not due yet,
    /// with the time left.
    pub(super) fn pending_refusal(
        &self,
        uid: &str,
        generation: i64,
        schema: Option<&Arc<PodSchema>>,
        now: Instant,
    ) -> Option<(Vec<DryRun>, Duration)> {
        let all = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let refused = all.get(uid)?;
        (now < refused.retry_at && judged_as(&refused.judged, generation, schema))
            .then(|| (refused.runs.clone(), refused.retry_at - now))
    }
}

/// First retry after the cluster refused to judge a config's pods; then the time the refusal
/// has lasted (so the waits double), at most [`REFUSED_RETRY_MAX`].
const REFUSED_RETRY_FIRST: Duration = Duration::from_secs(5);
pub(super) const REFUSED_RETRY_MAX: Duration = Duration::from_secs(300);

/// The wait before judging again a config whose validation has been refused for `lasted`.
fn refused_retry_after(lasted: Duration) -> Duration {
    lasted.clamp(REFUSED_RETRY_FIRST, REFUSED_RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Arc<PodSchema> {
        let doc = json!({"definitions": {"io.k8s.api.core.v1.Pod": {"type": "object"}}});
        Arc::new(PodSchema::from_openapi_v2(&doc).unwrap())
    }

    #[test]
    fn a_config_is_judged_again_for_a_new_generation_or_another_pod_schema() {
        let verdicts = Verdicts::default();
        let (a, b) = (schema(), schema());
        let runs = [DryRun {
            browser: "Chrome".into(),
            version: "139.0".into(),
            rejection: None,
            refusal: None,
            removed: vec!["spec.hostUsers".into()],
        }];
        verdicts.record("ns", "c", "uid", Some((3, Some(Arc::downgrade(&a)))), &runs);
        assert!(verdicts.judged("uid", 3, Some(&a)));
        assert!(!verdicts.judged("uid", 4, Some(&a)));
        assert!(!verdicts.judged("uid", 3, Some(&b)));
        assert!(!verdicts.judged("uid", 3, None));
        // Removed fields are kept for the next status, keyed case-insensitively.
        assert_eq!(
            verdicts.verdict("ns", "c", "chrome", "139.0").removed,
            ["spec.hostUsers"]
        );
        assert_eq!(verdicts.rejection("ns", "c", "chrome", "139.0"), None);

        verdicts.record("ns", "c", "uid", Some((3, None)), &runs);
        assert!(verdicts.judged("uid", 3, None));
        assert!(!verdicts.judged("uid", 3, Some(&a)));
        // A refused dry run leaves the config to be judged again.
        verdicts.record("ns", "c", "uid", None, &runs);
        assert!(!verdicts.judged("uid", 3, None));
    }

    #[test]
    fn refused_validations_are_retried_with_doubling_waits_until_judged() {
        let verdicts = Verdicts::default();
        let runs = vec![DryRun {
            browser: "chrome".into(),
            version: "139.0".into(),
            rejection: None,
            refusal: Some("exceeded quota".into()),
            removed: Vec::new(),
        }];
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        // The first refusal starts a run: retried after the first wait; nothing is asked meanwhile.
        assert_eq!(
            verdicts.refused("uid", (1, None), runs.clone(), t0),
            (REFUSED_RETRY_FIRST, true)
        );
        let (kept, left) = verdicts.pending_refusal("uid", 1, None, at(2)).unwrap();
        assert_eq!((kept, left), (runs.clone(), Duration::from_secs(3)));
        assert!(verdicts.pending_refusal("uid", 1, None, at(5)).is_none());
        assert!(verdicts.pending_refusal("uid", 2, None, at(2)).is_none());
        // Each later wait is as long as the refusals have lasted, up to the maximum.
        assert_eq!(
            verdicts.refused("uid", (1, None), runs.clone(), at(5)),
            (Duration::from_secs(5), false)
        );
        assert_eq!(
            verdicts.refused("uid", (1, None), runs.clone(), at(10)),
            (Duration::from_secs(10), false)
        );
        assert_eq!(
            verdicts.refused("uid", (1, None), runs.clone(), at(3600)),
            (REFUSED_RETRY_MAX, false)
        );
        // Judged at last: the next refusal starts a new run.
        verdicts.record("ns", "c", "uid", Some((1, None)), &[]);
        assert!(verdicts.pending_refusal("uid", 1, None, at(3601)).is_none());
        assert_eq!(
            verdicts.refused("uid", (1, None), runs, at(4000)),
            (REFUSED_RETRY_FIRST, true)
        );
    }
}
