//! The lines of the capacity queue (docs/behaviour.md, "Capacity queue"), one per namespace:
//! the Browsers waiting for quota, in creation order, as the Browser watch and the operator's
//! own status writes show them. A reconcile asks how many wait ahead of its Browser (nobody
//! overtakes them); when the first of a line may be let in now, it is named to be woken. The
//! order is the Browsers' own (creation time, then name), so a restarted operator or a new
//! leader rebuilds the same lines from its first list.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jiff::Timestamp;
use kube_core::DynamicObject;
use serde_json::Value;

use super::Key;
use crate::api::browser::StatusView;
use crate::cached::CachedBrowser;
use crate::lifecycle::capacity;

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

/// Where a Browser stands, and since it was created when.
pub type Stand = Option<(Standing, Timestamp)>;

/// Where a cached Browser stands.
pub fn standing(browser: &CachedBrowser) -> Stand {
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

/// Where a Browser an answer returned stands.
pub fn standing_of(browser: &DynamicObject) -> Stand {
    let created = browser.metadata.creation_timestamp.as_ref()?.0;
    let status = browser.data.get("status").unwrap_or(&Value::Null);
    if browser.metadata.deletion_timestamp.is_some() {
        None
    } else if capacity::queued_since(status, Some(created)).is_some() {
        Some((Standing::Waiting, created))
    } else if StatusView::new(status).phase_as_written().is_none() {
        Some((Standing::Arriving, created))
    } else {
        None
    }
}

#[derive(Default, Debug)]
struct Members {
    waiting: BTreeMap<String, BTreeSet<Place>>,
    arriving: BTreeMap<String, BTreeSet<Place>>,
    /// Where each Browser counted here stands, by namespace and name.
    places: HashMap<Key, (Standing, Timestamp)>,
}

impl Members {
    fn of(&mut self, standing: Standing) -> &mut BTreeMap<String, BTreeSet<Place>> {
        match standing {
            Standing::Waiting => &mut self.waiting,
            Standing::Arriving => &mut self.arriving,
        }
    }

    /// Puts the Browser where it stands now, or nowhere (`None`).
    fn set(&mut self, key: &Key, stand: Stand) {
        let (ns, name) = key;
        if let Some((was, created)) = self.places.remove(key) {
            let sets = self.of(was);
            if let Some(set) = sets.get_mut(ns) {
                set.remove(&(created, name.clone()));
                if set.is_empty() {
                    sets.remove(ns);
                }
            }
        }
        if let Some((now, created)) = stand {
            self.places.insert(key.clone(), (now, created));
            self.of(now)
                .entry(ns.clone())
                .or_default()
                .insert((created, name.clone()));
        }
    }

    fn first(&self, ns: &str) -> Option<Key> {
        let (_, name) = self.waiting.get(ns)?.first()?;
        Some((ns.to_string(), name.clone()))
    }
}

/// The lines of one watched scope.
#[derive(Default, Debug)]
pub struct Lines {
    live: Members,
    /// What a relist under way has found so far; it replaces the live lines when it ends.
    relist: Option<Members>,
}

impl Lines {
    /// Records where the Browser `key` stands now, as the watch or the operator's own write
    /// shows it; the first of its line, to be woken: a slot an earlier Browser did not take
    /// after all, or the first before it leaving, may let it in.
    pub fn note(&mut self, key: &Key, stand: Stand) -> Option<Key> {
        self.live.set(key, stand);
        self.live.first(&key.0).filter(|first| first != key)
    }

    /// A relist begins: what it finds replaces the lines when it ends.
    pub fn relist_started(&mut self) {
        self.relist = Some(Members::default());
    }

    /// A Browser the relist found.
    pub fn relisted(&mut self, key: &Key, stand: Stand) {
        if let Some(relist) = &mut self.relist {
            relist.set(key, stand);
        }
    }

    pub fn relist_done(&mut self) {
        if let Some(relist) = self.relist.take() {
            self.live = relist;
        }
    }

    /// The first of every line (after a relist of the ResourceQuotas, which may have missed
    /// a change that made room).
    pub fn firsts(&self) -> Vec<Key> {
        let namespaces = self.live.waiting.keys();
        namespaces.filter_map(|ns| self.live.first(ns)).collect()
    }

    /// For the Browser `key` created at `created`: how many Browsers of the namespace created
    /// before it wait in line, and how many are not handled yet (itself not counted).
    pub fn ahead(&self, key: &Key, created: Timestamp) -> (usize, usize) {
        let (ns, name) = key;
        let before = |sets: &BTreeMap<String, BTreeSet<Place>>| {
            sets.get(ns)
                .map_or(0, |set| set.range(..(created, name.clone())).count())
        };
        (before(&self.live.waiting), before(&self.live.arriving))
    }

    /// The first Browser of the namespace's line, if it has one.
    pub fn first(&self, ns: &str) -> Option<Key> {
        self.live.first(ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn key(ns: &str, name: &str) -> Key {
        (ns.into(), name.into())
    }

    fn waits(at: &str) -> Stand {
        Some((Standing::Waiting, t(at)))
    }

    fn name(woken: Option<Key>) -> Option<String> {
        woken.map(|(_, name)| name)
    }

    #[test]
    fn a_line_is_in_creation_order_and_each_change_wakes_its_first() {
        let mut lines = Lines::default();
        assert_eq!(
            lines.note(&key("a", "b3"), waits("2026-11-28T10:00:03Z")),
            None
        );
        assert_eq!(
            name(lines.note(&key("a", "b2"), waits("2026-11-28T10:00:02Z"))),
            None,
            "b2 is the first now: itself changed, it is reconciled anyway"
        );
        // b2 is woken when b4 joins behind it.
        assert_eq!(
            name(lines.note(&key("a", "b4"), waits("2026-11-28T10:00:04Z"))),
            Some("b2".into())
        );
        lines.note(&key("z", "other"), waits("2026-11-28T10:00:00Z"));
        assert_eq!(
            lines.ahead(&key("a", "b4"), t("2026-11-28T10:00:04Z")),
            (2, 0)
        );
        assert_eq!(
            lines.ahead(&key("a", "b2"), t("2026-11-28T10:00:02Z")),
            (0, 0)
        );
        // Not in line yet, created after all of them: behind the three.
        assert_eq!(
            lines.ahead(&key("a", "b9"), t("2026-11-28T10:00:09Z")),
            (3, 0)
        );
        // The first is admitted: the next is woken.
        assert_eq!(name(lines.note(&key("a", "b2"), None)), Some("b3".into()));
        assert_eq!(lines.first("a"), Some(key("a", "b3")));
        lines.note(&key("a", "b3"), None);
        lines.note(&key("a", "b4"), None);
        assert_eq!(lines.first("a"), None);
        assert_eq!(lines.firsts(), [key("z", "other")]);
        assert_eq!(
            lines.ahead(&key("a", "b9"), t("2026-11-28T10:00:09Z")),
            (0, 0)
        );
    }

    #[test]
    fn browsers_not_handled_yet_count_apart_and_any_change_wakes_the_first() {
        let mut lines = Lines::default();
        lines.note(&key("a", "w"), waits("2026-11-28T10:00:05Z"));
        let early = Some((Standing::Arriving, t("2026-11-28T10:00:01Z")));
        assert_eq!(
            name(lines.note(&key("a", "early"), early)),
            Some("w".into())
        );
        assert_eq!(
            lines.ahead(&key("a", "late"), t("2026-11-28T10:00:09Z")),
            (1, 1)
        );
        assert_eq!(
            lines.ahead(&key("a", "w"), t("2026-11-28T10:00:05Z")),
            (0, 1)
        );
        // The early one is handled (failed, say) without taking the slot: w looks again.
        assert_eq!(name(lines.note(&key("a", "early"), None)), Some("w".into()));
        assert_eq!(
            lines.ahead(&key("a", "w"), t("2026-11-28T10:00:05Z")),
            (0, 0)
        );
    }

    #[test]
    fn the_same_creation_time_breaks_the_tie_by_name() {
        let mut lines = Lines::default();
        lines.note(&key("a", "s-b"), waits("2026-11-28T10:00:00Z"));
        lines.note(&key("a", "s-a"), waits("2026-11-28T10:00:00Z"));
        let at = t("2026-11-28T10:00:00Z");
        assert_eq!(lines.ahead(&key("a", "s-b"), at), (1, 0));
        assert_eq!(lines.ahead(&key("a", "s-a"), at), (0, 0));
    }

    #[test]
    fn a_relist_replaces_the_lines_with_what_it_found() {
        let mut lines = Lines::default();
        lines.note(&key("a", "gone"), waits("2026-11-28T10:00:00Z"));
        lines.relist_started();
        lines.relisted(&key("a", "kept"), waits("2026-11-28T10:00:01Z"));
        assert_eq!(
            lines.first("a"),
            Some(key("a", "gone")),
            "live until it ends"
        );
        lines.relist_done();
        assert_eq!(lines.first("a"), Some(key("a", "kept")));
    }
}
