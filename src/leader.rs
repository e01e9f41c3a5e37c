//! Leader election (`--enable-leader-election`): only the replica holding the Lease
//! reconciles.
//!
//! Acquiring, renewing and releasing the Lease is `kube-lease-manager`'s work. Two things are
//! added around it. A standby re-reads the Lease every retry period: the crate alone looks
//! again only when the holder's lease would expire, so a released lease would otherwise sit
//! free for up to its whole duration. And the leader confirms its hold every retry period and
//! gives up once the Lease has gone unrenewed for the renew deadline, which is shorter than
//! the lease duration, so it has stopped before any standby may take over.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::api::keys;
use crate::cli::RunArgs;
use crate::duration;
use crate::link::error::describe;

/// Where a pod finds its own namespace when `POD_NAMESPACE` is not set.
pub const SERVICE_ACCOUNT_NAMESPACE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Why leader election could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error(
        "leader election: cannot tell the Lease namespace; set --leader-election-namespace or POD_NAMESPACE ({path}: {reason})"
    )]
    Namespace { path: String, reason: String },
    #[error("leader election: {0}")]
    Timing(String),
    #[error("leader election: cannot use Lease {lease}: {}", lease_error(.source))]
    Lease {
        lease: String,
        #[source]
        source: LeaseManagerError,
    },
    #[error(transparent)]
    Lost(#[from] LostLease),
}

/// A Lease error as one line: an API error as the server gave it.
fn lease_error(error: &LeaseManagerError) -> String {
    match error {
        LeaseManagerError::KubeError(e) => describe(e).to_string(),
        other => other.to_string(),
    }
}

/// The Lease was lost while leading; reconciling stopped at once.
#[derive(Debug, thiserror::Error)]
#[error("lost the leader Lease {lease}: {reason}")]
pub struct LostLease {
    pub lease: String,
    pub reason: String,
}

/// What this replica does now; `/readyz` reports a standby as ready but idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Standby,
    Leader,
}

/// How long a lease lasts, when the leader gives up, how often anyone looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl Timing {
    /// Checks that the three fit together: the Lease stores whole seconds, the leader must
    /// give up before its lease expires, and it must be able to renew (every half renew
    /// deadline, at least every second) more than once before giving up.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, LeaderError> {
        let show = duration::format;
        if lease_duration.subsec_nanos() != 0 || lease_duration < Duration::from_secs(2) {
            return Err(LeaderError::Timing(format!(
                "--leader-election-lease-duration={} must be whole seconds, at least 2s",
                show(lease_duration)
            )));
        }
        if renew_deadline >= lease_duration || renew_deadline <= Duration::from_secs(1) {
            return Err(LeaderError::Timing(format!(
                "--leader-election-renew-deadline={} must be longer than 1s and shorter than --leader-election-lease-duration={}",
                show(renew_deadline),
                show(lease_duration)
            )));
        }
        if retry_period.is_zero() || retry_period >= renew_deadline {
            return Err(LeaderError::Timing(format!(
                "--leader-election-retry-period={} must be above zero and shorter than --leader-election-renew-deadline={}",
                show(retry_period),
                show(renew_deadline)
            )));
        }
        Ok(Self {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }

    fn duration_secs(&self) -> u64 {
        self.lease_duration.as_secs()
    }

    /// Seconds between the leader's renewals: half the renew deadline, at least one.
    fn renew_every_secs(&self) -> u64 {
        (self.renew_deadline.as_secs() / 2).max(1)
    }

    /// The crate's "grace": how long before expiry the leader renews.
    fn grace_secs(&self) -> u64 {
        self.duration_secs() - self.renew_every_secs()
    }
}

