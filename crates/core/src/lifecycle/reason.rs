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
}
