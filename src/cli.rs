//! Command line: the operator's flags (each also read from an environment variable) and the
//! `crds` and `render` subcommands (docs/operations.md, "Flags and environment",
//! "Subcommands").

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

use crate::api::crd::KubernetesVersion;
use crate::api::keys;
use crate::duration;
use crate::names;
use crate::pod::policy::{Fence, Policy};
use crate::pod::security::Level;
use crate::prepull::render::{DEFAULT_HELPER_IMAGE, DEFAULT_PAUSE_IMAGE, HelperImages};

/// What `--help` says about running without a subcommand.
const RUNS_THE_OPERATOR: &str = "Without a subcommand, browser-controller runs the operator: it watches Browsers \
and BrowserConfigs and manages the browser Pods, configured by the options above (each also \
read from the environment variable shown). `crds` and `render` need no cluster.";

#[derive(Debug, Parser)]
#[command(
    name = "browser-controller",
    version,
    about = "Runs Selenium-compatible browsers as ephemeral Pods for the Selenosis stack.",
    after_help = RUNS_THE_OPERATOR,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check an install: the API server, the CRDs, the operator's permissions in the chosen
    /// mode, the events API, and a server-side dry run of the pod a Browser would get. One
    /// line per check; exits non-zero with the fix named when one fails. Takes the operator's
    /// flags and environment, so that it checks the mode they choose.
    Check(Box<CheckArgs>),
    /// Print the CustomResourceDefinitions (the files in crds/ are this output).
    Crds(CrdsArgs),
    /// Print the Pod a Browser would get from the given BrowserConfig(s), or with --prepull
    /// their image pre-pull DaemonSets; no cluster needed.
    Render(RenderArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The operator's ServiceAccount, NAMESPACE/NAME: its permissions are checked and the pod
    /// dry run is made as it (impersonated, which a cluster admin may do). Empty: the
    /// kubeconfig's own identity.
    #[arg(long, default_value = "browser-controller/browser-controller")]
    pub service_account: String,
    /// Namespace of the pod dry run (default: the first --namespace, else `default`).
    #[arg(long, value_name = "NAMESPACE")]
    pub dry_run_namespace: Option<String>,
    /// Browser of the pod dry run (default: the first entry of the namespace's BrowserConfigs).
    #[arg(long, value_name = "NAME:VERSION")]
    pub browser: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Print the split-group layout of the selenosis Helm chart
    /// (browser.selenosis.io / browserconfig.selenosis.io) instead of selenosis.io.
    #[arg(long)]
    pub split_groups: bool,
    /// Generate for this Kubernetes release (e.g. 1.31): every validation and field the server
    /// enforces and understands. Without it, the portable schemas of crds/ that install on 1.24
    /// and newer.
    #[arg(long, value_name = "MAJOR.MINOR")]
    pub kubernetes_version: Option<KubernetesVersion>,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// BrowserConfig file(s): YAML (multi-document) or JSON; repeat the flag for more files.
    #[arg(long = "config", short = 'c', required = true, value_name = "FILE")]
    pub configs: Vec<PathBuf>,
    /// Browser file: YAML or JSON. Required unless --prepull is given, which takes none.
    #[arg(
        long,
        short = 'b',
        value_name = "FILE",
        required_unless_present = "prepull",
        conflicts_with = "prepull"
    )]
    pub browser: Option<PathBuf>,
    /// Print the image pre-pull DaemonSets of the BrowserConfig(s) instead of a Pod.
    #[arg(long)]
    pub prepull: bool,
    #[command(flatten)]
    pub prepull_images: PrePullImageArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
}

/// What the admin lets into browser pods (docs/security.md): the pod security ceiling, and
/// which label and annotation prefixes Browsers and session options may bring.
#[derive(Debug, Clone, Default, Args)]
pub struct PolicyArgs {
    /// The Pod Security Standard every browser pod must meet: an entry above it is invalid and
    /// its Browsers fail with InvalidConfig. `restricted` also fills in what the standard
    /// requires where the BrowserConfig leaves it unset.
    #[arg(long, env = "POD_SECURITY_LEVEL", value_enum, default_value_t = PodSecurityLevel::Baseline)]
    pub pod_security_level: PodSecurityLevel,

