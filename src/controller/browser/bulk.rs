//! The reconcile of every Browser after a completed list (the start, and each relist), handed
//! to the controller only as reconciles end. kube-runtime's `reconcile_all_on` hands every
//! Browser over at once, and each becomes a started reconcile (a task, entries in the
//! runner's and scheduler's tables, a place in a lane) until a worker takes it: over tens of
//! thousands of Browsers that was most of a restart's memory. Here a Browser not handed over
//! yet costs a pointer in the list's snapshot.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::Notify;

use super::workers::Key;
use crate::cached::{CachedBrowser, CachedKind};

/// How long the hand-over waits before it looks again for Browsers deleted since they were
/// handed over (their reconcile never starts, so nothing else would free their place).
const RECHECK: Duration = Duration::from_secs(1);

/// Reconciles handed over and not started yet, and reconciles started and not ended, of one
/// scope; the hand-over waits while they are `room` together.
pub struct Admission {
    room: usize,
    state: Mutex<State>,
    ended: Notify,
}

#[derive(Default)]
struct State {
    handed: HashSet<Key>,
    running: usize,
}

impl State {
    fn has_room(&self, room: usize) -> bool {
        self.handed.len() + self.running < room
    }
}

/// A started reconcile; it ends when dropped.
pub struct Running<'a>(&'a Admission);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.running = state.running.saturating_sub(1);
        drop(state);
        self.0.ended.notify_one();
    }
}

impl Admission {
    pub fn new(room: usize) -> Self {
        Self {
            room: room.max(1),
            state: Mutex::new(State::default()),
            ended: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A reconcile of `key` starts, whatever triggered it: a hand-over of it is served.
    pub fn start(&self, key: &Key) -> Running<'_> {
        let mut state = self.state();
        state.handed.remove(key);
        state.running += 1;
        Running(self)
    }

    /// Waits until there is room for one more hand-over; hand-overs of Browsers that are no
    /// longer `present` are dropped meanwhile.
    async fn room(&self, present: impl Fn(&Key) -> bool) {
        loop {
            {
                let mut state = self.state();
                if state.has_room(self.room) {
                    return;
                }
                state.handed.retain(&present);
                if state.has_room(self.room) {
                    return;
                }
            }
            // A reconcile's end wakes this (`notify_one` keeps the wake-up if it comes first).
            let _ = tokio::time::timeout(RECHECK, self.ended.notified()).await;
        }
    }

    fn hand_over(&self, key: Key) {
        self.state().handed.insert(key);
    }
}

/// Which completed lists start a round: none until every cache of the scope has completed its
/// first list (the reconciles of an earlier round would only wait for the rest, and the last
/// first list would start a second round over the same Browsers), then each one.
pub struct Lists {
    unlisted: AtomicUsize,
}

impl Lists {
    pub fn new(caches: usize) -> Self {
        Self {
            unlisted: AtomicUsize::new(caches),
        }
    }

    /// A cache completed a list (`first`: its first); whether a round starts.
    pub fn completed(&self, first: bool) -> bool {
        if first {
            self.unlisted.fetch_sub(1, Ordering::SeqCst) <= 1
        } else {
            self.unlisted.load(Ordering::SeqCst) == 0
        }
    }
}

/// Every Browser of `store` each time `listed` fires (signals that come during a round make
/// one more round after it), one at a time as `admission` has room.
pub fn every_browser(
    listed: impl Stream<Item = ()> + Send + 'static,
    store: Store<CachedBrowser>,
    kind: CachedKind,
    admission: Arc<Admission>,
) -> impl Stream<Item = ObjectRef<CachedBrowser>> + Send + 'static {
    let listed = Box::pin(listed.ready_chunks(64));
    stream::unfold(
        (listed, Vec::new().into_iter()),
        move |(mut listed, mut round)| {
            let (store, kind, admission) = (store.clone(), kind.clone(), admission.clone());
            async move {
                loop {
                    let Some(browser) = round.next() else {
                        listed.next().await?;
                        round = store.state().into_iter();
                        continue;
                    };
                    let obj_ref = ObjectRef::from_obj_with(&*browser, kind.clone());
                    drop(browser);
                    let present = |key: &Key| {
                        store
                            .get(&ObjectRef::new_with(&key.1, kind.clone()).within(&key.0))
                            .is_some()
                    };
                    admission.room(present).await;
                    let key = (
                        obj_ref.namespace.clone().unwrap_or_default(),
                        obj_ref.name.clone(),
                    );
                    if !present(&key) {
                        continue;
                    }
                    admission.hand_over(key);
                    return Some((obj_ref, (listed, round)));
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use futures::channel::mpsc;
    use futures::stream::BoxStream;
    use kube::core::ApiResource;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;
    use serde_json::json;

    use super::*;

    fn kind() -> CachedKind {
        Arc::new(ApiResource {
            group: "selenosis.io".into(),
            version: "v1".into(),
            api_version: "selenosis.io/v1".into(),
            kind: "Browser".into(),
            plural: "browsers".into(),
        })
    }

    fn browser(name: &str) -> CachedBrowser {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"browserName": "chrome", "browserVersion": "139.0"},
        }))
        .unwrap()
    }

