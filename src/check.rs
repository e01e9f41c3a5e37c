//! `browser-controller check`: verifies an install the way a user would ask, one line per
//! check (docs/operations.md, "`check`"): the API server answers, the CRDs are there and have
//! every field this binary writes, the operator's identity has every permission of the chosen
//! mode, the events API is served, and the pod a Browser would get in a namespace passes a
//! server-side dry run (so quota, admission and Pod Security refusals show before the first
//! session). A failed check names its fix; the command exits non-zero when any failed.

use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, Config};
use serde_json::Value;

use crate::api::browser;
use crate::api::crd::{self, Layout, compare};
use crate::api::keys;
use crate::api::kinds::Kinds;
use crate::cli::CheckArgs;
use crate::config::lookup;
use crate::controller::{discovery, openapi};
use crate::lifecycle::desired;
use crate::lifecycle::plan::{PodCreation, Settings};
use crate::lifecycle::reason::Reason;
use crate::lifecycle::rejection;
use crate::link::error::describe;
use crate::permissions::{self, PermissionError};

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Fail,
    /// Not run: an earlier check it rests on failed.
    Skip,
}

/// One check's line, and for a failure the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub outcome: Outcome,
    pub what: &'static str,
    pub detail: String,
    pub fix: Option<String>,
}

impl Line {
    fn ok(what: &'static str, detail: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::Ok,
            what,
            detail: detail.into(),
            fix: None,
        }
    }

    fn fail(what: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::Fail,
            what,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn skip(what: &'static str, why: &str) -> Self {
        Self {
            outcome: Outcome::Skip,
            what,
            detail: why.to_string(),
            fix: None,
        }
    }
}

/// Every check's line, in order.
#[derive(Debug, Default)]
pub struct Report(pub Vec<Line>);

impl Report {
    /// Whether every check ran and passed.
    pub fn passed(&self) -> bool {
        self.0.iter().all(|line| line.outcome == Outcome::Ok)
    }
}

/// `ok    what: detail`, `FAIL  what: detail` with `      fix: …` below, `skip  what: why`;
/// a detail of several lines is indented under its check.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.0 {
            let tag = match line.outcome {
                Outcome::Ok => "ok",
                Outcome::Fail => "FAIL",
                Outcome::Skip => "skip",
            };
            let mut detail = line.detail.lines();
            writeln!(
                f,
                "{tag:<5} {}: {}",
                line.what,
                detail.next().unwrap_or_default()
            )?;
            for more in detail {
                writeln!(f, "        {more}")?;
            }
            if let Some(fix) = &line.fix {
                writeln!(f, "      fix: {fix}")?;
            }
        }
        Ok(())
    }
}

const API: &str = "API server";
const CRDS: &str = "CRDs";
const PERMISSIONS: &str = "permissions";
const EVENTS: &str = "events API";
const DRY_RUN: &str = "pod dry run";

/// The checks after the API server's, skipped when it cannot be reached.
const AFTER_API: [&str; 4] = [CRDS, PERMISSIONS, EVENTS, DRY_RUN];

/// Runs every check.
pub async fn run(args: &CheckArgs) -> Report {
    let mut report = Report::default();
    let (client, operator) = match connect(args).await {
        Ok((line, client, operator)) => {
            report.0.push(line);
            (client, operator)
        }
        Err((line, why)) => {
            report.0.push(line);
            skip_rest(&mut report, &AFTER_API, why);
            return report;
        }
    };
    let run = &args.run;
    let groups = (
        run.browser_api_group.as_deref(),
        run.browserconfig_api_group.as_deref(),
    );
    let kinds = match discovery::resolve(&client, groups.0, groups.1).await {
        Ok(kinds) => kinds,
        Err(e) => {
            report.0.push(Line::fail(
                CRDS,
                e.to_string(),
                "kubectl apply --server-side -f crds/ (or crds/split-groups/ beside the selenosis Helm chart's CRDs)",
            ));
            let rest = [PERMISSIONS, EVENTS, DRY_RUN];
            skip_rest(&mut report, &rest, "the CRDs are missing");
            return report;
        }
    };
    report.0.push(crds(&client, &kinds).await);
    let identity = args.service_account.trim();
    let permissions = permissions(&operator, &kinds, args, identity).await;
    report.0.push(permissions);
    report.0.push(events(&client).await);
    report.0.push(dry_run(&operator, &kinds, args).await);
    report
}

