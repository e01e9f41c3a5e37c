//! The reasons the operator itself gives in a Browser's status and Events (docs/behaviour.md,
//! "Cleanup table", "Events"). A failed pod's own reason (`Evicted`, `ImagePullBackOff`,
//! `OOMKilled` …) is passed on as the pod states it, so a status reason stays a string.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    ConfigNotFound,
    InvalidSelenosisOptions,
    InvalidConfig,
    InvalidSpec,
    QuotaExceeded,
    Forbidden,
    InvalidPodSpec,
    PodCreationTimeout,
    ContainerTerminated,
    PodFailed,
    PodDeleted,
    PodLost,
    PodConflict,
    LifetimeExceeded,
    /// The API server refused a write for a reason no rule knows, again and again.
    WriteRejected,
    /// Event and BrowserConfig condition: the object cannot be decoded (nested too deeply).
    Undecodable,
    /// Event: the pod was created.
    PodCreated,
    /// Event: fields the cluster's Pod schema lacks were removed from the pod.
    PodFieldsRemoved,
    /// Event: the Browser was deleted and its pod is being deleted.
    DeletingPod,
    /// Event: the pod was forced after the deletion timeout.
    PodDeletionTimeout,
    /// Status and Event: a ResourceQuota has no room for the pod yet; the Browser waits in
    /// its namespace's line.
    Queued,
    /// Event: a Browser that waited in line got its pod.
    Admitted,
}

impl Reason {
    /// Every reason, in the order declared.
    pub const ALL: [Reason; 22] = [
        Self::ConfigNotFound,
        Self::InvalidSelenosisOptions,
        Self::InvalidConfig,
        Self::InvalidSpec,
        Self::QuotaExceeded,
        Self::Forbidden,
        Self::InvalidPodSpec,
        Self::PodCreationTimeout,
        Self::ContainerTerminated,
        Self::PodFailed,
        Self::PodDeleted,
        Self::PodLost,
        Self::PodConflict,
        Self::LifetimeExceeded,
        Self::WriteRejected,
        Self::Undecodable,
        Self::PodCreated,
        Self::PodFieldsRemoved,
        Self::DeletingPod,
        Self::PodDeletionTimeout,
        Self::Queued,
        Self::Admitted,
    ];

    /// Whether a Browser fails with this reason (`phase: Failed`, the cleanup table) rather
    /// than the reason naming an Event or a Browser that waits.
    pub const fn fails(self) -> bool {
        match self {
            Self::ConfigNotFound
            | Self::InvalidSelenosisOptions
            | Self::InvalidConfig
            | Self::InvalidSpec
            | Self::QuotaExceeded
            | Self::Forbidden
            | Self::InvalidPodSpec
            | Self::PodCreationTimeout
            | Self::ContainerTerminated
            | Self::PodFailed
            | Self::PodDeleted
            | Self::PodLost
            | Self::PodConflict
            | Self::LifetimeExceeded
            | Self::WriteRejected => true,
            Self::Undecodable
            | Self::PodCreated
            | Self::PodFieldsRemoved
            | Self::DeletingPod
            | Self::PodDeletionTimeout
            | Self::Queued
            | Self::Admitted => false,
        }
    }

    /// The reasons a Browser fails with, as status and metrics write them.
    pub fn failures() -> impl Iterator<Item = &'static str> {
        Self::ALL
            .into_iter()
            .filter(|r| r.fails())
            .map(Reason::as_str)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ConfigNotFound => "ConfigNotFound",
            Self::InvalidSelenosisOptions => "InvalidSelenosisOptions",
            Self::InvalidConfig => "InvalidConfig",
            Self::InvalidSpec => "InvalidSpec",
            Self::QuotaExceeded => "QuotaExceeded",
            Self::Forbidden => "Forbidden",
            Self::InvalidPodSpec => "InvalidPodSpec",
            Self::PodCreationTimeout => "PodCreationTimeout",
            Self::ContainerTerminated => "ContainerTerminated",
            Self::PodFailed => "PodFailed",
            Self::PodDeleted => "PodDeleted",
            Self::PodLost => "PodLost",
            Self::PodConflict => "PodConflict",
            Self::LifetimeExceeded => "LifetimeExceeded",
            Self::WriteRejected => "WriteRejected",
            Self::Undecodable => "Undecodable",
            Self::PodCreated => "PodCreated",
            Self::PodFieldsRemoved => "PodFieldsRemoved",
            Self::DeletingPod => "DeletingPod",
            Self::PodDeletionTimeout => "PodDeletionTimeout",
            Self::Queued => "Queued",
            Self::Admitted => "Admitted",
        }
    }
}

impl From<Reason> for String {
    fn from(reason: Reason) -> Self {
        reason.as_str().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_written_as_their_names() {
        assert_eq!(Reason::ConfigNotFound.as_str(), "ConfigNotFound");
        assert_eq!(String::from(Reason::InvalidSpec), "InvalidSpec");
        assert_eq!(Reason::DeletingPod.as_str(), "DeletingPod");
    }

    #[test]
    fn all_lists_each_reason_once() {
        let names: std::collections::BTreeSet<&str> =
            Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Reason::ALL.len());
        let failures: Vec<&str> = Reason::failures().collect();
        assert!(failures.contains(&"PodCreationTimeout"), "{failures:?}");
        assert!(failures.contains(&"WriteRejected"), "{failures:?}");
        assert!(!failures.contains(&"Queued"), "{failures:?}");
        assert!(!failures.contains(&"DeletingPod"), "{failures:?}");
    }
}
