//! The lines of the capacity queue (docs/behaviour.md, "Capacity queue"), one per namespace:
//! the Browsers waiting for quota, as the Browser watch and the operator's own status writes
//! show them. Owners (the value of the owner label, `api::owner::label`; Browsers without it
//! share one anonymous owner) take turns: the owner served a slot least recently goes first,
//! then the one whose first Browser waits longest; each owner's Browsers go in their creation
//! order. A reconcile asks where its Browser stands (nobody overtakes those ahead of it); when
//! the first of a line may be let in now, it is named to be woken.
//!
//! Each owner's order is the Browsers' own (creation time, then name), so a restarted operator
//! or a new leader rebuilds it from its first list. When each owner was last served is taken
//! from the creation times of the pods it holds, and kept as the operator sees pods created;
//! creation times have whole seconds, so two owners served in the same second go by which
//! the operator saw served last.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jiff::Timestamp;
use kube_core::DynamicObject;
use serde_json::Value;

use super::Key;
use crate::api::browser::StatusView;
use crate::api::owner::{self, Owner};
use crate::cached::CachedBrowser;
use crate::lifecycle::capacity::{self, Position};

/// A place: creation time, then name.
type Place = (Timestamp, String);

/// Where a Browser stands in its namespace, for the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Waiting in line (status reason `Queued`).
    Waiting { created: Timestamp, owner: Owner },
    /// Not handled yet (no status phase): it has its turn before those created after it.
    Arriving { created: Timestamp },
}

/// Where a cached Browser stands (`None`: in no line).
pub fn standing(browser: &CachedBrowser) -> Option<Standing> {
    let created = browser.created()?;
    let owner = browser.owner().map(Box::from);
    if browser.deleting() {
        None
    } else if browser.queued_since().is_some() {
        Some(Standing::Waiting { created, owner })
    } else if browser.phase().is_none() {
        Some(Standing::Arriving { created })
    } else {
        None
    }
}

/// Where a Browser an answer returned stands.
pub fn standing_of(browser: &DynamicObject) -> Option<Standing> {
    let created = browser.metadata.creation_timestamp.as_ref()?.0;
    let status = browser.data.get("status").unwrap_or(&Value::Null);
    if browser.metadata.deletion_timestamp.is_some() {
        None
    } else if capacity::queued_since(status, Some(created)).is_some() {
        let owner = owner::of(browser);
        Some(Standing::Waiting { created, owner })
    } else if StatusView::new(status).phase_as_written().is_none() {
        Some(Standing::Arriving { created })
    } else {
        None
    }
}

#[derive(Default, Debug)]
struct Members {
    /// The Browsers waiting, by namespace and owner, each owner's in creation order.
    waiting: BTreeMap<String, BTreeMap<Owner, BTreeSet<Place>>>,
    arriving: BTreeMap<String, BTreeSet<Place>>,
    /// Where each Browser counted here stands, by namespace and name.
    places: HashMap<Key, Standing>,
}

impl Members {
    /// Puts the Browser where it stands now, or nowhere (`None`).
    fn set(&mut self, key: &Key, stand: Option<Standing>) {
        let (ns, name) = key;
        match self.places.remove(key) {
            Some(Standing::Waiting { created, owner }) => {
                if let Some(owners) = self.waiting.get_mut(ns) {
                    if let Some(line) = owners.get_mut(&owner) {
                        line.remove(&(created, name.clone()));
                        if line.is_empty() {
                            owners.remove(&owner);
                        }
                    }
                    if owners.is_empty() {
                        self.waiting.remove(ns);
                    }
                }
            }
            Some(Standing::Arriving { created }) => {
                if let Some(set) = self.arriving.get_mut(ns) {
                    set.remove(&(created, name.clone()));
                    if set.is_empty() {
                        self.arriving.remove(ns);
                    }
                }
            }
            None => {}
        }
        let place = |created| (created, name.clone());
        match &stand {
            Some(Standing::Waiting { created, owner }) => {
                let owners = self.waiting.entry(ns.clone()).or_default();
                owners
                    .entry(owner.clone())
                    .or_default()
                    .insert(place(*created));
            }
            Some(Standing::Arriving { created }) => {
                self.arriving
                    .entry(ns.clone())
                    .or_default()
                    .insert(place(*created));
            }
            None => return,
        }
        if let Some(stand) = stand {
            self.places.insert(key.clone(), stand);
        }
    }
}

