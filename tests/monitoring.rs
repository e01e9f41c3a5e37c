//! `deploy/monitoring/` against what it monitors, so that nothing there breaks silently:
//! - Prometheus' own `promtool` checks the alerting rules, the dashboard's expressions and the
//!   metric names of a real scrape, and runs the rule unit tests of
//!   `tests/monitoring/alerts.test.yaml` (each alert fires on the series it is meant for and
//!   stays quiet on a healthy operator), whose series are checked to be ones the operator
//!   exports;
//! - a fresh operator with nothing to do exports every family the alerts and the dashboard
//!   use, and every metric name and label they query is one the operator exports (a token
//!   scan: promtool checks the syntax);
//! - the ServiceMonitor and PodMonitor select the Service and pods of `deploy/` by their labels
//!   and port names, every alert carries what Alertmanager and the on-call need, every
//!   dashboard panel queries something, and docs/operations.md, "Monitoring" lists every alert
//!   and panel.
//!
//! The promtool tests skip, saying so, where promtool (`PROMTOOL`, else on `PATH`) is absent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use browser_controller::api::crd::{self, Layout};
use browser_controller::manifest;
use testkit::apiserver::ApiServer;
use testkit::host::{self, TempDir, free_port, http_get};
use testkit::markdown::{anchor, headings};
use testkit::metrics::{Families, exported, with_every_family};

const BIN: &str = env!("CARGO_BIN_EXE_browser-controller");
const MONITORING: &str = "deploy/monitoring";
const SERVICE_MONITOR: &str = "deploy/monitoring/service-monitor.yaml";
const POD_MONITOR: &str = "deploy/monitoring/pod-monitor.yaml";
const RULES: &str = "deploy/monitoring/prometheus-rule.yaml";
const DASHBOARD: &str = "deploy/monitoring/grafana-dashboard.json";
const OPERATIONS: &str = "docs/operations.md";
const RULE_TESTS: &str = "tests/monitoring/alerts.test.yaml";
/// The name under which the rule tests' `rule_files` expect the PrometheusRule's groups,
/// next to the test file.
const EXTRACTED_RULES: &str = "prometheus-rule.groups.yaml";

/// Labels Prometheus attaches to every series of a target found by a ServiceMonitor or a
/// PodMonitor. Not `namespace`: the monitors honor the operator's own `namespace` label, so
/// a query may use it only where the operator exports it.
const TARGET_LABELS: [&str; 6] = ["job", "instance", "pod", "container", "service", "endpoint"];

/// Clauses whose parenthesised list names labels.
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

