//! The lines of the capacity queue (docs/behaviour.md, "Capacity queue"), one per namespace:
//! the Browsers waiting for quota, in creation order, as the Browser watch and the operator's
//! own status writes show them. A reconcile asks how many wait ahead of its Browser (nobody
//! overtakes them); when the first of a line changes, the new first is woken, since it may be
//! admitted now. The order is the Browsers' own (creation time, then name), so a restarted
//! operator or a new leader rebuilds the same lines from its first list.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use futures::channel::mpsc::UnboundedSender;
use jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::cached::{CachedBrowser, CachedKind};

/// A place: creation time, then name.
type Place = (Timestamp, String);

/// Where a Browser stands in its namespace, for the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Waiting in line (status reason `Queued`).
    Waiting,
    /// Not handled yet (no status phase): it has its turn before those created after it.
    Arriving,
}

#[derive(Default)]
struct Members {
    waiting: BTreeMap<String, BTreeSet<Place>>,
    arriving: BTreeMap<String, BTreeSet<Place>>,
    /// Where each Browser counted here stands, by namespace and name.
    places: HashMap<(String, String), (Standing, Timestamp)>,
}

impl Members {
    fn of(&mut self, standing: Standing) -> &mut BTreeMap<String, BTreeSet<Place>> {
        match standing {
            Standing::Waiting => &mut self.waiting,
            Standing::Arriving => &mut self.arriving,
        }
    }

    /// Puts the Browser where it stands now, or nowhere (`None`).
    fn set(&mut self, ns: &str, name: &str, standing: Option<(Standing, Timestamp)>) {
        let key = (ns.to_string(), name.to_string());
        if let Some((was, created)) = self.places.remove(&key) {
            let sets = self.of(was);
            if let Some(set) = sets.get_mut(ns) {
                set.remove(&(created, name.to_string()));
                if set.is_empty() {
                    sets.remove(ns);
                }
            }
        }
        if let Some((now, created)) = standing {
            self.places.insert(key, (now, created));
            self.of(now)
                .entry(ns.to_string())
                .or_default()
                .insert((created, name.to_string()));
        }
    }

    fn first(&self, ns: &str) -> Option<&str> {
        self.waiting.get(ns)?.first().map(|(_, name)| name.as_str())
    }
}

#[derive(Default)]
struct State {
    live: Members,
    /// What a relist under way has found so far; it replaces the live lines when it ends.
    relist: Option<Members>,
}

/// The lines of one watched scope.
pub struct Lines {
    state: Mutex<State>,
    wake: UnboundedSender<ObjectRef<CachedBrowser>>,
    kind: CachedKind,
}

/// Where a cached Browser stands, with its creation time.
fn standing(browser: &CachedBrowser) -> Option<(Standing, Timestamp)> {
    let created = browser.created()?;
    if browser.deleting() {
        None
    } else if browser.queued_since().is_some() {
        Some((Standing::Waiting, created))
    } else if browser.phase().is_none() {
        Some((Standing::Arriving, created))
    } else {
        None
    }
}

impl Lines {
    /// Lines that wake the first Browser of a line through `wake`.
    pub fn new(kind: CachedKind, wake: UnboundedSender<ObjectRef<CachedBrowser>>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            wake,
            kind,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self, ns: &str, name: &str) {
        let _ = self
            .wake
            .unbounded_send(ObjectRef::new_with(name, self.kind.clone()).within(ns));
    }

    /// Follows one event of the Browser watch. A relist replaces the lines when it completes
    /// (every Browser is reconciled then anyway).
    pub fn observe(&self, event: &watcher::Event<CachedBrowser>) {
        let identity =
            |b: &CachedBrowser| Some((b.metadata.namespace.clone()?, b.metadata.name.clone()?));
        match event {
            watcher::Event::Apply(b) => {
                if let Some((ns, name)) = identity(b) {
                    self.note(&ns, &name, standing(b));
                }
            }
            watcher::Event::Delete(b) => {
                if let Some((ns, name)) = identity(b) {
                    self.note(&ns, &name, None);
                }
            }
            watcher::Event::Init => self.state().relist = Some(Members::default()),
            watcher::Event::InitApply(b) => {
                if let (Some((ns, name)), Some(relist)) = (identity(b), &mut self.state().relist) {
                    relist.set(&ns, &name, standing(b));
                }
            }
            watcher::Event::InitDone => {
                let mut state = self.state();
                if let Some(relist) = state.relist.take() {
                    state.live = relist;
                }
            }
        }
    }

    /// Records where the Browser stands now, as the operator's own write or the watch shows it.
    /// Any change in a namespace with a line wakes its first: a slot an earlier Browser did
    /// not take after all, or the first before it leaving, may let it in.
    pub fn note(&self, ns: &str, name: &str, standing: Option<(Standing, Timestamp)>) {
        let first = {
            let mut state = self.state();
            state.live.set(ns, name, standing);
            state.live.first(ns).map(str::to_string)
        };
        if let Some(first) = first.filter(|first| first != name) {
            self.wake(ns, &first);
        }
    }

    /// Wakes the first of every line (after a relist of the ResourceQuotas, which may have
    /// missed a change that made room).
    pub fn wake_firsts(&self) {
        let firsts: Vec<(String, String)> = {
            let state = self.state();
            state
                .live
                .waiting
                .iter()
                .filter_map(|(ns, line)| Some((ns.clone(), line.first()?.1.clone())))
                .collect()
        };
        for (ns, name) in firsts {
            self.wake(&ns, &name);
        }
    }