    fn cache(names: &[&str]) -> Writer<CachedBrowser> {
        let mut writer = Writer::new(kind());
        writer.apply_watcher_event(&watcher::Event::Init);
        for name in names {
            writer.apply_watcher_event(&watcher::Event::InitApply(browser(name)));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        writer
    }

    fn key(name: &str) -> Key {
        ("ns".into(), name.into())
    }

    /// The hand-over over a cache of `names`, with room for `room`; its first list not sent.
    fn handing_over(
        names: &[&str],
        room: usize,
    ) -> (
        Writer<CachedBrowser>,
        mpsc::UnboundedSender<()>,
        BoxStream<'static, ObjectRef<CachedBrowser>>,
        Arc<Admission>,
    ) {
        let writer = cache(names);
        let admission = Arc::new(Admission::new(room));
        let (listed, signals) = mpsc::unbounded();
        let every = every_browser(signals, writer.as_reader(), kind(), admission.clone()).boxed();
        (writer, listed, every, admission)
    }

    /// The next Browser handed over, if one is handed over now.
    fn next_now(
        every: &mut (impl Stream<Item = ObjectRef<CachedBrowser>> + Unpin),
    ) -> Option<String> {
        every.next().now_or_never().flatten().map(|r| r.name)
    }

    #[test]
    fn a_round_starts_once_every_cache_has_listed_then_at_each_list() {
        let lists = Lists::new(3);
        assert!(!lists.completed(true), "BrowserConfigs");
        assert!(!lists.completed(true), "Browsers");
        assert!(
            !lists.completed(false),
            "Browsers again, pods not listed yet"
        );
        assert!(lists.completed(true), "pods: every cache has listed");
        assert!(lists.completed(false), "a relist");
    }

    #[tokio::test]
    async fn browsers_are_handed_over_only_as_reconciles_end() {
        let (_writer, listed, mut every, admission) = handing_over(&["b1", "b2", "b3", "b4"], 2);
        assert_eq!(next_now(&mut every), None, "nothing before a list");
        listed.unbounded_send(()).unwrap();
        let first = [next_now(&mut every).unwrap(), next_now(&mut every).unwrap()];
        assert_eq!(next_now(&mut every), None, "two handed over fill the room");

        // A reconcile that starts still takes its place until it ends.
        let running = admission.start(&key(&first[0]));
        assert_eq!(next_now(&mut every), None);
        // A reconcile triggered by something else takes a place too.
        let other = admission.start(&key("elsewhere"));
        drop(running);
        assert_eq!(next_now(&mut every), None);
        drop(other);
        let third = next_now(&mut every).unwrap();
        let _third = admission.start(&key(&third));
        let _second = admission.start(&key(&first[1]));
        assert_eq!(next_now(&mut every), None);
        drop(_second);
        let fourth = next_now(&mut every).unwrap();

        let mut all = vec![first[0].clone(), first[1].clone(), third, fourth];
        all.sort();
        assert_eq!(all, ["b1", "b2", "b3", "b4"], "each Browser once");
    }

    #[tokio::test]
    async fn the_place_of_a_browser_deleted_before_its_reconcile_is_freed() {
        let (mut writer, listed, mut every, _admission) = handing_over(&["b1", "b2"], 1);
        listed.unbounded_send(()).unwrap();
        let first = next_now(&mut every).unwrap();
        assert_eq!(next_now(&mut every), None);
        // Its reconcile never starts: the controller finds no such Browser.
        writer.apply_watcher_event(&watcher::Event::Delete(browser(&first)));
        let second = tokio::time::timeout(4 * RECHECK, every.next()).await;
        assert!(
            matches!(second, Ok(Some(ref r)) if r.name != first),
            "the other Browser follows: {second:?}"
        );
    }

    #[tokio::test]
    async fn lists_that_complete_during_a_round_make_one_more_round() {
        let (_writer, listed, mut every, _admission) = handing_over(&["b1", "b2"], 100);
        listed.unbounded_send(()).unwrap();
        assert!(next_now(&mut every).is_some());
        for _ in 0..3 {
            listed.unbounded_send(()).unwrap();
        }
        let mut handed = 1;
        while next_now(&mut every).is_some() {
            handed += 1;
        }
        assert_eq!(handed, 4, "the round under way and one more");
    }
}