    /// Further label prefixes (a domain covers its subdomains) that session options may not
    /// set and Browser labels do not bring to the pod; repeat or comma-separate.
    #[arg(
        long = "reserved-label-prefix",
        env = "RESERVED_LABEL_PREFIXES",
        value_delimiter = ',',
        value_name = "PREFIX"
    )]
    pub reserved_label_prefixes: Vec<String>,

    /// Further annotation prefixes a Browser's annotations do not bring to the pod.
    #[arg(
        long = "denied-annotation-prefix",
        env = "DENIED_ANNOTATION_PREFIXES",
        value_delimiter = ',',
        value_name = "PREFIX"
    )]
    pub denied_annotation_prefixes: Vec<String>,

    /// Annotation prefixes a Browser may bring to its pod although a built-in rule denies them
    /// (e.g. sidecar.istio.io).
    #[arg(
        long = "allowed-annotation-prefix",
        env = "ALLOWED_ANNOTATION_PREFIXES",
        value_delimiter = ',',
        value_name = "PREFIX"
    )]
    pub allowed_annotation_prefixes: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum PodSecurityLevel {
    Privileged,
    #[default]
    Baseline,
    Restricted,
}

impl PolicyArgs {
    pub fn policy(&self) -> Policy {
        Policy {
            level: match self.pod_security_level {
                PodSecurityLevel::Privileged => Level::Privileged,
                PodSecurityLevel::Baseline => Level::Baseline,
                PodSecurityLevel::Restricted => Level::Restricted,
            },
            fence: Fence::new(
                &self.reserved_label_prefixes,
                &self.denied_annotation_prefixes,
                &self.allowed_annotation_prefixes,
            ),
        }
    }
}

/// The images of the pre-pull pods besides the pulled ones (docs/operations.md, "Image
/// pre-pull").
#[derive(Debug, Clone, Args)]
pub struct PrePullImageArgs {
    /// Image providing a static /bin/busybox (with cp and true): pre-pull pods copy it and run
    /// it in every pulled image, so that images without a shell are pulled too.
    #[arg(long, env = "PREPULL_HELPER_IMAGE", default_value = DEFAULT_HELPER_IMAGE,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub prepull_helper_image: String,
    /// Image of the container (/pause) that keeps a pre-pull pod running once its images are pulled.
    #[arg(long, env = "PREPULL_PAUSE_IMAGE", default_value = DEFAULT_PAUSE_IMAGE,
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub prepull_pause_image: String,
}

impl PrePullImageArgs {
    pub fn images(&self) -> HelperImages {
        HelperImages {
            helper: self.prepull_helper_image.clone(),
            pause: self.prepull_pause_image.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Flags of the operator itself (no subcommand).
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Address of the /metrics endpoint (`:8080` = all addresses, IPv6 and IPv4; `0` switches it off).
    #[arg(long, env = "METRICS_ADDR", default_value = ":8080", value_parser = parse_addr)]
    pub metrics_addr: ListenAddr,

    /// Address of the /healthz and /readyz endpoints (`:8081` = all addresses, IPv6 and IPv4;
    /// `0` switches them off).
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081", value_parser = parse_addr)]
    pub health_probe_bind_address: ListenAddr,

    /// Elect a leader through a Lease so that only one replica reconciles.
    #[arg(long, env = "ENABLE_LEADER_ELECTION", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set)]
    pub enable_leader_election: bool,

    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_ID",
        default_value = "controller.selenosis.io"
    )]
    pub leader_election_id: String,

    /// Namespace of the Lease (default: POD_NAMESPACE, else the service account's namespace).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// A standby takes over at most this long after the leader stopped renewing (whole seconds).
    #[arg(long, env = "LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = duration::parse)]
    pub leader_election_lease_duration: Duration,

    /// The leader stops (and exits) when its Lease has not been renewed for this long.
    #[arg(long, env = "LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = duration::parse)]
    pub leader_election_renew_deadline: Duration,

    /// How often a standby looks at the Lease and the leader confirms that it still holds it.
    #[arg(long, env = "LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = duration::parse)]
    pub leader_election_retry_period: Duration,

    /// How long a probe of the API server (`GET /readyz`, every second) may wait for an answer; two
    /// probes in a row without one mark the API server unreachable: waiting requests are
    /// abandoned and watches start anew.
    #[arg(long, env = "API_PROBE_TIMEOUT", default_value = "2s", value_parser = duration::parse)]
    pub api_probe_timeout: Duration,