/// The lines of one watched scope.
#[derive(Default, Debug)]
pub struct Lines {
    live: Members,
    /// What a relist under way has found so far; it replaces the live lines when it ends.
    relist: Option<Members>,
    /// When each owner of each namespace was last served a slot (its newest pod's creation).
    served: HashMap<String, HashMap<Owner, Served>>,
    /// Serves seen so far: the order of serves within a second.
    serves: u64,
}

/// When an owner was last served: its newest pod's creation, and the serve's number.
#[derive(Debug)]
struct Served {
    at: Timestamp,
    turn: u64,
    /// The pod that served it (a Browser's pod has the Browser's name).
    pod: Box<str>,
}

impl Lines {
    /// The owners waiting in `ns` in the order they take their turns, with their lines.
    fn rotation(&self, ns: &str) -> Vec<(&Owner, &BTreeSet<Place>)> {
        let Some(owners) = self.live.waiting.get(ns) else {
            return Vec::new();
        };
        let mut rotation: Vec<_> = owners.iter().collect();
        rotation.sort_by_cached_key(|(owner, line)| {
            (
                self.last_served(ns, owner),
                line.first().cloned(),
                (*owner).clone(),
            )
        });
        rotation
    }

    fn last_served(&self, ns: &str, owner: &Owner) -> Option<(Timestamp, u64)> {
        let last = self.served.get(ns)?.get(owner)?;
        Some((last.at, last.turn))
    }

    /// Records where the Browser `key` stands now, as the watch or the operator's own write
    /// shows it; the first of its line, to be woken: a slot an earlier Browser did not take
    /// after all, or the first before it leaving, may let it in.
    pub fn note(&mut self, key: &Key, stand: Option<Standing>) -> Option<Key> {
        self.live.set(key, stand);
        self.first(&key.0).filter(|first| first != key)
    }

    /// `owner` of namespace `ns` holds the pod `pod` created at `created`: it was served then.
    /// `created_now`: the operator's own create returned it, so a pod of the same second
    /// serves it after any seen before (a watch event may be of an older pod).
    pub fn served(&mut self, (ns, pod): &Key, owner: Owner, created: Timestamp, created_now: bool) {
        self.serves += 1;
        let serve = Served {
            at: created,
            turn: self.serves,
            pod: pod.as_str().into(),
        };
        let of_ns = self.served.entry(ns.clone()).or_default();
        match of_ns.get_mut(&owner) {
            None => {
                of_ns.insert(owner, serve);
            }
            Some(last) => {
                let later_pod = created_now && created == last.at && *pod != *last.pod;
                if created > last.at || later_pod {
                    *last = serve;
                }
            }
        }
    }

    /// A relist begins: what it finds replaces the lines when it ends.
    pub fn relist_started(&mut self) {
        self.relist = Some(Members::default());
    }

    /// A Browser the relist found.
    pub fn relisted(&mut self, key: &Key, stand: Option<Standing>) {
        if let Some(relist) = &mut self.relist {
            relist.set(key, stand);
        }
    }

    pub fn relist_done(&mut self) {
        if let Some(relist) = self.relist.take() {
            self.live = relist;
        }
    }

    /// Whether the Browser `key` waits in its line.
    pub fn waits(&self, key: &Key) -> bool {
        matches!(self.live.places.get(key), Some(Standing::Waiting { .. }))
    }

    /// The first of every line (after a relist of the ResourceQuotas, which may have missed
    /// a change that made room).
    pub fn firsts(&self) -> Vec<Key> {
        let namespaces = self.live.waiting.keys();
        namespaces.filter_map(|ns| self.first(ns)).collect()
    }

    /// The first Browser of the namespace's line, if it has one.
    pub fn first(&self, ns: &str) -> Option<Key> {
        let (_, line) = self.rotation(ns).into_iter().next()?;
        let (_, name) = line.first()?;
        Some((ns.to_string(), name.clone()))
    }