/// The API server's line, a client as the kubeconfig's user and one as the operator; or the
/// failing line and why the rest is skipped.
async fn connect(args: &CheckArgs) -> Result<(Line, Client, Client), (Line, &'static str)> {
    let config = Config::infer().await.map_err(|e| {
        let fix = "set KUBECONFIG (or the current context) to the cluster to check";
        let line = Line::fail(API, format!("cannot load a kubeconfig: {e}"), fix);
        (line, "no kubeconfig")
    })?;
    let url = config.cluster_url.to_string();
    let operator_config = operator_identity(config.clone(), args.service_account.trim());
    let (client, operator) = match (Client::try_from(config), Client::try_from(operator_config)) {
        (Ok(client), Ok(operator)) => (client, operator),
        (Err(e), _) | (_, Err(e)) => {
            let line = Line::fail(
                API,
                format!("cannot build a client for {url}: {}", describe(&e)),
                "check the kubeconfig's server, certificates and credentials",
            );
            return Err((line, "no client"));
        }
    };
    match client.apiserver_version().await {
        Ok(version) => {
            let line = Line::ok(API, format!("Kubernetes {} at {url}", version.git_version));
            Ok((line, client, operator))
        }
        Err(e) => {
            let line = Line::fail(
                API,
                format!("cannot reach {url}: {}", describe(&e)),
                "check that the API server is reachable from here and the kubeconfig points at it",
            );
            Err((line, "the API server did not answer"))
        }
    }
}