    /// At start-up, how long an API server that does not answer (restarting, unreachable,
    /// overloaded) is waited for before the operator exits; `0` exits at the first failure.
    #[arg(long, env = "STARTUP_TIMEOUT", default_value = "2m", value_parser = duration::parse)]
    pub startup_timeout: Duration,

    /// On SIGTERM/SIGINT, in-flight reconciles get this long to finish before the operator stops anyway.
    #[arg(long, env = "SHUTDOWN_TIMEOUT", default_value = "25s", value_parser = duration::parse)]
    pub shutdown_timeout: Duration,

    /// Namespace to watch; repeat (or comma-separate in the env var) for more. Default: all.
    #[arg(long = "namespace", env = "WATCH_NAMESPACE", value_delimiter = ',')]
    pub namespaces: Vec<String>,

    /// Fail a Browser whose pod is still Pending after this long.
    #[arg(long, env = "BROWSER_POD_CREATION_TIMEOUT", default_value = "5m", value_parser = duration::parse)]
    pub browser_pod_creation_timeout: Duration,

    /// Force-delete a pod still terminating this long after its deletion was requested.
    #[arg(long, env = "BROWSER_POD_DELETION_TIMEOUT", default_value = "5m", value_parser = duration::parse)]
    pub browser_pod_deletion_timeout: Duration,

    /// End Browsers older than this (`0` or `off`: no limit).
    #[arg(long, env = "BROWSER_MAX_LIFETIME", default_value = "off", value_parser = duration::parse_off)]
    pub browser_max_lifetime: Duration,

    /// How long a Browser whose pod a ResourceQuota has no room for waits in line before it
    /// fails with `QuotaExceeded` (`0`: fail at once). Below the Selenosis hub's 3-minute
    /// startup timeout, so that the client hears why.
    #[arg(long, env = "QUEUE_TIMEOUT", default_value = "2m", value_parser = duration::parse)]
    pub queue_timeout: Duration,

    /// The Browser label that names its owner: while Browsers wait in line for quota, owners
    /// take turns, each owner's Browsers in their creation order; Browsers without the label
    /// share one owner. The Selenosis hub sets `selenosis.io/owner` with Basic auth on.
    #[arg(long, env = "FAIR_SHARE_LABEL", default_value = keys::LABEL_OWNER, value_parser = label_key)]
    pub fair_share_label: String,

    /// Keep a Failed Browser visible this long before deleting it (`0`: delete on the next reconcile).
    #[arg(long, env = "FAILED_BROWSER_RETENTION", default_value = "0", value_parser = duration::parse)]
    pub failed_browser_retention: Duration,

    /// After the API server was unreachable, keep Browsers that ended at least this long past its
    /// return, so that clients whose watches reconnect later see how they ended.
    #[arg(long, env = "OUTAGE_RETENTION", default_value = "60s", value_parser = duration::parse)]
    pub outage_retention: Duration,

    // Each reconcile makes its writes in sequence: a burst keeps the API server busy only with
    // many at once; creations get at most a quarter, cleanups an eighth (workers.rs), so that
    // the server is not flooded with them while statuses wait (docs/performance.md).
    /// Browsers reconciled at the same time.
    #[arg(long, env = "MAX_WORKERS", default_value_t = 128, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_workers: u16,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log level (`trace`, `debug`, `info`, `warn`, `error`, `off`) or tracing filter
    /// (e.g. `info,browser_controller=debug`); RUST_LOG wins when set.
    #[arg(long, env = "LOG_LEVEL", default_value = "info", value_parser = parse_log_level)]
    pub log_level: String,

    /// Pin the API group of the Browser kind (default: discovered, selenosis.io first).
    #[arg(long, env = "BROWSER_API_GROUP")]
    pub browser_api_group: Option<String>,

    /// Pin the API group of the BrowserConfig kind (default: discovered, selenosis.io first).
    #[arg(long, env = "BROWSERCONFIG_API_GROUP")]
    pub browserconfig_api_group: Option<String>,

    /// Pre-pull the images of the BrowserConfig entries that ask for it (prePull: true) with a
    /// DaemonSet per config and scheduling; needs the DaemonSet rights of rbac/prepull/.
    #[arg(long, env = "ENABLE_PREPULL", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = ArgAction::Set)]
    pub enable_prepull: bool,

