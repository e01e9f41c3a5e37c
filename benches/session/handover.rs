//! Capacity after a session ends: under a full ResourceQuota, how late a slot freed by an
//! ended session reaches the next Browser in line, for a grace period. chromedriver as PID 1
//! ignores SIGTERM, so the pod of an ended session waits out its whole grace period, and the
//! quota counts it until it is gone.

use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::support::stats::{Summary, summarize};
use crate::support::webdriver;
use crate::{Bench, BenchError, Phase, SESSION_LIMIT, api_error, open_and_close_session, tolerate};

const QUOTA: &str = "handover";

/// One grace period's run.
pub struct Handover {
    pub grace: u32,
    pub slots: usize,
    pub sessions: usize,
    /// A session's Browser deleted → the pod of the Browser that took its slot seen.
    pub handover: Option<Summary>,
    /// First Browser created → last session closed.
    pub total: Duration,
}

/// The Chromium entry with `grace` seconds of grace: chromedriver ignores SIGTERM, the sidecar
/// stops at once on it.
pub fn entry(grace: u32) -> Value {
    let mut entry = webdriver::chromium("trap 'exit 0' TERM; while true; do sleep 1 & wait; done");
    entry["terminationGracePeriodSeconds"] = json!(grace);
    entry
}

/// The browser version of a grace period's entry.
pub fn version(grace: u32) -> String {
    format!("grace-{grace}")
}

impl Bench {
    /// `sessions` Browsers created at once against a quota of `slots` pods; each session is
    /// opened and closed once its Browser runs, then the Browser is deleted (the session's
    /// end). The k-th Browser let in from the line takes the slot of the k-th session ended.
    pub async fn handover(
        &self,
        grace: u32,
        slots: usize,
        sessions: usize,
    ) -> Result<Handover, BenchError> {
        let quota: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": QUOTA},
            "spec": {"hard": {"pods": slots.to_string()}},
        }))?;
        self.quotas
            .create(&PostParams::default(), &quota)
            .await
            .map_err(api_error("create the ResourceQuota"))?;
        // The quota controller's first count, before any Browser.
        let deadline = Instant::now() + Duration::from_secs(60);
        while self
            .quotas
            .get(QUOTA)
            .await
            .map_err(api_error("read the quota"))?
            .data["status"]["hard"]
            .is_null()
        {
            if Instant::now() >= deadline {
                return Err(BenchError::Setup("the quota was never counted".into()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let names: Vec<String> = (0..sessions).map(|i| format!("g{grace}-{i:02}")).collect();
        let first = Instant::now();
        let runs = names.iter().map(|name| async move {
            let mut browser = self.fixture.browser(name)?;
            browser.data["spec"]["browserVersion"] = json!(version(grace));
            self.browsers
                .create(&PostParams::default(), &browser)
                .await
                .map_err(api_error("create Browser"))?;
            self.ended(name).await
        });
        let ended = futures::future::try_join_all(runs).await?;
        let total = first.elapsed();
        for name in &names {
            self.gone(name).await?;
        }
        self.quotas
            .delete(QUOTA, &DeleteParams::default())
            .await
            .map_err(api_error("delete the quota"))?;
        let mut ends = ended;
        ends.sort();
        let mut pods: Vec<Instant> = {
            let seen = self.seen();
            names
                .iter()
                .filter_map(|n| seen.created.get(n).copied())
                .collect()
        };
        pods.sort();
        let handover = pods
            .iter()
            .skip(slots)
            .zip(&ends)
            .map(|(pod, end)| pod.saturating_duration_since(*end))
            .collect();
        Ok(Handover {
            grace,
            slots,
            sessions,
            handover: summarize(handover),
            total,
        })
    }

    /// Waits for the Browser `name` to run, opens and closes a session in it, deletes it, and
    /// returns when it was deleted.
    async fn ended(&self, name: &str) -> Result<Instant, BenchError> {
        // Each waits its turn in the line.
        let deadline = Instant::now() + SESSION_LIMIT * 4;
        let (_, ip) = self.until_running(Phase::Operator, name, deadline).await?;
        open_and_close_session(ip, Instant::now() + SESSION_LIMIT).await?;
        let ended = Instant::now();
        tolerate(
            self.browsers.delete(name, &DeleteParams::default()).await,
            404,
            "delete Browser",
        )?;
        Ok(ended)
    }
}