fn skip_rest(report: &mut Report, checks: &[&'static str], why: &str) {
    report
        .0
        .extend(checks.iter().map(|what| Line::skip(what, why)));
}

/// The kubeconfig acting as the operator's ServiceAccount (`NAMESPACE/NAME`); as itself when
/// `service_account` is empty.
fn operator_identity(mut config: Config, service_account: &str) -> Config {
    if let Some((ns, name)) = service_account.split_once('/') {
        config.auth_info.impersonate = Some(format!("system:serviceaccount:{ns}:{name}"));
    }
    config
}

/// Who the operator is, as the lines name it.
fn identity_name(service_account: &str) -> String {
    match service_account.split_once('/') {
        Some((ns, name)) => format!("ServiceAccount {ns}/{name}"),
        None => "the kubeconfig's identity".to_string(),
    }
}

/// Both CRDs have every field of those this binary generates.
async fn crds(client: &Client, kinds: &Kinds) -> Line {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let expected: Vec<Value> = Layout::ALL.into_iter().flat_map(crd::crds).collect();
    let mut found = Vec::new();
    let mut outdated = Vec::new();
    for kind in [&kinds.browser, &kinds.browserconfig] {
        let name = format!("{}.{}", kind.plural, kind.group);
        let installed = match api.get(&name).await {
            Ok(installed) => installed,
            // Not every user may read CRDs; discovery found them, which is enough to run.
            Err(e) => {
                return Line::ok(
                    CRDS,
                    format!(
                        "{} found (their fields not compared: cannot read CustomResourceDefinitions: {})",
                        found_names(kinds),
                        describe(&e)
                    ),
                );
            }
        };
        let installed = serde_json::to_value(&installed).unwrap_or(Value::Null);
        let Some(ours) = expected.iter().find(|c| c["metadata"]["name"] == name) else {
            found.push(name);
            continue;
        };
        let missing = compare::missing_fields(&installed, ours);
        if missing.is_empty() {
            found.push(name);
        } else {
            outdated.push(format!("{name} lacks {}", missing.join(", ")));
        }
    }
    if outdated.is_empty() {
        Line::ok(
            CRDS,
            format!("{} have every field this version writes", found.join(", ")),
        )
    } else {
        Line::fail(
            CRDS,
            format!(
                "older than this browser-controller; the API server drops what they lack from every write:\n{}",
                outdated.join("\n")
            ),
            "kubectl apply --server-side -f crds/ (or crds/split-groups/): CRD changes are additive, stored objects stay",
        )
    }
}

fn found_names(kinds: &Kinds) -> String {
    format!(
        "{}.{}, {}.{}",
        kinds.browser.plural,
        kinds.browser.group,
        kinds.browserconfig.plural,
        kinds.browserconfig.group
    )
}

/// Which mode the flags choose, as the lines name it.
fn mode(args: &CheckArgs) -> String {
    let run = &args.run;
    let mut mode = if run.namespaces.is_empty() {
        "cluster-wide mode".to_string()
    } else {
        format!("namespace-scoped mode ({})", run.namespaces.join(", "))
    };
    if run.enable_prepull {
        mode.push_str(" with image pre-pull");
    }
    if run.enable_leader_election {
        mode.push_str(" with leader election");
    }
    mode
}

/// Every permission of the chosen mode, reviewed as the operator's identity.
async fn permissions(operator: &Client, kinds: &Kinds, args: &CheckArgs, identity: &str) -> Line {
    let run = &args.run;
    let mut needed = permissions::required(kinds, &run.namespaces);
    if run.enable_prepull {
        needed.extend(permissions::prepull(&run.namespaces));
    }
    if run.enable_leader_election {
        // As the operator does: the flag, else its ServiceAccount's namespace.
        let namespace = run
            .leader_election_namespace
            .clone()
            .or_else(|| identity.split_once('/').map(|(ns, _)| ns.to_string()));
        match namespace {
            Some(ns) => needed.extend(permissions::lease(&ns)),
            None => {
                return Line::fail(
                    PERMISSIONS,
                    "leader election needs the Lease's namespace",
                    "pass --leader-election-namespace, or --service-account NAMESPACE/NAME",
                );
            }
        }
    }
    let count = needed.len();
    let who = identity_name(identity);
    match permissions::check_accesses(operator, needed, permissions::CHECK_TIMEOUT).await {
        Ok(()) => Line::ok(
            PERMISSIONS,
            format!("{who} has all {count} permissions of {}", mode(args)),
        ),
        Err(PermissionError::Missing(missing)) => {
            let lines: Vec<String> = missing
                .iter()
                .map(|a| permissions::missing_line(a))
                .collect();
            Line::fail(
                PERMISSIONS,
                format!("{who} lacks, for {}:\n{}", mode(args), lines.join("\n")),
                permissions::hints(&missing).join("; "),
            )
        }
        Err(PermissionError::Review { source, .. })
            if matches!(&source, kube::Error::Api(s) if s.code == 403) && !identity.is_empty() =>
        {
            Line::fail(
                PERMISSIONS,
                format!("cannot act as {who}: {}", describe(&source)),
                "run check as a user who may impersonate ServiceAccounts (a cluster admin), or pass --service-account= to check the kubeconfig's own identity",
            )
        }
        Err(e) => Line::fail(
            PERMISSIONS,
            e.to_string(),
            "check that the API server answers SelfSubjectAccessReviews",
        ),
    }
}

/// The `events.k8s.io/v1` API the operator records Events with.
async fn events(client: &Client) -> Line {
    match client.list_api_group_resources("events.k8s.io/v1").await {
        Ok(list) if list.resources.iter().any(|r| r.name == "events") => {
            Line::ok(EVENTS, "events.k8s.io/v1 is served")
        }
        Ok(_) | Err(_) => Line::fail(
            EVENTS,
            "events.k8s.io/v1 is not served: the operator cannot record Events about Browsers",
            "use Kubernetes 1.24 or newer",
        ),
    }
}

/// The namespace of the pod dry run.
fn dry_run_namespace(args: &CheckArgs) -> String {
    args.dry_run_namespace
        .clone()
        .or_else(|| args.run.namespaces.first().cloned())
        .unwrap_or_else(|| "default".to_string())
}

/// The name of the dry run's pod (and Browser); nothing of that name is stored.
const CHECK_POD: &str = "browser-controller-check";

/// The version a `*` entry stands for in the dry run.
const ANY_VERSION: &str = "1.0";

/// The pod a Browser would get in the dry-run namespace, rendered as the operator renders it
/// and sent as a server-side dry run under the operator's identity.
async fn dry_run(operator: &Client, kinds: &Kinds, args: &CheckArgs) -> Line {
    let namespace = dry_run_namespace(args);
    let configs_api: Api<DynamicObject> =
        Api::namespaced_with(operator.clone(), &namespace, &kinds.browserconfig);
    let configs = match configs_api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => {
            return Line::fail(
                DRY_RUN,
                format!(
                    "cannot list BrowserConfigs in namespace {namespace}: {}",
                    describe(&e)
                ),
                "see the permissions check above",
            );
        }
    };
    let chosen = entry(&configs, args.browser.as_deref());
    let Some((name, version)) = chosen else {
        return Line::fail(
            DRY_RUN,
            format!(
                "no BrowserConfig entry in namespace {namespace}: every Browser there fails with ConfigNotFound"
            ),
            "apply a BrowserConfig there (testdata/configs/ has examples), or pass --dry-run-namespace",
        );
    };
    let Some(browser) =
        browser::for_dry_run(&kinds.browser, Some(&namespace), CHECK_POD, &name, &version)
    else {
        return Line::fail(
            DRY_RUN,
            format!("{name}:{version} is not a browser name and version"),
            "pass --browser NAME:VERSION",
        );
    };
    let schema = openapi::fetch_pod_schema(operator).await.ok();
    let policy = Settings::from(&args.run).policy;
    let what = format!("a Browser {name} {version} in namespace {namespace}");
    let pod = match desired::pod_for(
        &browser,
        &configs,
        &kinds.browser,
        &policy,
        schema.as_ref(),
        |_, _, _| None,
    ) {
        PodCreation::Render { pod, .. } => pod,
        PodCreation::Fail(failure) => {
            return Line::fail(
                DRY_RUN,
                format!("{what} would fail: {}: {}", failure.reason, failure.message),
                fix_for(&failure.reason),
            );
        }
    };
    submit(operator, kinds, &namespace, &what, &pod).await
}
/// The browser and version to check: `--browser NAME:VERSION`, else the first entry the
/// BrowserConfigs resolve (a `*` entry for any version).
fn entry(configs: &[DynamicObject], browser: Option<&str>) -> Option<(String, String)> {
    match browser {
        Some(key) => key
            .split_once(':')
            .map(|(n, v)| (n.to_string(), v.to_string())),
        None => configs
            .iter()
            .flat_map(lookup::resolvable_entries)
            .next()
            .map(|(name, version)| {
                let version = if version == "*" {
                    ANY_VERSION.to_string()
                } else {
                    version
                };
                (name, version)
            }),
    }
}