    #[command(flatten)]
    pub prepull_images: PrePullImageArgs,

    #[command(flatten)]
    pub policy: PolicyArgs,
}

const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// Checks `--log-level`: a level, or a tracing filter whose every part is a level or a
/// `target=level` directive. A bare word that is no level (`verbose`, `warning`) would be
/// read by the filter as a target name and silence every log line, so it is refused.
/// A label key, as Kubernetes takes it.
fn label_key(input: &str) -> Result<String, String> {
    names::check_label_key(input)
        .map(|()| input.to_string())
        .map_err(|why| format!("invalid label key {input:?}: {why}"))
}

pub fn parse_log_level(input: &str) -> Result<String, String> {
    let s = input.trim();
    let expected = "expected one of trace, debug, info, warn, error, off, or a filter such as info,browser_controller=debug";
    if let Some(word) = s
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty() && !part.contains(['=', '[']))
        .find(|part| !LEVELS.contains(&part.to_ascii_lowercase().as_str()))
    {
        return Err(format!("invalid log level {word:?}: {expected}"));
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("invalid log filter {input:?}: {e}"))
}

/// Where an endpoint listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenAddr {
    /// `0`: the endpoint is switched off.
    Off,
    /// `:port`: every address of the host, IPv6 and IPv4 (IPv4 only where the host has no
    /// IPv6), so that probes reach it on single- and dual-stack clusters alike.
    AllAddresses(u16),
    /// One address, e.g. `127.0.0.1:8080` or `[::]:8080`.
    At(SocketAddr),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Off => f.write_str("0"),
            ListenAddr::AllAddresses(port) => write!(f, ":{port}"),
            ListenAddr::At(addr) => write!(f, "{addr}"),
        }
    }
}

