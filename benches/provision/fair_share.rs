//! Fair share under a full quota: the operator run's Browsers arrive in two waves against a
//! ResourceQuota of pods, owner 0's half at once and, a second later, the other owners' in
//! turn; each owner's wait (create sent → seen Running) is the figure, against a run of the
//! same arrivals with every Browser of one owner.

use std::time::Duration;

use browser_controller::api::keys;
use kube::api::DynamicObject;
use tokio::time::Instant;

use crate::measure;
use testkit::stats::Summary;

/// The second wave arrives this long after the first.
pub const SECOND_WAVE: Duration = Duration::from_secs(1);

/// The owners of the operator run's Browsers.
#[derive(Debug, Clone, Copy)]
pub struct Owners {
    /// Groups of arrivals: group 0 is the first wave, groups 1.. share the second in turn.
    pub groups: usize,
    /// Every group of the same owner: the figure to compare fair share with.
    pub single: bool,
}

impl Owners {
    /// The group of the `i`-th of `n` Browsers.
    pub fn group(&self, i: usize, n: usize) -> usize {
        let half = n / 2;
        if i < half || self.groups < 2 {
            0
        } else {
            1 + (i - half) % (self.groups - 1)
        }
    }

    /// The owner label's value of a group's Browsers.
    pub fn owner(&self, group: usize) -> String {
        format!("owner-{}", if self.single { 0 } else { group })
    }

    /// How many of the `n` Browsers arrive in the first wave.
    pub fn first_wave(&self, n: usize) -> usize {
        if self.groups < 2 { n } else { n / 2 }
    }
}

/// Sets the owner label of a Browser about to be created.
pub fn label(browser: &mut DynamicObject, owner: &str) {
    browser
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(keys::LABEL_OWNER.to_string(), owner.to_string());
}

/// One group's waits.
pub struct GroupWait {
    pub group: usize,
    pub owner: String,
    pub browsers: usize,
    /// Create sent → Browser seen Running.
    pub wait: Option<Summary>,
}

/// The waits of each group, from when each Browser's create was sent and when it was seen
/// Running (in the order of `groups`).
pub fn waits(
    owners: &Owners,
    groups: &[usize],
    sent: &[Instant],
    running: &[Option<Instant>],
) -> Vec<GroupWait> {
    (0..owners.groups)
        .map(|group| {
            let of = || groups.iter().enumerate().filter(|(_, g)| **g == group);
            let wait = of()
                .filter_map(|(i, _)| Some(running[i]?.saturating_duration_since(sent[i])))
                .collect();
            GroupWait {
                group,
                owner: owners.owner(group),
                browsers: of().count(),
                wait: measure::summarize(wait),
            }
        })
        .collect()
}