/// The Lease namespace: the flag, else `POD_NAMESPACE`, else the service account's
/// namespace file.
pub fn lease_namespace(
    flag: Option<&str>,
    pod_namespace: Option<&str>,
    service_account_file: &Path,
) -> Result<String, LeaderError> {
    let given = |s: Option<&str>| s.map(str::trim).filter(|s| !s.is_empty()).map(String::from);
    if let Some(ns) = given(flag).or_else(|| given(pod_namespace)) {
        return Ok(ns);
    }
    let unusable = |reason: String| LeaderError::Namespace {
        path: service_account_file.display().to_string(),
        reason,
    };
    let content =
        std::fs::read_to_string(service_account_file).map_err(|e| unusable(e.to_string()))?;
    given(Some(&content)).ok_or_else(|| unusable("empty".into()))
}

/// A holder identity unique to this process: the pod name (or host name) plus a random
/// suffix, so that a restarted container never mistakes its predecessor's lease for its own.
/// The name is cut to 63 characters to keep the field manager derived from it within the
/// API's 128-byte limit.
pub fn holder_identity(base: Option<&str>) -> String {
    use std::hash::BuildHasher;
    let suffix = std::hash::RandomState::new().hash_one((std::process::id(), SystemTime::now()));
    let base: String = base
        .filter(|b| !b.is_empty())
        .unwrap_or(keys::MANAGER)
        .chars()
        .take(63)
        .collect();
    format!("{base}_{suffix:016x}")
}

/// How long the leader may still act on its hold, judged from the Lease it read: until
/// `renewTime + renew_deadline`. `Err` says why the hold is gone.
pub fn hold_left(
    lease: &Lease,
    identity: &str,
    now: SystemTime,
    renew_deadline: Duration,
) -> Result<Duration, String> {
    let spec = lease.spec.as_ref();
    match spec.and_then(|s| s.holder_identity.as_deref()) {
        Some(holder) if holder == identity => {}
        Some(other) => return Err(format!("now held by {other}")),
        None => return Err("released by someone else".into()),
    }
    let renewed: SystemTime = spec
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0.into())
        .ok_or_else(|| "the Lease has no renewTime".to_string())?;
    let until = renewed + renew_deadline;
    match until.duration_since(now) {
        Ok(left) if !left.is_zero() => Ok(left),
        _ => Err(format!(
            "not renewed for {}",
            duration::format(renew_deadline)
        )),
    }
}

/// One replica's part in the election.
#[derive(Clone, Debug)]
pub struct Election {
    pub lease: String,
    pub namespace: String,
    pub identity: String,
    pub timing: Timing,
}

impl Election {
    /// The election `args` ask for (`None` without `--enable-leader-election`), reading
    /// `POD_NAMESPACE`, `POD_NAME`/`HOSTNAME` and the service account's namespace file.
    pub fn from_args(args: &RunArgs) -> Result<Option<Self>, LeaderError> {
        if !args.enable_leader_election {
            return Ok(None);
        }
        let timing = Timing::new(
            args.leader_election_lease_duration,
            args.leader_election_renew_deadline,
            args.leader_election_retry_period,
        )?;
        let namespace = lease_namespace(
            args.leader_election_namespace.as_deref(),
            std::env::var("POD_NAMESPACE").ok().as_deref(),
            Path::new(SERVICE_ACCOUNT_NAMESPACE),
        )?;
        let base = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .ok();
        Ok(Some(Self {
            lease: args.leader_election_id.clone(),
            namespace,
            identity: holder_identity(base.as_deref()),
            timing,
        }))
    }