/// Parses `:8080`, `0.0.0.0:8080`, `[::]:8080`; `0` means switched off.
pub fn parse_addr(input: &str) -> Result<ListenAddr, String> {
    let s = input.trim();
    if s == "0" || s.is_empty() {
        return Ok(ListenAddr::Off);
    }
    let invalid = || format!("invalid address {input:?}: expected e.g. :8080 or 127.0.0.1:8080");
    match s.strip_prefix(':') {
        Some(port) => port
            .parse()
            .map(ListenAddr::AllAddresses)
            .map_err(|_| invalid()),
        None => s.parse().map(ListenAddr::At).map_err(|_| invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("browser-controller").chain(args.iter().copied()))
    }

    #[test]
    fn accepts_the_helm_chart_flags_unchanged() {
        let cli = parse(&[
            "--metrics-addr=:8080",
            "--health-probe-bind-address=:8081",
            "--enable-leader-election=false",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.run.metrics_addr, ListenAddr::AllAddresses(8080));
        assert_eq!(
            cli.run.health_probe_bind_address,
            ListenAddr::AllAddresses(8081)
        );
        assert_eq!(
            parse(&["--metrics-addr=0"]).unwrap().run.metrics_addr,
            ListenAddr::Off
        );
        assert_eq!(
            parse(&["--metrics-addr=[::1]:9090"])
                .unwrap()
                .run
                .metrics_addr,
            ListenAddr::At("[::1]:9090".parse().unwrap())
        );
        for bad in [":http", "localhost:8080", ":70000"] {
            let text = parse(&[&format!("--metrics-addr={bad}")])
                .unwrap_err()
                .to_string();
            assert!(text.contains("expected e.g. :8080"), "{bad}: {text}");
        }
        assert!(!cli.run.enable_leader_election);
        assert!(
            parse(&["--enable-leader-election"])
                .unwrap()
                .run
                .enable_leader_election
        );
    }

    #[test]
    fn defaults_match_the_spec() {
        let run = parse(&[]).unwrap().run;
        assert_eq!(run.browser_pod_creation_timeout, Duration::from_secs(300));
        assert_eq!(run.browser_pod_deletion_timeout, Duration::from_secs(300));
        assert_eq!(run.browser_max_lifetime, Duration::ZERO);
        assert_eq!(run.failed_browser_retention, Duration::ZERO);
        assert!(run.namespaces.is_empty());
        assert_eq!(run.leader_election_id, "controller.selenosis.io");
        assert_eq!(run.leader_election_namespace, None);
        assert_eq!(run.leader_election_lease_duration, Duration::from_secs(15));
        assert_eq!(run.leader_election_renew_deadline, Duration::from_secs(10));
        assert_eq!(run.leader_election_retry_period, Duration::from_secs(2));
        assert_eq!(run.shutdown_timeout, Duration::from_secs(25));
        assert_eq!(run.api_probe_timeout, Duration::from_secs(2));
        assert_eq!(run.startup_timeout, Duration::from_secs(120));
        assert_eq!(run.queue_timeout, Duration::from_secs(120));
        assert!(!run.enable_prepull);
        assert_eq!(run.prepull_images.images(), HelperImages::default());
    }

    #[test]
    fn prepull_is_switched_on_by_flag_and_its_images_can_be_mirrored() {
        let run = parse(&[
            "--enable-prepull",
            "--prepull-helper-image=mirror/busybox:1",
            "--prepull-pause-image",
            "mirror/pause:1",
        ])
        .unwrap()
        .run;
        assert!(run.enable_prepull);
        assert_eq!(run.prepull_images.images().helper, "mirror/busybox:1");
        assert_eq!(run.prepull_images.images().pause, "mirror/pause:1");
        assert!(
            !parse(&["--enable-prepull=false"])
                .unwrap()
                .run
                .enable_prepull
        );
        assert!(parse(&["--prepull-helper-image="]).is_err());
    }

    #[test]
    fn bad_durations_are_clear_errors() {
        let err = parse(&["--browser-pod-creation-timeout=banana"]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("--browser-pod-creation-timeout"), "{text}");
        assert!(text.contains("banana"), "{text}");
    }

    #[test]
    fn invalid_log_levels_are_clear_errors() {
        for bad in ["verbose", "warning", "info,loud", "browser_controller=loud"] {
            let text = parse(&[&format!("--log-level={bad}")])
                .unwrap_err()
                .to_string();
            assert!(text.contains("--log-level"), "{text}");
            assert!(text.contains("loud") || text.contains(bad), "{text}");
            assert!(text.contains("expected one of"), "{text}");
        }
        for good in [
            "debug",
            "WARN",
            "off",
            "info,browser_controller=debug,kube=warn",
        ] {
            assert_eq!(
                parse(&[&format!("--log-level={good}")])
                    .unwrap()
                    .run
                    .log_level,
                good
            );
        }
    }

    #[test]
    fn help_says_that_no_subcommand_runs_the_operator() {
        use clap::CommandFactory;
        for help in [
            Cli::command().render_help().to_string(),
            Cli::command().render_long_help().to_string(),
        ] {
            assert!(
                help.contains("Without a subcommand, browser-controller runs the operator"),
                "{help}"
            );
        }
    }

    #[test]
    fn namespaces_repeat() {
        let run = parse(&["--namespace=a", "--namespace", "b"]).unwrap().run;
        assert_eq!(run.namespaces, ["a", "b"]);
    }

    #[test]
    fn subcommands_parse() {
        let cli = parse(&[
            "render",
            "--config",
            "a.yaml",
            "--config",
            "b.yaml",
            "--browser",
            "b.yaml",
            "-o",
            "json",
        ])
        .unwrap();
        match cli.command {
            Some(Command::Render(r)) => {
                assert_eq!(r.configs.len(), 2);
                assert_eq!(r.output, OutputFormat::Json);
                assert!(!r.prepull);
            }
            other => panic!("unexpected {other:?}"),
        }
        // --prepull needs no Browser, and takes none.
        match parse(&["render", "--prepull", "-c", "a.yaml"])
            .unwrap()
            .command
        {
            Some(Command::Render(r)) => assert!(r.prepull && r.browser.is_none()),
            other => panic!("unexpected {other:?}"),
        }
        assert!(parse(&["render", "-c", "a.yaml"]).is_err());
        assert!(parse(&["render", "--prepull", "-c", "a.yaml", "-b", "b.yaml"]).is_err());
        assert!(matches!(
            parse(&["crds", "--split-groups"]).unwrap().command,
            Some(Command::Crds(CrdsArgs {
                split_groups: true,
                kubernetes_version: None
            }))
        ));
    }
}