const PREFIX: &str = "browser_controller_";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn objects(path: &str) -> Vec<Value> {
    manifest::read_file(&repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The only object of `kind` in the file at `path`.
fn the(path: &str, kind: &str) -> Value {
    let mut found: Vec<Value> = objects(path)
        .into_iter()
        .filter(|o| o["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "{path}: expected one {kind}");
    found.remove(0)
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(repo().join(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

// ---- what the files query ------------------------------------------------------------------

/// One query of the alerts or the dashboard, with the labels it shows (`$labels.x` in an
/// alert's annotations, `{{x}}` in a panel's legend).
struct Query {
    origin: String,
    expr: String,
    shown: BTreeSet<String>,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The names after `marker` in `text` (`$labels.` → `reason`).
fn names_after(text: &str, marker: &str) -> Vec<String> {
    text.match_indices(marker)
        .map(|(at, _)| {
            text[at + marker.len()..]
                .chars()
                .take_while(|c| is_name_char(*c))
                .collect()
        })
        .collect()
}

/// Every alerting or recording rule of the PrometheusRule.
fn rules() -> Vec<Value> {
    rule_groups()
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// `spec.groups` of the PrometheusRule: a Prometheus rule file's `groups`.
fn rule_groups() -> Vec<Value> {
    let rule = the(RULES, "PrometheusRule");
    rule["spec"]["groups"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("{RULES}: spec.groups is a list"))
}

fn alerts() -> Vec<Value> {
    rules()
        .into_iter()
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// Every panel of the dashboard, those nested in rows included.
fn panels(dashboard: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().cloned().unwrap_or_default() {
        out.extend(panel["panels"].as_array().cloned().unwrap_or_default());
        out.push(panel);
    }
    out
}

fn queries() -> Vec<Query> {
    let mut out = Vec::new();
    for rule in rules() {
        let name = rule["alert"].as_str().or(rule["record"].as_str());
        let templates = format!("{} {}", rule["annotations"], rule["labels"]);
        out.push(Query {
            origin: format!("{RULES}, rule {}", name.unwrap_or("without a name")),
            expr: rule["expr"].as_str().unwrap_or_default().to_string(),
            shown: names_after(&templates, "$labels.").into_iter().collect(),
        });
    }
    for panel in panels(&dashboard()) {
        for target in panel["targets"].as_array().cloned().unwrap_or_default() {
            let legend = target["legendFormat"].as_str().unwrap_or_default();
            out.push(Query {
                origin: format!(
                    "{DASHBOARD}, panel {:?}, target {}",
                    panel["title"].as_str().unwrap_or_default(),
                    target["refId"]
                ),
                expr: target["expr"].as_str().unwrap_or_default().to_string(),
                shown: names_after(legend, "{{")
                    .into_iter()
                    .chain(names_after(legend, "{{ "))
                    .filter(|l| !l.is_empty())
                    .collect(),
            });
        }
    }
    out
}

/// The operator's metric names in an expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.match_indices(PREFIX)
        .filter(|(at, _)| !expr[..*at].ends_with(is_name_char))
        .map(|(at, _)| {
            expr[at..]
                .chars()
                .take_while(|c| is_name_char(*c))
                .collect()
        })
        .collect()
}

/// The label names in the parenthesised lists of the `by`, `without`, `on`, `ignoring` and
/// `group_*` clauses of an expression, and left of the matchers of its selectors (`{a="x"}`).
fn label_names(expr: &str) -> BTreeSet<String> {
    let names = |list: &str| -> Vec<String> {
        list.split(',')
            .map(|item| {
                item.trim()
                    .chars()
                    .take_while(|c| is_name_char(*c))
                    .collect()
            })
            .filter(|name: &String| !name.is_empty())
            .collect()
    };
    let mut out = BTreeSet::new();
    for clause in GROUPING {
        for (at, _) in expr.match_indices(clause) {
            let rest = &expr[at + clause.len()..];
            if expr[..at].ends_with(is_name_char) || rest.starts_with(is_name_char) {
                continue;
            }
            if let Some((list, _)) = rest
                .trim_start()
                .strip_prefix('(')
                .and_then(|r| r.split_once(')'))
            {
                out.extend(names(list));
            }
        }
    }
    for selector in expr.split('{').skip(1) {
        out.extend(names(selector.split('}').next().unwrap_or_default()));
    }
    out
}

/// The family a series name belongs to, and whether it is a histogram's `_bucket` series.
fn resolve(name: &str, families: &Families) -> Result<(String, bool), String> {
    if families.contains_key(name) {
        return Ok((name.to_string(), false));
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && families.get(base).is_some_and(|f| f.kind == "histogram")
        {
            return Ok((base.to_string(), suffix == "_bucket"));
        }
    }
    let hint = if families.contains_key(&format!("{name}_total")) {
        " (a counter: query it with _total)"
    } else {
        ""
    };
    Err(format!(
        "queries {name}, which the operator does not export{hint}"
    ))
}

/// What is wrong with one query against `families`: names the operator does not export, and
/// labels that none of the families it reads (nor the scrape target) carries.
fn problems_of(query: &Query, families: &Families) -> Vec<String> {
    let mut problems = Vec::new();
    let mut read = BTreeSet::new();
    let mut carried: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
    let names = metric_names(&query.expr);
    if names.is_empty() {
        problems.push("queries no metric of the operator".to_string());
    }
    for name in names {
        match resolve(&name, families) {
            Ok((family, bucket)) => {
                carried.extend(families[&family].labels.iter().cloned());
                if bucket {
                    carried.insert("le".into());
                }
                read.insert(family);
            }
            Err(problem) => problems.push(problem),
        }
    }
    for label in label_names(&query.expr).iter().chain(&query.shown) {
        if !carried.contains(label) {
            problems.push(format!(
                "uses the label {label}, which none of {read:?} carries"
            ));
        }
    }
    problems
        .into_iter()
        .map(|p| format!("{}: {p}", query.origin))
        .collect()
}

fn problems_of_the_files(families: &Families) -> Vec<String> {
    queries()
        .iter()
        .flat_map(|q| problems_of(q, families))
        .collect()
}

fn query(expr: &str) -> Query {
    Query {
        origin: "test".into(),
        expr: expr.into(),
        shown: BTreeSet::new(),
    }
}

#[test]
fn the_scan_reports_names_and_labels_the_operator_does_not_export() {
    let families = exported();
    let cases = [
        (
            "rate(browser_controller_made_up_total[5m])",
            "browser_controller_made_up_total, which the operator does not export",
        ),
        (
            "sum(browser_controller_reconciles)",
            "(a counter: query it with _total)",
        ),
        (
            "rate(browser_controller_api_writes_bucket[5m])",
            "browser_controller_api_writes_bucket, which the operator does not export",
        ),
        (
            "sum by (verb, verbs) (rate(browser_controller_api_writes_total[5m]))",
            "the label verbs",
        ),
        (
            "browser_controller_api_writes_total{verb=\"apply\", reason=\"x\"}",
            "the label reason",
        ),
        (
            "sum by (le) (rate(browser_controller_startup_seconds_count[5m]))",
            "the label le",
        ),
        (
            "sum(x) / on(stages) group_left() sum(browser_controller_startup_seconds_count)",
            "the label stages",
        ),
        ("sum(up)", "queries no metric of the operator"),
    ];
    for (expr, expected) in cases {
        let problems = problems_of(&query(expr), &families);
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{expr}: expected a problem containing {expected:?}, got {problems:?}"
        );
    }
    for expr in [
        "sum by (phase) (browser_controller_browsers{namespace=~\"team-.*\"})",
        "histogram_quantile(0.99, sum by (le, stage) (rate(browser_controller_startup_seconds_bucket{stage=\"running\"}[$__rate_interval])))",
        "sum by (reason) (increase(browser_controller_browser_failures_total[30m])) / on() group_left() sum(increase(browser_controller_browser_deletions_total[30m]))",
        "min by (pod) (browser_controller_api_reachable) == bool 0",
    ] {
        let problems = problems_of(&query(expr), &families);
        assert!(problems.is_empty(), "{expr}: {problems:?}");
    }
}

#[test]
fn every_metric_and_label_the_alerts_and_the_dashboard_use_is_exported() {
    let families = exported();
    let queries = queries();
    assert!(
        queries.len() >= 20,
        "expected the alerts and the dashboard panels, found {} queries",
        queries.len()
    );
    let problems = problems_of_the_files(&families);
    assert!(
        problems.is_empty(),
        "deploy/monitoring/ drifted from the metrics:\n{}",
        problems.join("\n")
    );
}

/// A renamed family, or one that lost a label, breaks every query of it: the check above
/// fails for each family and label the files use, not only for made-up names.
#[test]
fn renaming_any_family_or_label_the_files_use_is_reported() {
    let families = exported();
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for query in queries() {
        let labels: BTreeSet<String> = label_names(&query.expr)
            .into_iter()
            .chain(query.shown.iter().cloned())
            .collect();
        for name in metric_names(&query.expr) {
            let (family, _) = resolve(&name, &families).expect("an exported family");
            let carried: Vec<String> = labels
                .iter()
                .filter(|l| families[&family].labels.contains(*l))
                .cloned()
                .collect();
            used.entry(family).or_default().extend(carried);
        }
    }
    assert!(used.len() >= 10, "{used:?}");
    for (family, labels) in &used {
        let mut renamed = families.clone();
        let was = renamed.remove(family).expect("an exported family");
        renamed.insert(format!("{family}_renamed"), was);
        assert!(
            problems_of_the_files(&renamed)
                .iter()
                .any(|p| p.contains(family.as_str())),
            "renaming {family} goes unnoticed"
        );
        for label in labels {
            let mut relabelled = families.clone();
            let of = relabelled.get_mut(family).expect("an exported family");
            of.labels.remove(label);
            of.labels.insert(format!("{label}_renamed"));
            assert!(
                !problems_of_the_files(&relabelled).is_empty(),
                "renaming the label {label} of {family} goes unnoticed"
            );
        }
    }
}

// ---- a fresh operator ----------------------------------------------------------------------

/// Kills the operator process when the scrape is done or a wait panics.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        host::kill(&mut self.0);
    }
}

/// The `/metrics` text of an operator process with nothing to do: started against the API
/// server double with the CRDs installed and no Browser, scraped once it is ready. One
/// process serves every test of this file.
fn fresh_scrape() -> &'static str {
    static SCRAPE: OnceLock<String> = OnceLock::new();
    SCRAPE.get_or_init(|| {
        let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
        runtime.block_on(async {
            let server = ApiServer::new();
            for crd in crd::crds(Layout::Default) {
                server.install_crd(&crd).expect("the CRDs install");
            }
            let served = server.serve().await.expect("the double serves");
            let dir = TempDir::new("fresh-scrape");
            let kubeconfig = dir.join("kubeconfig");
            served.write_kubeconfig(&kubeconfig).expect("a kubeconfig");
            let log = dir.join("operator.log");
            let (metrics, health) = (free_port(), free_port());
            let child = Command::new(BIN)
                .args([
                    &format!("--metrics-addr=127.0.0.1:{metrics}"),
                    &format!("--health-probe-bind-address=127.0.0.1:{health}"),
                    "--log-level=warn",
                ])
                .env("KUBECONFIG", &kubeconfig)
                .env_remove("RUST_LOG")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("a log file"))
                .spawn()
                .expect("the operator starts");
            let _running = Running(child);
            // The double serves from this runtime's workers while this thread waits.
            host::wait_until(
                "/readyz",
                Duration::from_secs(30),
                || http_get(health, "/readyz").is_some_and(|(s, _)| s == 200),
                || std::fs::read_to_string(&log).unwrap_or_default(),
            );
            let (status, body) = http_get(metrics, "/metrics").expect("/metrics answers");
            assert_eq!(status, 200, "{body}");
            body
        })
    })
}

/// The families of a text exposition by the name users query (counters with `_total`), and
/// whether each has a sample.
fn families_of(scrape: &str) -> BTreeMap<String, bool> {
    let mut families: BTreeMap<String, bool> = BTreeMap::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            families.insert(testkit::metrics::queried_name(name, kind), false);
        }
    }
    for line in scrape.lines().filter(|l| !l.starts_with('#')) {
        let series = line.split(['{', ' ']).next().unwrap_or_default();
        let family = ["", "_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| series.strip_suffix(suffix))
            .find(|f| families.contains_key(*f))
            .map(str::to_string);
        if let Some(has) = family.and_then(|f| families.get_mut(&f)) {
            *has = true;
        }
    }
    families
}

/// Every family the alerts and the dashboard read is in the first scrape, with a series (at 0
/// where nothing happened yet), so dashboards show 0 rather than "No data" and `rate()` has
/// a series to work on. Only gauges labelled by `namespace` (derived from the watch caches)
/// have no series while there is nothing to count; their family is listed all the same.
#[test]
fn a_fresh_operator_exports_every_family_the_alerts_and_the_dashboard_use() {
    let every = exported();
    let scrape = families_of(fresh_scrape());
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for query in queries() {
        for name in metric_names(&query.expr) {
            let (family, _) = resolve(&name, &every).expect("an exported family");
            used.insert(family);
        }
    }
    assert!(used.len() >= 15, "{used:?}");
    for family in &used {
        match scrape.get(family) {
            None => problems.push(format!("{family}: not in the scrape")),
            Some(false) if !every[family].labels.contains("namespace") => {
                problems.push(format!("{family}: listed without a series"));
            }
            Some(_) => {}
        }
    }
    assert!(
        problems.is_empty(),
        "a fresh operator's scrape lacks what deploy/monitoring/ uses:\n{}\n\n{}",
        problems.join("\n"),
        fresh_scrape()
    );
}

// ---- promtool --------------------------------------------------------------------------------

/// promtool, from `PROMTOOL` or `PATH`; `None`, with a note, where there is none.
fn promtool(test: &str) -> Option<PathBuf> {
    let found = host::program("PROMTOOL", "promtool");
    if found.is_none() {
        eprintln!(
            "{test}: skipped: no promtool (set PROMTOOL, or install it: apt-get install prometheus)"
        );
    }
    found
}

/// Runs promtool with `args` in `dir`; panics with its output unless it succeeds.
fn run_promtool(promtool: &Path, dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", promtool.display()));
    let input = stdin.unwrap_or_default().to_string();
    let mut pipe = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        pipe.write_all(input.as_bytes())
    });
    let output = child.wait_with_output().expect("promtool runs");
    writer
        .join()
        .expect("stdin written")
        .expect("stdin written");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {}: {}\n{text}",
        args.join(" "),
        output.status
    );
    text
}