    /// Where the Browser `key` of `owner`, created at `created`, stands in its namespace's
    /// line, or would once it joins. Its owner's turn comes as the rotation says; each owner's
    /// `n`-th Browser goes in the `n`-th round of turns.
    pub fn place(&self, key: &Key, owner: &Owner, created: Timestamp) -> Position {
        let (ns, name) = key;
        let me = (created, name.clone());
        let mut rotation = self.rotation(ns);
        let own_line;
        if !rotation.iter().any(|(o, _)| *o == owner) {
            // Not in line yet: its owner would join the rotation with it first.
            own_line = BTreeSet::from([me.clone()]);
            let last = self.last_served(ns, owner);
            let at = rotation.partition_point(|(o, line)| {
                let theirs = self.last_served(ns, o);
                (theirs, line.first().cloned(), (*o).clone())
                    < (last, Some(me.clone()), owner.clone())
            });
            rotation.insert(at, (owner, &own_line));
        }
        let mine = rotation.iter().position(|(o, _)| *o == owner).unwrap_or(0);
        let rank = rotation[mine].1.range(..me.clone()).count();
        let ahead = rotation
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != mine)
            .map(|(i, (_, line))| line.len().min(rank) + usize::from(i < mine && line.len() > rank))
            .sum::<usize>()
            + rank;
        let arriving = self
            .live
            .arriving
            .get(ns.as_str())
            .map_or(0, |set| set.range(..me).count());
        Position {
            ahead,
            arriving,
            of_owner: rank + 1,
            owners: rotation.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn at(second: u32) -> Timestamp {
        t(&format!("2026-11-28T10:00:{second:02}Z"))
    }

    fn key(ns: &str, name: &str) -> Key {
        (ns.into(), name.into())
    }

    fn owner(name: &str) -> Owner {
        Some(Box::from(name))
    }

    fn waits(second: u32, who: &str) -> Option<Standing> {
        let owner = (!who.is_empty()).then(|| Box::from(who));
        Some(Standing::Waiting {
            created: at(second),
            owner,
        })
    }

    fn name(woken: Option<Key>) -> Option<String> {
        woken.map(|(_, name)| name)
    }

    /// The order the namespace's waiting Browsers are let in, one slot at a time, each
    /// admission serving its owner at `clock`.
    fn admissions(lines: &mut Lines, ns: &str) -> Vec<String> {
        let mut order = Vec::new();
        let mut clock = 30;
        while let Some(first) = lines.first(ns) {
            let Some(Standing::Waiting { owner, .. }) = lines.live.places.get(&first).cloned()
            else {
                panic!("the first waits");
            };
            lines.note(&first, None);
            lines.served(&first, owner, at(clock), true);
            clock += 1;
            order.push(first.1);
        }
        order
    }

    #[test]
    fn with_one_owner_the_line_is_in_creation_order_and_each_change_wakes_its_first() {
        let mut lines = Lines::default();
        assert_eq!(lines.note(&key("a", "b3"), waits(3, "")), None);
        assert_eq!(
            name(lines.note(&key("a", "b2"), waits(2, ""))),
            None,
            "b2 is the first now: itself changed, it is reconciled anyway"
        );
        assert_eq!(
            name(lines.note(&key("a", "b4"), waits(4, ""))),
            Some("b2".into())
        );
        lines.note(&key("z", "other"), waits(0, ""));
        let place = |lines: &Lines, name, second| lines.place(&key("a", name), &None, at(second));
        assert_eq!(place(&lines, "b4", 4).ahead, 2);
        assert_eq!(place(&lines, "b2", 2).ahead, 0);
        // Not in line yet, created after all of them: behind the three.
        let b9 = place(&lines, "b9", 9);
        assert_eq!((b9.ahead, b9.of_owner, b9.owners), (3, 4, 1));
        // The first is admitted: the next is woken.
        assert_eq!(name(lines.note(&key("a", "b2"), None)), Some("b3".into()));
        assert_eq!(lines.first("a"), Some(key("a", "b3")));
        lines.note(&key("a", "b3"), None);
        lines.note(&key("a", "b4"), None);
        assert_eq!(lines.first("a"), None);
        assert_eq!(lines.firsts(), [key("z", "other")]);
        assert_eq!(place(&lines, "b9", 9).ahead, 0);
    }

    #[test]
    fn owners_take_turns_each_in_its_own_order_the_least_recently_served_first() {
        let mut lines = Lines::default();
        // A has held slots since before; B and the anonymous owner were never served.
        lines.served(&key("a", "old"), owner("A"), at(1), false);
        for (i, s) in [(0, 2), (1, 2), (2, 3), (3, 3), (4, 4)] {
            lines.note(&key("a", &format!("a{i}")), waits(s, "A"));
        }
        for (i, s) in [(0, 10), (1, 11), (2, 12)] {
            lines.note(&key("a", &format!("b{i}")), waits(s, "B"));
        }
        lines.note(&key("a", "anon"), waits(13, ""));
        // B's first goes first though created after all of A's; then the anonymous owner
        // (never served, its first waits less long), then A, and round by round.
        let b0 = lines.place(&key("a", "b0"), &owner("B"), at(10));
        assert_eq!((b0.ahead, b0.of_owner, b0.owners), (0, 1, 3));
        assert_eq!(lines.place(&key("a", "a1"), &owner("A"), at(2)).ahead, 4);
        assert_eq!(
            admissions(&mut lines, "a"),
            ["b0", "anon", "a0", "b1", "a1", "b2", "a2", "a3", "a4"]
        );
    }

    #[test]
    fn owners_served_in_the_same_second_go_by_which_was_served_last() {
        let mut lines = Lines::default();
        lines.note(&key("a", "a9"), waits(1, "A"));
        lines.note(&key("a", "b9"), waits(2, "B"));
        let (a, b) = (owner("A"), owner("B"));
        lines.served(&key("a", "a0"), a.clone(), at(7), true);
        lines.served(&key("a", "b0"), b.clone(), at(7), false);
        // B's pod, then its create's answer: one serve, later than A's.
        lines.served(&key("a", "b0"), b.clone(), at(7), true);
        // A watch event of A's pod of that second is no new serve.
        lines.served(&key("a", "a0"), a.clone(), at(7), false);
        assert_eq!(lines.first("a"), Some(key("a", "a9")));
        // A's second pod of that second is.
        lines.served(&key("a", "a1"), a.clone(), at(7), true);
        assert_eq!(lines.first("a"), Some(key("a", "b9")));
        // An older pod seen late changes nothing.
        lines.served(&key("a", "b-old"), b, at(3), false);
        assert_eq!(lines.first("a"), Some(key("a", "b9")));
    }

    #[test]
    fn a_newcomer_takes_its_turn_in_the_rotation() {
        let mut lines = Lines::default();
        lines.served(&key("a", "old"), owner("A"), at(5), false);
        lines.note(&key("a", "a0"), waits(1, "A"));
        lines.note(&key("a", "a1"), waits(2, "A"));
        // C has no Browser in line yet: its first would go before A's, never served.
        let c = lines.place(&key("a", "c0"), &owner("C"), at(20));
        assert_eq!((c.ahead, c.of_owner, c.owners), (0, 1, 2));
        // Its second would follow A's first.
        lines.note(&key("a", "c0"), waits(20, "C"));
        let c1 = lines.place(&key("a", "c1"), &owner("C"), at(21));
        assert_eq!((c1.ahead, c1.of_owner), (2, 2));
    }

    #[test]
    fn browsers_not_handled_yet_count_apart_and_any_change_wakes_the_first() {
        let mut lines = Lines::default();
        lines.note(&key("a", "w"), waits(5, ""));
        let early = Some(Standing::Arriving { created: at(1) });
        assert_eq!(
            name(lines.note(&key("a", "early"), early)),
            Some("w".into())
        );
        let late = lines.place(&key("a", "late"), &None, at(9));
        assert_eq!((late.ahead, late.arriving), (1, 1));
        let w = lines.place(&key("a", "w"), &None, at(5));
        assert_eq!((w.ahead, w.arriving), (0, 1));
        // The early one is handled (failed, say) without taking the slot: w looks again.
        assert_eq!(name(lines.note(&key("a", "early"), None)), Some("w".into()));
        assert_eq!(lines.place(&key("a", "w"), &None, at(5)).arriving, 0);
    }

    #[test]
    fn the_same_creation_time_breaks_the_tie_by_name() {
        let mut lines = Lines::default();
        lines.note(&key("a", "s-b"), waits(0, ""));
        lines.note(&key("a", "s-a"), waits(0, ""));
        assert_eq!(lines.place(&key("a", "s-b"), &None, at(0)).ahead, 1);
        assert_eq!(lines.place(&key("a", "s-a"), &None, at(0)).ahead, 0);
    }

    #[test]
    fn a_relist_replaces_the_lines_with_what_it_found() {
        let mut lines = Lines::default();
        lines.note(&key("a", "gone"), waits(0, ""));
        lines.relist_started();
        lines.relisted(&key("a", "kept"), waits(1, ""));
        assert_eq!(
            lines.first("a"),
            Some(key("a", "gone")),
            "live until it ends"
        );
        lines.relist_done();
        assert_eq!(lines.first("a"), Some(key("a", "kept")));
    }
}