    fn lease_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.lease)
    }

    fn lost(&self, reason: impl Into<String>) -> LostLease {
        LostLease {
            lease: self.lease_ref(),
            reason: reason.into(),
        }
    }

    /// Frees the Lease if it names this replica as read now. The write carries the
    /// resourceVersion it read, so a Lease taken meanwhile is left alone. (The crate's own
    /// release trusts the holder it last saw, which may be stale once the hold is lost.)
    async fn release_if_held(&self, client: &Client) {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        let Ok(Some(lease)) = api.get_opt(&self.lease).await else {
            return;
        };
        let spec = lease.spec.unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        let release = serde_json::json!({
            "metadata": {"resourceVersion": lease.metadata.resource_version},
            "spec": {"holderIdentity": null, "acquireTime": null, "renewTime": null, "leaseDurationSeconds": null},
        });
        let (params, patch) = (PatchParams::default(), Patch::Merge(release));
        if let Err(e) = api.patch(&self.lease, &params, &patch).await {
            warn!(lease = %self.lease_ref(), error = %describe(&e), "could not free the leader Lease; it expires by itself");
        }
    }

    /// A manager with a fresh view of the Lease (created when absent).
    async fn manager(&self, client: &Client) -> Result<LeaseManager, LeaseManagerError> {
        LeaseManagerBuilder::new(client.clone(), &self.lease)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            // One field manager per candidate: the crate's conflict detection relies on it.
            .with_field_manager(format!("{}-lease-{}", keys::MANAGER, self.identity))
            .with_duration(self.timing.duration_secs())
            .with_grace(self.timing.grace_secs())
            .build()
            .await
    }

    /// Waits for the Lease as a standby, then runs `work()` while holding it and releases it
    /// when `work` ends, so that a standby takes over at once. Returns `Ok` when `stop`
    /// resolves before the Lease was acquired, and `LeaderError::Lost` the moment the Lease is
    /// lost, dropping `work` unfinished.
    pub async fn lead<W, F>(
        &self,
        client: &Client,
        role: &watch::Sender<Role>,
        stop: impl Future<Output = ()>,
        work: W,
    ) -> Result<(), LeaderError>
    where
        W: FnOnce() -> F,
        F: Future<Output = ()>,
    {
        role.send_replace(Role::Standby);
        info!(lease = %self.lease_ref(), identity = %self.identity, "standby: waiting for the leader Lease");
        let Some(manager) = self.acquire(client, stop).await? else {
            return Ok(());
        };
        info!(lease = %self.lease_ref(), identity = %self.identity, "acquired the leader Lease; reconciling");
        role.send_replace(Role::Leader);
        let held = tokio::select! {
            () = work() => Ok(()),
            lost = self.keep_renewing(&manager) => Err(lost),
            lost = self.confirm_hold(client) => Err(lost),
        };
        if let Err(lost) = held {
            // A leader frozen past its renew deadline may renew the Lease as it thaws, before
            // it sees its hold is gone: freed, it does not keep a standby waiting for the whole
            // lease duration. Tried for half the gap between the renew deadline and the lease
            // duration at most, the gap that keeps two leaders apart.
            let gap = self.timing.lease_duration - self.timing.renew_deadline;
            let _ = tokio::time::timeout(gap / 2, self.release_if_held(client)).await;
            return Err(lost.into());
        }
        match tokio::time::timeout(self.timing.renew_deadline, manager.release()).await {
            Ok(Ok(())) => info!(lease = %self.lease_ref(), "released the leader Lease"),
            Ok(Err(e)) => {
                warn!(lease = %self.lease_ref(), error = %lease_error(&e), "releasing the leader Lease failed; it expires by itself")
            }
            Err(_) => {
                warn!(lease = %self.lease_ref(), "releasing the leader Lease timed out; it expires by itself")
            }
        }
        Ok(())
    }

    /// Tries for the Lease until it is ours (`Some`) or `stop` resolves (`None`). A failure
    /// to use the Lease at all on the first attempt (RBAC, namespace) ends start-up.
    async fn acquire(
        &self,
        client: &Client,
        stop: impl Future<Output = ()>,
    ) -> Result<Option<LeaseManager>, LeaderError> {
        tokio::pin!(stop);
        let mut first = true;
        loop {
            let built = tokio::select! {
                biased;
                () = &mut stop => return Ok(None),
                built = self.manager(client) => built,
            };
            let (failed, error) = match built {
                Err(source) if first => {
                    let lease = self.lease_ref();
                    return Err(LeaderError::Lease { lease, source });
                }
                Err(error) => ("reading", error),
                Ok(manager) => {
                    first = false;
                    // A fresh manager every retry period: the crate would otherwise sleep
                    // until the holder's lease expires even when the holder has released it.
                    let attempt = tokio::select! {
                        biased;
                        () = &mut stop => None,
                        acquired = manager.changed() => Some(acquired),
                        () = tokio::time::sleep(self.timing.retry_period) => Some(Ok(false)),
                    };
                    match attempt {
                        None => {
                            // An attempt cut short by the stop may just have taken the Lease.
                            let release = manager.release();
                            let _ = tokio::time::timeout(self.timing.retry_period, release).await;
                            return Ok(None);
                        }
                        Some(Ok(true)) => return Ok(Some(manager)),
                        Some(Ok(false)) => continue,
                        Some(Err(error)) => ("trying for", error),
                    }
                }
            };
            warn!(lease = %self.lease_ref(), error = %lease_error(&error), "{failed} the leader Lease failed; retrying");
            tokio::select! {
                biased;
                () = &mut stop => return Ok(None),
                () = tokio::time::sleep(self.timing.retry_period) => {}
            }
        }
    }

    /// Drives the crate's renewals; ends only when it reports the Lease gone.
    async fn keep_renewing(&self, manager: &LeaseManager) -> LostLease {
        loop {
            match manager.changed().await {
                Ok(false) => return self.lost("another replica holds it"),
                Ok(true) => {}
                Err(e) => {
                    warn!(lease = %self.lease_ref(), error = %lease_error(&e), "renewing the leader Lease failed; retrying");
                    tokio::time::sleep(self.timing.retry_period).await;
                }
            }
        }
    }

    /// Reads the Lease every retry period; ends when it names another holder, is gone, or
    /// has not been renewed within the renew deadline (unanswered reads count as not renewed).
    async fn confirm_hold(&self, client: &Client) -> LostLease {
        let api: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        // Acquiring just renewed it.
        let mut give_up = Instant::now() + self.timing.renew_deadline;
        let not_renewed = || {
            self.lost(format!(
                "not renewed for {}",
                duration::format(self.timing.renew_deadline)
            ))
        };
        loop {
            tokio::time::sleep_until((Instant::now() + self.timing.retry_period).min(give_up))
                .await;
            match tokio::time::timeout_at(give_up, api.get_opt(&self.lease)).await {
                Err(_) => return not_renewed(),
                Ok(Ok(Some(lease))) => match hold_left(
                    &lease,
                    &self.identity,
                    SystemTime::now(),
                    self.timing.renew_deadline,
                ) {
                    Ok(left) => give_up = Instant::now() + left,
                    Err(reason) => return self.lost(reason),
                },
                Ok(Ok(None)) => return self.lost("the Lease was deleted"),
                Ok(Err(e)) => {
                    warn!(lease = %self.lease_ref(), error = %describe(&e), "reading the leader Lease failed")
                }
            }
            if Instant::now() >= give_up {
                return not_renewed();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn new(tag: &str, content: Option<&str>) -> Self {
            let path = std::env::temp_dir().join(format!(
                "bc-leader-{tag}-{}-{}",
                std::process::id(),
                holder_identity(None)
            ));
            if let Some(content) = content {
                std::fs::write(&path, content).unwrap();
            }
            Self(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn namespace_comes_from_the_flag_then_pod_namespace_then_the_service_account_file() {
        let file = TempFile::new("ns", Some("from-file\n"));
        assert_eq!(
            lease_namespace(Some("from-flag"), Some("from-env"), &file.0).unwrap(),
            "from-flag"
        );
        assert_eq!(
            lease_namespace(None, Some("from-env"), &file.0).unwrap(),
            "from-env"
        );
        assert_eq!(
            lease_namespace(Some(""), Some(" "), &file.0).unwrap(),
            "from-file"
        );
    }

    #[test]
    fn no_namespace_anywhere_is_a_start_up_error_naming_the_flag() {
        let missing = TempFile::new("missing", None);
        let err = lease_namespace(None, None, &missing.0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--leader-election-namespace"), "{err}");
        assert!(err.contains("POD_NAMESPACE"), "{err}");
        assert!(err.contains(&missing.0.display().to_string()), "{err}");
        let empty = TempFile::new("empty", Some("\n"));
        assert!(lease_namespace(None, None, &empty.0).is_err());
    }

    #[test]
    fn identities_are_unique_per_process_start_and_keep_the_pod_name() {
        let a = holder_identity(Some("browser-controller-7d9f-abcde"));
        let b = holder_identity(Some("browser-controller-7d9f-abcde"));
        assert!(a.starts_with("browser-controller-7d9f-abcde_"), "{a}");
        assert_ne!(a, b);
        assert!(holder_identity(None).starts_with("browser-controller_"));
        let long = holder_identity(Some(&"x".repeat(300)));
        assert_eq!(long.len(), 63 + 1 + 16, "{long}");
    }

    #[test]
    fn timing_renews_twice_within_the_renew_deadline() {
        let t = Timing::new(secs(15), secs(10), secs(2)).unwrap();
        assert_eq!(
            (t.duration_secs(), t.renew_every_secs(), t.grace_secs()),
            (15, 5, 10)
        );
        let t = Timing::new(secs(3), secs(2), Duration::from_millis(250)).unwrap();
        assert_eq!(
            (t.duration_secs(), t.renew_every_secs(), t.grace_secs()),
            (3, 1, 2)
        );
    }

    #[test]
    fn timing_that_cannot_work_is_rejected_naming_the_flags() {
        let err = |d, r, p| Timing::new(d, r, p).unwrap_err().to_string();
        assert!(err(Duration::from_millis(2500), secs(2), secs(1)).contains("whole seconds"));
        assert!(err(secs(1), secs(1), secs(1)).contains("--leader-election-lease-duration=1s"));
        let e = err(secs(10), secs(10), secs(2));
        assert!(e.contains("--leader-election-renew-deadline=10s"), "{e}");
        assert!(err(secs(10), secs(1), Duration::from_millis(100)).contains("longer than 1s"));
        let e = err(secs(15), secs(10), secs(10));
        assert!(e.contains("--leader-election-retry-period=10s"), "{e}");
        assert!(err(secs(15), secs(10), Duration::ZERO).contains("above zero"));
    }

    fn lease(holder: Option<&str>, renewed: Option<SystemTime>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                renew_time: renewed.map(|t| MicroTime(t.try_into().unwrap())),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn the_hold_lasts_until_the_renew_deadline_after_the_last_renewal() {
        let now = SystemTime::UNIX_EPOCH + secs(1_000_000);
        let renewed = now - secs(4);
        assert_eq!(
            hold_left(&lease(Some("me"), Some(renewed)), "me", now, secs(10)),
            Ok(secs(6))
        );
        let stale = now - secs(10);
        let err = hold_left(&lease(Some("me"), Some(stale)), "me", now, secs(10)).unwrap_err();
        assert_eq!(err, "not renewed for 10s");
    }

    #[test]
    fn the_hold_is_gone_when_the_lease_names_someone_else_or_nobody() {
        let now = SystemTime::UNIX_EPOCH + secs(1_000_000);
        let err = hold_left(&lease(Some("other"), Some(now)), "me", now, secs(10)).unwrap_err();
        assert_eq!(err, "now held by other");
        let err = hold_left(&lease(None, None), "me", now, secs(10)).unwrap_err();
        assert_eq!(err, "released by someone else");
        let err = hold_left(&lease(Some("me"), None), "me", now, secs(10)).unwrap_err();
        assert!(err.contains("renewTime"), "{err}");
    }
}