/// The PrometheusRule's groups as a Prometheus rule file (JSON is YAML), beside a copy of the
/// rule tests that load it, in a fresh directory.
fn rule_files() -> TempDir {
    let dir = TempDir::new("promtool-rules");
    let groups = json!({ "groups": rule_groups() });
    std::fs::write(
        dir.join(EXTRACTED_RULES),
        serde_json::to_string_pretty(&groups).expect("JSON"),
    )
    .expect("the rule file is written");
    std::fs::copy(repo().join(RULE_TESTS), dir.join("alerts.test.yaml"))
        .unwrap_or_else(|e| panic!("{RULE_TESTS}: {e}"));
    dir
}

#[test]
fn promtool_checks_the_alerting_rules_and_the_dashboard_expressions() {
    let Some(promtool) =
        promtool("promtool_checks_the_alerting_rules_and_the_dashboard_expressions")
    else {
        return;
    };
    let dir = rule_files();
    let out = run_promtool(
        &promtool,
        dir.path(),
        &["check", "rules", EXTRACTED_RULES],
        None,
    );
    assert!(out.contains("SUCCESS"), "{out}");
    // The dashboard's expressions as recording rules, which promtool parses the same way;
    // Grafana's own variables become what they stand for.
    let dashboard: Vec<Value> = queries()
        .iter()
        .filter(|q| q.origin.starts_with(DASHBOARD))
        .enumerate()
        .map(|(i, q)| {
            json!({
                "record": format!("dashboard:target_{i}"),
                "expr": q.expr.replace("$__rate_interval", "1m"),
            })
        })
        .collect();
    assert!(dashboard.len() >= 10, "{dashboard:?}");
    let file = json!({"groups": [{"name": "dashboard", "rules": dashboard}]});
    std::fs::write(
        dir.join("dashboard.rules.yaml"),
        serde_json::to_string_pretty(&file).expect("JSON"),
    )
    .expect("the dashboard rules are written");
    let out = run_promtool(
        &promtool,
        dir.path(),
        &["check", "rules", "dashboard.rules.yaml"],
        None,
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn promtool_unit_tests_of_every_alert_pass() {
    let Some(promtool) = promtool("promtool_unit_tests_of_every_alert_pass") else {
        return;
    };
    let dir = rule_files();
    let out = run_promtool(
        &promtool,
        dir.path(),
        &["test", "rules", "alerts.test.yaml"],
        None,
    );
    assert!(out.contains("SUCCESS"), "{out}");
}

/// An OpenMetrics exposition in the Prometheus text format, the one `promtool check metrics`
/// reads (2.42): a counter's family takes the name of its samples (`_total`), and `# EOF`
/// goes. Otherwise every counter reads as an untyped family without help text.
fn as_prometheus_text(openmetrics: &str) -> String {
    let counters: BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::new();
    for line in openmetrics.lines().filter(|l| *l != "# EOF") {
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|marker| {
            let (name, rest) = line.strip_prefix(marker)?.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{marker}{name}_total {rest}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// The naming conventions of Prometheus (units, `_total` for counters …) on a fresh
/// operator's scrape, and on the exposition of a `Metrics` with a sample in every family.
#[test]
fn promtool_finds_nothing_wrong_with_the_metric_names() {
    let Some(promtool) = promtool("promtool_finds_nothing_wrong_with_the_metric_names") else {
        return;
    };
    let (busy, _registrations) = with_every_family();
    let busy = busy.encode().expect("metrics encode");
    for (what, scrape) in [
        ("a fresh operator", fresh_scrape()),
        ("every family", &busy),
    ] {
        let text = as_prometheus_text(scrape);
        let out = run_promtool(&promtool, &repo(), &["check", "metrics"], Some(&text));
        assert!(
            out.trim().is_empty(),
            "{what}: promtool check metrics:\n{out}"
        );
    }
}

// ---- the rule tests --------------------------------------------------------------------------

fn rule_tests() -> Value {
    let mut documents = objects(RULE_TESTS);
    assert_eq!(documents.len(), 1, "{RULE_TESTS}: one YAML document");
    documents.remove(0)
}

/// Name and label names of a promtool series, `name{a="x", b="y"}`.
fn parse_series(series: &str) -> (String, BTreeSet<String>) {
    let (name, rest) = series.split_once('{').unwrap_or((series, "}"));
    let labels = rest
        .trim_end()
        .trim_end_matches('}')
        .split(',')
        .filter_map(|m| m.split_once('='))
        .map(|(label, _)| label.trim().to_string())
        .collect();
    (name.trim().to_string(), labels)
}

/// The rule tests feed the alerts series the operator exports, by name and labels, so that
/// an alert passing its tests works on a real scrape.
#[test]
fn the_rule_tests_use_the_series_the_operator_exports() {
    let families = exported();
    let tests = rule_tests();
    assert_eq!(
        tests["rule_files"],
        json!([EXTRACTED_RULES]),
        "{RULE_TESTS}: rule_files"
    );
    let mut problems = Vec::new();
    let groups = tests["tests"].as_array().expect("tests");
    for series in groups
        .iter()
        .flat_map(|g| g["input_series"].as_array().cloned().unwrap_or_default())
    {
        let text = series["series"].as_str().unwrap_or_default();
        let (name, labels) = parse_series(text);
        match resolve(&name, &families) {
            Ok((family, bucket)) => {
                for label in labels {
                    let known = families[&family].labels.contains(&label)
                        || TARGET_LABELS.contains(&label.as_str())
                        || (bucket && label == "le");
                    if !known {
                        problems.push(format!("{text}: {family} carries no label {label}"));
                    }
                }
            }
            Err(problem) => problems.push(format!("{text}: {problem}")),
        }
    }
    assert!(
        problems.is_empty(),
        "{RULE_TESTS}:\n{}",
        problems.join("\n")
    );
}

/// Each alert has a test where it fires and one where it stays quiet.
#[test]
fn every_alert_has_a_rule_test_where_it_fires_and_one_where_it_stays_quiet() {
    let tests = rule_tests();
    let (mut fires, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for case in tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|g| g["alert_rule_test"].as_array().cloned().unwrap_or_default())
    {
        let name = case["alertname"].as_str().unwrap_or_default().to_string();
        if case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()) {
            fires.insert(name);
        } else {
            quiet.insert(name);
        }
    }
    let alerts: BTreeSet<String> = alerts()
        .iter()
        .map(|a| a["alert"].as_str().unwrap_or_default().to_string())
        .collect();
    let missing =
        |tested: &BTreeSet<String>| -> Vec<String> { alerts.difference(tested).cloned().collect() };
    assert!(
        missing(&fires).is_empty() && missing(&quiet).is_empty(),
        "{RULE_TESTS}: no test where it fires: {:?}; none where it stays quiet: {:?}",
        missing(&fires),
        missing(&quiet)
    );
}

// ---- the monitors against deploy/ ----------------------------------------------------------

fn deploy_service() -> Value {
    the("deploy/operator/service.yaml", "Service")
}

fn deploy_deployment() -> Value {
    the("deploy/operator/deployment.yaml", "Deployment")
}

/// Whether `selector.matchLabels` selects an object with `labels` (and uses nothing else).
fn selects(selector: &Value, labels: &Value) -> bool {
    let Some(wanted) = selector["matchLabels"].as_object() else {
        return false;
    };
    selector.get("matchExpressions").is_none()
        && !wanted.is_empty()
        && wanted.iter().all(|(key, value)| labels[key] == *value)
}

/// Whether a monitor in `monitor`'s namespace, with its `namespaceSelector`, looks into
/// `namespace`.
fn watches_namespace(monitor: &Value, namespace: &Value) -> bool {
    let selector = &monitor["spec"]["namespaceSelector"];
    if selector["any"] == true {
        return true;
    }
    match selector["matchNames"].as_array() {
        Some(names) => names.contains(namespace),
        None => monitor["metadata"]["namespace"] == *namespace,
    }
}

#[test]
fn the_service_monitor_selects_the_metrics_service_by_its_labels_and_port_name() {
    let monitor = the(SERVICE_MONITOR, "ServiceMonitor");
    let service = deploy_service();
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert!(
        selects(&monitor["spec"]["selector"], &service["metadata"]["labels"]),
        "{SERVICE_MONITOR}: selector {} does not match the labels {} of deploy/operator/service.yaml",
        monitor["spec"]["selector"],
        service["metadata"]["labels"]
    );
    assert!(
        watches_namespace(&monitor, &service["metadata"]["namespace"]),
        "{SERVICE_MONITOR}: does not look into the namespace of deploy/operator/service.yaml"
    );
    let ports: Vec<&Value> = service["spec"]["ports"]
        .as_array()
        .expect("service ports")
        .iter()
        .map(|p| &p["name"])
        .collect();
    let endpoints = monitor["spec"]["endpoints"].as_array().expect("endpoints");
    assert!(!endpoints.is_empty());
    for endpoint in endpoints {
        assert!(
            ports.contains(&&endpoint["port"]),
            "{SERVICE_MONITOR}: port {} is none of the Service's {ports:?}",
            endpoint["port"]
        );
        assert_eq!(endpoint["path"], "/metrics", "{SERVICE_MONITOR}");
        // Else Prometheus renames the operator's `namespace` label `exported_namespace`
        // and every query by namespace reads the operator's own namespace.
        assert_eq!(endpoint["honorLabels"], true, "{SERVICE_MONITOR}");
    }
}

#[test]
fn the_pod_monitor_selects_the_operator_pods_and_their_metrics_port() {
    let monitor = the(POD_MONITOR, "PodMonitor");
    let deployment = deploy_deployment();
    let template = &deployment["spec"]["template"];
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert!(
        selects(
            &monitor["spec"]["selector"],
            &template["metadata"]["labels"]
        ),
        "{POD_MONITOR}: selector {} does not match the pod labels {} of deploy/operator/deployment.yaml",
        monitor["spec"]["selector"],
        template["metadata"]["labels"]
    );
    assert!(
        watches_namespace(&monitor, &deployment["metadata"]["namespace"]),
        "{POD_MONITOR}: does not look into the namespace of deploy/operator/deployment.yaml"
    );
    let ports: Vec<Value> = template["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .map(|p| p["name"].clone())
        .collect();
    let endpoints = monitor["spec"]["podMetricsEndpoints"]
        .as_array()
        .expect("podMetricsEndpoints");
    assert!(!endpoints.is_empty());
    for endpoint in endpoints {
        assert!(
            ports.contains(&endpoint["port"]),
            "{POD_MONITOR}: port {} is none of the pod's {ports:?}",
            endpoint["port"]
        );
        assert_eq!(endpoint["path"], "/metrics", "{POD_MONITOR}");
        assert_eq!(endpoint["honorLabels"], true, "{POD_MONITOR}");
    }
    // The Service the ServiceMonitor scrapes forwards to the same container port.
    let service_port = &deploy_service()["spec"]["ports"][0]["targetPort"];
    assert!(ports.contains(service_port), "{service_port}");
}

#[test]
fn the_monitoring_kustomization_installs_the_service_monitor_the_rules_and_the_dashboard() {
    let kustomization = the(&format!("{MONITORING}/Kustomization"), "Kustomization");
    let resources: Vec<&str> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("a path"))
        .collect();
    for resource in &resources {
        assert!(
            repo().join(MONITORING).join(resource).is_file(),
            "{MONITORING}/Kustomization lists {resource}, which does not exist"
        );
    }
    assert!(resources.contains(&"service-monitor.yaml"), "{resources:?}");
    assert!(resources.contains(&"prometheus-rule.yaml"), "{resources:?}");
    // Both monitors at once would scrape every replica twice.
    assert!(!resources.contains(&"pod-monitor.yaml"), "{resources:?}");
    let generated: Vec<Value> = kustomization["configMapGenerator"]
        .as_array()
        .expect("configMapGenerator")
        .iter()
        .flat_map(|g| g["files"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(generated, [json!("grafana-dashboard.json")]);
    // The CRDs of the Prometheus Operator are not everywhere: deploy/ stays installable
    // without them.
    let base = the("deploy/Kustomization", "Kustomization");
    assert!(
        !base["resources"].to_string().contains("monitoring"),
        "deploy/Kustomization includes the monitoring overlay"
    );
}

// ---- alerts ------------------------------------------------------------------------------

/// Whether a Prometheus duration (`30s`, `5m`, `1h30m`) is well-formed and not zero.
fn is_duration(text: &str) -> bool {
    let mut rest = text;
    let mut total = 0u64;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let unit = rest[digits..]
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .count();
        let Ok(number) = rest[..digits].parse::<u64>() else {
            return false;
        };
        if !["ms", "s", "m", "h", "d", "w", "y"].contains(&&rest[digits..digits + unit]) {
            return false;
        }
        total += number;
        rest = &rest[digits + unit..];
    }
    total > 0
}

#[test]
fn every_alert_has_a_for_a_severity_a_summary_and_a_runbook_that_resolves() {
    let alerts = alerts();
    assert!(alerts.len() >= 7, "{RULES}: {} alerts", alerts.len());
    let page = std::fs::read_to_string(repo().join(OPERATIONS)).expect("docs/operations.md");
    let anchors: BTreeSet<String> = headings(&page).iter().map(|h| anchor(h)).collect();
    let mut names = BTreeSet::new();
    let mut problems = Vec::new();
    for alert in &alerts {
        let name = alert["alert"].as_str().unwrap_or_default().to_string();
        if !names.insert(name.clone()) {
            problems.push(format!("{name}: two alerts have this name"));
        }
        match alert["for"].as_str() {
            Some(wait) if is_duration(wait) => {}
            other => problems.push(format!(
                "{name}: `for` is {other:?}, not a duration: one bad scrape would page"
            )),
        }
        let severity = alert["labels"]["severity"].as_str();
        if !matches!(severity, Some("critical" | "warning" | "info")) {
            problems.push(format!(
                "{name}: severity {severity:?}, not critical, warning or info"
            ));
        }
        for annotation in ["summary", "description"] {
            if alert["annotations"][annotation]
                .as_str()
                .is_none_or(|text| text.trim().is_empty())
            {
                problems.push(format!("{name}: no {annotation} annotation"));
            }
        }
        let runbook = alert["annotations"]["runbook"].as_str().unwrap_or_default();
        match runbook.split_once('#') {
            Some((OPERATIONS, fragment)) if anchors.contains(fragment) => {}
            _ => problems.push(format!(
                "{name}: runbook {runbook:?} is not a heading of {OPERATIONS}"
            )),
        }
    }
    assert!(problems.is_empty(), "{RULES}:\n{}", problems.join("\n"));
}

// ---- the dashboard -------------------------------------------------------------------------

#[test]
fn every_dashboard_panel_queries_the_operator_through_the_datasource_variable() {
    let dashboard = dashboard();
    assert!(
        dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "{DASHBOARD}: schemaVersion {}",
        dashboard["schemaVersion"]
    );
    assert!(dashboard["uid"].is_string() && dashboard["title"].is_string());
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    assert!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "{DASHBOARD}: no Prometheus data source variable `datasource`"
    );
    let panels = panels(&dashboard);
    assert!(panels.len() >= 10, "{DASHBOARD}: {} panels", panels.len());
    let mut ids = BTreeSet::new();
    let mut problems = Vec::new();
    for panel in &panels {
        let title = panel["title"].as_str().unwrap_or_default();
        if panel["type"] == "row" {
            continue;
        }
        if title.is_empty() {
            problems.push(format!("panel {} has no title", panel["id"]));
        }
        if !ids.insert(panel["id"].to_string()) {
            problems.push(format!("{title:?}: id {} is taken", panel["id"]));
        }
        // A fixed data source uid exists only in the Grafana the dashboard was exported from.
        if panel["datasource"]["uid"] != "${datasource}" {
            problems.push(format!("{title:?}: datasource {}", panel["datasource"]));
        }
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        if !targets
            .iter()
            .any(|t| t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()))
        {
            problems.push(format!("{title:?}: no target with an expr"));
        }
        let mut ref_ids = BTreeSet::new();
        for target in &targets {
            if !ref_ids.insert(target["refId"].to_string()) {
                problems.push(format!("{title:?}: refId {} twice", target["refId"]));
            }
            if target["datasource"].is_object() && target["datasource"]["uid"] != "${datasource}" {
                problems.push(format!(
                    "{title:?}: target datasource {}",
                    target["datasource"]
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{DASHBOARD}:\n{}", problems.join("\n"));
}

// ---- the docs --------------------------------------------------------------------------------

/// The section "Monitoring" of docs/operations.md, its subsections included.
fn monitoring_section() -> String {
    let page = std::fs::read_to_string(repo().join(OPERATIONS)).expect("docs/operations.md");
    let mut lines = page.lines().skip_while(|l| *l != "## Monitoring");
    let heading = lines.next();
    assert!(heading.is_some(), "{OPERATIONS}: no section \"Monitoring\"");
    lines
        .take_while(|l| !l.starts_with("## ") && !l.starts_with("# "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first cells of the rows of the table whose header starts with `first`, backticks
/// dropped.
fn first_column(section: &str, first: &str) -> BTreeSet<String> {
    let cell = |row: &str| {
        row.trim()
            .trim_start_matches('|')
            .split('|')
            .next()
            .unwrap_or_default()
            .trim()
            .trim_matches('`')
            .to_string()
    };
    section
        .lines()
        .skip_while(|l| !(l.trim_start().starts_with('|') && cell(l) == first))
        .take_while(|l| l.trim_start().starts_with('|'))
        .skip(2) // the header and the |---| line
        .map(cell)
        .collect()
}

#[test]
fn the_docs_list_every_alert_and_every_panel() {
    let section = monitoring_section();
    let alerts: BTreeSet<String> = alerts()
        .iter()
        .map(|a| a["alert"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        first_column(&section, "alert"),
        alerts,
        "{OPERATIONS}, \"Monitoring\": the alerts table against {RULES}"
    );
    let panels: BTreeSet<String> = panels(&dashboard())
        .iter()
        .filter(|p| p["type"] != "row")
        .map(|p| p["title"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        first_column(&section, "panel"),
        panels,
        "{OPERATIONS}, \"Monitoring\": the panels table against {DASHBOARD}"
    );
}
