//! The soak's load: Browsers created at a steady rate as the hub creates them, each with a
//! session drawn from the run's seeded random stream. Most end the way seleniferous ends a
//! session (its container exits 1–20 s after the pod runs); some are deleted by their client
//! mid-session; some fail the ways the cleanup table lists (an image that cannot be pulled, a
//! crashing browser, one killed for memory).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use browser_controller::api::crd::Layout;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use rand_core::Rng;
use serde_json::json;

use crate::support::kinds::browser_resource;
use crate::support::kubelet::Script;
use crate::system::{NAMESPACE, System};

/// How a session goes.
#[derive(Clone, Copy, Debug)]
pub enum Session {
    /// The sidecar exits this long after the pod runs: the usual end.
    Ends(Duration),
    /// The client deletes the Browser this long after creating it.
    Deleted(Duration),
    MissingImage,
    Crash,
    OutOfMemory,
}

impl Session {
    fn script(self) -> Script {
        match self {
            Session::Ends(after) => Script::ExitAfterRunning {
                container: "seleniferous".into(),
                exit_code: 1,
                after,
            },
            Session::Deleted(_) => Script::Run,
            Session::MissingImage => Script::ErrImagePull,
            Session::Crash => Script::CrashLoopBackOff,
            Session::OutOfMemory => Script::OomKilled,
        }
    }
}

/// 70 % end on their own, 15 % are deleted by the client, 5 % each fail one way.
pub fn draw(rng: &mut impl Rng) -> Session {
    let length = Duration::from_millis(1_000 + rng.next_u64() % 19_001);
    match rng.next_u64() % 100 {
        0..70 => Session::Ends(length),
        70..85 => Session::Deleted(length),
        85..90 => Session::MissingImage,
        90..95 => Session::Crash,
        _ => Session::OutOfMemory,
    }
}

/// What the load did.
#[derive(Default)]
pub struct Counts {
    pub created: AtomicUsize,
    /// Creates the API server never took within a minute of tries (it was away).
    pub not_created: AtomicUsize,
    pub deleted_by_client: AtomicUsize,
}

/// Creates Browsers at `rate` a second until `until`, and waits for their clients.
pub async fn run(
    system: &System,
    rng: &mut impl Rng,
    rate: f64,
    until: Instant,
    counts: Arc<Counts>,
) {
    let browsers: Api<DynamicObject> = Api::namespaced_with(
        system.admin.clone(),
        NAMESPACE,
        &browser_resource(Layout::Default),
    );
    let start = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for n in 0u64.. {
        let at = start + Duration::from_secs_f64(n as f64 / rate);
        if at >= until {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let name = format!("s{n:06}");
        let session = draw(rng);
        system.kubelet.set(&name, session.script());
        clients.spawn(client(browsers.clone(), name, session, counts.clone()));
        while clients.try_join_next().is_some() {}
    }
    while clients.join_next().await.is_some() {}
}

/// One client: creates its Browser (trying for a minute while the API server is away) and,
/// for a session it ends itself, deletes it.
async fn client(browsers: Api<DynamicObject>, name: String, session: Session, counts: Arc<Counts>) {
    let Ok(browser) = serde_json::from_value::<DynamicObject>(json!({
        "apiVersion": "selenosis.io/v1",
        "kind": "Browser",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"selenosis.io/owner": "soak"}},
        "spec": {"browserName": "chrome", "browserVersion": "139.0"},
    })) else {
        return;
    };
    let created = until_done(Duration::from_secs(60), || async {
        match browsers.create(&PostParams::default(), &browser).await {
            // A retried create after a lost answer finds its own Browser.
            Ok(_) => true,
            Err(kube::Error::Api(s)) => s.code == 409,
            Err(_) => false,
        }
    })
    .await;
    if !created {
        counts.not_created.fetch_add(1, Ordering::Relaxed);
        return;
    }
    counts.created.fetch_add(1, Ordering::Relaxed);
    if let Session::Deleted(after) = session {
        tokio::time::sleep(after).await;
        let deleted = until_done(Duration::from_secs(120), || async {
            match browsers.delete(&name, &DeleteParams::default()).await {
                Ok(_) => true,
                Err(kube::Error::Api(s)) => s.code == 404,
                Err(_) => false,
            }
        })
        .await;
        if deleted {
            counts.deleted_by_client.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Tries `attempt` every second until it succeeds or `limit` passed.
async fn until_done<F: std::future::Future<Output = bool>>(
    limit: Duration,
    mut attempt: impl FnMut() -> F,
) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if attempt().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
