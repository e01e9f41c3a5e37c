//! The Browser controller: per watched scope its watch caches and index (`scope`), one work
//! queue for all scopes and `--max-workers` workers that take Browsers from it and reconcile
//! them (`work`).

mod scope;
pub(super) mod work;

use std::future::Future;
use std::sync::Arc;

use tokio::task::JoinSet;

use super::Shared;
use scope::Scope;

/// Runs the Browser controller over `namespaces` (all for `[None]`) until `stop` resolves;
/// then no new reconcile starts and the function returns once those under way are done.
pub async fn run(
    shared: Arc<Shared>,
    namespaces: Vec<Option<String>>,
    stop: impl Future<Output = ()>,
) {
    let mut tasks = JoinSet::new();
    let scopes: Arc<[Arc<Scope>]> = namespaces
        .into_iter()
        .map(|ns| {
            let (scope, watches) = Scope::watch(shared.clone(), ns);
            tasks.spawn(watches);
            scope
        })
        .collect();
    let lanes = scopes.clone();
    let queue = shared.clone();
    tasks.spawn(async move {
        queue
            .queue
            .run_timer(|key| match lanes.iter().find(|s| s.covers(&key.0)) {
                Some(scope) => scope.lane(key),
                None => crate::lifecycle::lane::Lane::Cleanup,
            })
            .await;
    });
    let mut workers = JoinSet::new();
    for _ in 0..shared.queue.workers() {
        workers.spawn(work::work(shared.clone(), scopes.clone()));
    }
    stop.await;
    shared.queue.stop();
    while workers.join_next().await.is_some() {}
    tasks.abort_all();
}