    /// For the Browser `name` created at `created`: how many Browsers of the namespace
    /// created before it wait in line, and how many are not handled yet (itself not counted).
    pub fn ahead(&self, ns: &str, name: &str, created: Timestamp) -> (usize, usize) {
        let state = self.state();
        let before = |sets: &BTreeMap<String, BTreeSet<Place>>| {
            sets.get(ns)
                .map_or(0, |set| set.range(..(created, name.to_string())).count())
        };
        (before(&state.live.waiting), before(&state.live.arriving))
    }

    /// The first Browser of the namespace's line, if it has one.
    pub fn first(&self, ns: &str) -> Option<ObjectRef<CachedBrowser>> {
        let state = self.state();
        let first = state.live.first(ns)?;
        Some(ObjectRef::new_with(first, self.kind.clone()).within(ns))
    }
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;

    use super::*;

    fn kind() -> CachedKind {
        std::sync::Arc::new(kube::core::ApiResource {
            group: "selenosis.io".into(),
            version: "v1".into(),
            api_version: "selenosis.io/v1".into(),
            kind: "Browser".into(),
            plural: "browsers".into(),
        })
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn waits(at: &str) -> Option<(Standing, Timestamp)> {
        Some((Standing::Waiting, t(at)))
    }

    fn woken(rx: &mut mpsc::UnboundedReceiver<ObjectRef<CachedBrowser>>) -> Vec<String> {
        let mut names = Vec::new();
        while let Ok(r) = rx.try_recv() {
            names.push(r.name);
        }
        names
    }

    #[test]
    fn a_line_is_in_creation_order_and_each_change_wakes_its_first() {
        let (tx, mut rx) = mpsc::unbounded();
        let lines = Lines::new(kind(), tx);
        lines.note("a", "b3", waits("2026-11-28T10:00:03Z"));
        lines.note("a", "b2", waits("2026-11-28T10:00:02Z"));
        lines.note("a", "b4", waits("2026-11-28T10:00:04Z"));
        lines.note("z", "other", waits("2026-11-28T10:00:00Z"));
        // A Browser that changed is reconciled anyway: b2 is woken when b4 joins behind it.
        assert_eq!(woken(&mut rx), ["b2"]);
        assert_eq!(lines.ahead("a", "b4", t("2026-11-28T10:00:04Z")), (2, 0));
        assert_eq!(lines.ahead("a", "b2", t("2026-11-28T10:00:02Z")), (0, 0));
        // Not in line yet, created after all of them: behind the three.
        assert_eq!(lines.ahead("a", "b9", t("2026-11-28T10:00:09Z")), (3, 0));
        // The first is admitted: the next is woken.
        lines.note("a", "b2", None);
        assert_eq!(woken(&mut rx), ["b3"]);
        assert_eq!(lines.first("a").map(|r| r.name), Some("b3".into()));
        lines.note("a", "b3", None);
        lines.note("a", "b4", None);
        assert_eq!(lines.first("a"), None);
        assert_eq!(lines.ahead("a", "b9", t("2026-11-28T10:00:09Z")), (0, 0));
    }

    #[test]
    fn browsers_not_handled_yet_count_apart_and_any_change_wakes_the_first() {
        let (tx, mut rx) = mpsc::unbounded();
        let lines = Lines::new(kind(), tx);
        lines.note("a", "w", waits("2026-11-28T10:00:05Z"));
        let _ = woken(&mut rx);
        lines.note(
            "a",
            "early",
            Some((Standing::Arriving, t("2026-11-28T10:00:01Z"))),
        );
        assert_eq!(lines.ahead("a", "late", t("2026-11-28T10:00:09Z")), (1, 1));
        assert_eq!(lines.ahead("a", "w", t("2026-11-28T10:00:05Z")), (0, 1));
        // The early one is handled (failed, say) without taking the slot: w looks again.
        lines.note("a", "early", None);
        assert_eq!(woken(&mut rx), ["w", "w"]);
        assert_eq!(lines.ahead("a", "w", t("2026-11-28T10:00:05Z")), (0, 0));
    }

    #[test]
    fn the_same_creation_time_breaks_the_tie_by_name() {
        let (tx, _rx) = mpsc::unbounded();
        let lines = Lines::new(kind(), tx);
        lines.note("a", "s-b", waits("2026-11-28T10:00:00Z"));
        lines.note("a", "s-a", waits("2026-11-28T10:00:00Z"));
        let at = t("2026-11-28T10:00:00Z");
        assert_eq!(lines.ahead("a", "s-b", at), (1, 0));
        assert_eq!(lines.ahead("a", "s-a", at), (0, 0));
    }

    #[test]
    fn a_relist_replaces_the_lines_with_what_it_found() {
        let (tx, _rx) = mpsc::unbounded();
        let lines = Lines::new(kind(), tx);
        lines.note("a", "gone", waits("2026-11-28T10:00:00Z"));
        lines.observe(&watcher::Event::Init);
        lines.observe(&watcher::Event::InitDone);
        assert_eq!(
            lines.first("a"),
            None,
            "what the relist no longer lists left"
        );
    }
}