/// Submits `pod`, the pod of `what`, as a server-side dry run.
async fn submit(
    operator: &Client,
    kinds: &Kinds,
    namespace: &str,
    what: &str,
    pod: &Value,
) -> Line {
    let pods: Api<DynamicObject> = Api::namespaced_with(operator.clone(), namespace, &kinds.pod);
    let params = PatchParams::apply(keys::FIELD_MANAGER).force().dry_run();
    match pods.patch(CHECK_POD, &params, &Patch::Apply(pod)).await {
        Ok(_) => Line::ok(
            DRY_RUN,
            format!("{what} gets a pod the API server accepts (quota, admission, Pod Security)"),
        ),
        Err(kube::Error::Api(status)) => {
            let failure = rejection::classify(status.code, &status.message)
                .remedy
                .failure();
            let reason = failure.as_ref().map_or("refused", |f| f.reason.as_str());
            Line::fail(
                DRY_RUN,
                format!(
                    "{what} would fail: the API server refused its pod ({} {reason}): {}",
                    status.code, status.message
                ),
                fix_for(reason),
            )
        }
        Err(e) => Line::fail(
            DRY_RUN,
            format!("the dry run of {what}'s pod failed: {}", describe(&e)),
            "check the API server's health and try again",
        ),
    }
}

/// The fix for a failure reason of the dry run.
fn fix_for(reason: &str) -> String {
    let fix = match reason {
        r if r == Reason::QuotaExceeded.as_str() => {
            "raise the namespace's ResourceQuota, or lower the BrowserConfig's requests and limits"
        }
        r if r == Reason::Forbidden.as_str() => {
            "an admission policy forbade the pod: for Pod Security, run the operator with --pod-security-level=restricted in restricted namespaces (docs/security.md)"
        }
        r if r == Reason::InvalidPodSpec.as_str() || r == Reason::InvalidConfig.as_str() => {
            "fix the BrowserConfig entry named above (browser-controller render shows the pod)"
        }
        r if r == Reason::ConfigNotFound.as_str() => {
            "apply a BrowserConfig with that browser and version in the namespace"
        }
        _ => "see docs/behaviour.md, \"Messages\", for the reason",
    };
    fix.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_shows_a_line_per_check_and_a_fix_under_a_failure() {
        let report = Report(vec![
            Line::ok(API, "Kubernetes v1.36.2 at https://k:6443/"),
            Line::fail(
                PERMISSIONS,
                "ServiceAccount a/b lacks:\nmissing permission: cannot list pods in all namespaces",
                "grant it",
            ),
            Line::skip(DRY_RUN, "the CRDs are missing"),
        ]);
        assert_eq!(
            report.to_string(),
            "ok    API server: Kubernetes v1.36.2 at https://k:6443/\n\
             FAIL  permissions: ServiceAccount a/b lacks:\n\
             \x20       missing permission: cannot list pods in all namespaces\n\
             \x20     fix: grant it\n\
             skip  pod dry run: the CRDs are missing\n"
        );
        assert!(!report.passed());
        assert!(Report(vec![Line::ok(API, "x")]).passed());
        // A skipped check is not a pass.
        assert!(!Report(vec![Line::skip(API, "x")]).passed());
    }

    #[test]
    fn the_identity_is_the_service_account_or_the_kubeconfigs() {
        assert_eq!(
            identity_name("browser-controller/browser-controller"),
            "ServiceAccount browser-controller/browser-controller"
        );
        assert_eq!(identity_name(""), "the kubeconfig's identity");
    }

    #[test]
    fn each_refusal_of_the_dry_run_names_its_fix() {
        assert!(fix_for("QuotaExceeded").contains("ResourceQuota"));
        assert!(fix_for("Forbidden").contains("--pod-security-level=restricted"));
        assert!(fix_for("InvalidPodSpec").contains("render"));
        assert!(fix_for("ConfigNotFound").contains("apply a BrowserConfig"));
        assert!(fix_for("Evicted").contains("docs/behaviour.md"));
    }
}
