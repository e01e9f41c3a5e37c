//! `deploy/monitoring/` against what it monitors, so that nothing there breaks silently: every
//! metric and label the alerts and the dashboard query is one the operator exports (read from
//! the text exposition of a `Metrics` with a sample in every family), the ServiceMonitor and
//! PodMonitor select the Service and pods of `deploy/` by their labels and port names, every
//! alert carries what Alertmanager and the on-call need, every dashboard panel queries
//! something, and docs/operations.md, "Monitoring" lists every alert and panel. Pure and fast:
//! nothing here talks to a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::{Value, json};

use browser_controller::manifest;
use testkit::markdown::{anchor, headings};
use testkit::metrics::{Families, exported};

const MONITORING: &str = "deploy/monitoring";
const SERVICE_MONITOR: &str = "deploy/monitoring/service-monitor.yaml";
const POD_MONITOR: &str = "deploy/monitoring/pod-monitor.yaml";
const RULES: &str = "deploy/monitoring/prometheus-rule.yaml";
const DASHBOARD: &str = "deploy/monitoring/grafana-dashboard.json";
const OPERATIONS: &str = "docs/operations.md";

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

/// Words of PromQL that are no metric names where no `(` follows: binary operators,
/// modifiers, and the aggregations (`sum by (x) (…)`).
const KEYWORDS: [&str; 21] = [
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

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

// ---- what the operator exports -----------------------------------------------------------

// ---- what the operator exports: `testkit::metrics` ------------------------------------------

// ---- PromQL against the export -------------------------------------------------------------

/// What one expression queries, and what is wrong with it.
#[derive(Debug, Default)]
struct Checked {
    /// Exported families the expression reads.
    families: BTreeSet<String>,
    /// Labels its results may carry: those of the families read and the target's.
    labels: BTreeSet<String>,
    /// Labels its matchers and grouping clauses name.
    referenced: BTreeSet<String>,
    problems: Vec<String>,
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

/// The expression with the text of its string literals blanked, so that nothing in a label
/// value reads as a name; positions are kept.
fn blank_strings(expr: &str) -> Vec<char> {
    let mut out = Vec::with_capacity(expr.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars() {
        match quote {
            Some(q) if c == q && !escaped => {
                quote = None;
                out.push(c);
            }
            Some(_) => {
                escaped = c == '\\' && !escaped;
                out.push(' ');
            }
            None => {
                if matches!(c, '"' | '\'' | '`') {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index of the first character at or after `i` that is not whitespace.
fn skip_space(code: &[char], mut i: usize) -> usize {
    while code.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

/// The text from `open` (a bracket) to its closing `close`, and the index after it.
fn enclosed(code: &[char], open: usize, close: char) -> (String, usize) {
    let end = code[open + 1..]
        .iter()
        .position(|c| *c == close)
        .map_or(code.len(), |p| open + 1 + p);
    (code[open + 1..end].iter().collect(), end + 1)
}

/// The label names of a matcher list `a="x", b=~"y"` (values already blanked).
fn matcher_labels(matchers: &str) -> Vec<String> {
    matchers
        .split(',')
        .map(|m| m.trim().chars().take_while(|c| is_name_char(*c)).collect())
        .filter(|name: &String| !name.is_empty())
        .collect()
}

/// Checks one PromQL expression: every series it selects is an exported family (histograms
/// through `_bucket`, `_sum`, `_count`), every label of a selector's matchers one of that
/// family's (or the target's, or `le` on `_bucket`), and every label of a `by`, `without`,
/// `on`, `ignoring` or `group_*` list one of the families the expression reads.
fn check(expr: &str, families: &Families) -> Checked {
    let code = blank_strings(expr);
    let mut checked = Checked::default();
    let mut grouping: Vec<String> = Vec::new();
    let mut buckets = false;
    let mut i = 0;
    while i < code.len() {
        let c = code[i];
        if c == '[' {
            // A range or subquery: durations and Grafana's $__rate_interval.
            i = enclosed(&code, i, ']').1;
        } else if c == '{' {
            // A selector without a metric name.
            let (matchers, next) = enclosed(&code, i, '}');
            grouping.extend(matcher_labels(&matchers));
            i = next;
        } else if c.is_ascii_digit()
            || (c == '.' && code.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number or a duration (`0.99`, `5m`, `1e3`).
            while code
                .get(i)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '.')
            {
                i += 1;
            }
        } else if is_name_start(c) {
            let start = i;
            while code.get(i).is_some_and(|c| is_name_char(*c)) {
                i += 1;
            }
            let name: String = code[start..i].iter().collect();
            let next = skip_space(&code, i);
            let variable = start > 0 && code[start - 1] == '$';
            if GROUPING.contains(&name.as_str()) && code.get(next) == Some(&'(') {
                let (list, after) = enclosed(&code, next, ')');
                grouping.extend(matcher_labels(&list));
                i = after;
            } else if variable || code.get(next) == Some(&'(') || KEYWORDS.contains(&name.as_str())
            {
                // A Grafana variable, a function or an operator.
            } else if !name.starts_with("browser_controller_") {
                checked.problems.push(format!(
                    "queries {name}, which is no metric of the operator"
                ));
            } else {
                let resolved = resolve(&name, families);
                let labels: BTreeSet<String> = match &resolved {
                    Ok((family, bucket)) => {
                        buckets |= bucket;
                        checked.families.insert(family.clone());
                        let mut labels = families[family].labels.clone();
                        if *bucket {
                            labels.insert("le".into());
                        }
                        labels
                    }
                    Err(problem) => {
                        checked.problems.push(problem.clone());
                        BTreeSet::new()
                    }
                };
                if code.get(next) == Some(&'{') {
                    let (matchers, after) = enclosed(&code, next, '}');
                    for label in matcher_labels(&matchers) {
                        checked.referenced.insert(label.clone());
                        let known =
                            labels.contains(&label) || TARGET_LABELS.contains(&label.as_str());
                        if resolved.is_ok() && !known {
                            checked.problems.push(format!(
                                "matches {name} on the label {label}, which it does not carry (it carries {labels:?})"
                            ));
                        }
                    }
                    i = after;
                }
            }
        } else {
            i += 1;
        }
    }
    checked.labels = checked
        .families
        .iter()
        .flat_map(|f| families[f].labels.iter().cloned())
        .chain(TARGET_LABELS.iter().map(|l| l.to_string()))
        .collect();
    if buckets {
        checked.labels.insert("le".into());
    }
    checked.referenced.extend(grouping.iter().cloned());
    for label in grouping {
        if !checked.labels.contains(&label) {
            checked.problems.push(format!(
                "groups or matches by the label {label}, which none of {:?} carries",
                checked.families
            ));
        }
    }
    if checked.families.is_empty() {
        checked
            .problems
            .push("queries no metric of the operator".to_string());
    }
    checked
}

/// One query of the alerts or the dashboard, with the labels it shows (`$labels.x` in an
/// alert's annotations, `{{x}}` in a panel's legend).
struct Query {
    origin: String,
    expr: String,
    shown: BTreeSet<String>,
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
    let rule = the(RULES, "PrometheusRule");
    let groups = rule["spec"]["groups"]
        .as_array()
        .unwrap_or_else(|| panic!("{RULES}: spec.groups is a list"));
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect()
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

/// What is wrong with the queries of the alerts and the dashboard against `families`.
fn problems_of_the_files(families: &Families) -> Vec<String> {
    let mut problems = Vec::new();
    for query in queries() {
        let checked = check(&query.expr, families);
        for problem in &checked.problems {
            problems.push(format!("{}: {problem}", query.origin));
        }
        for label in query.shown.iter().filter(|l| !checked.labels.contains(*l)) {
            problems.push(format!(
                "{}: shows the label {label}, which none of {:?} carries",
                query.origin, checked.families
            ));
        }
    }
    problems
}

#[test]
fn the_checker_reports_names_and_labels_the_operator_does_not_export() {
    let families = exported();
    let cases = [
        (
            "rate(browser_controller_made_up_total[5m])",
            "browser_controller_made_up_total, which the operator does not export",
        ),
        (
            "sum(browser_controller_reconciles)",
            "browser_controller_reconciles, which the operator does not export (a counter: query it with _total)",
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
            "matches browser_controller_api_writes_total on the label reason",
        ),
        (
            "browser_controller_api_writes_total{le=\"1\"}",
            "on the label le",
        ),
        (
            "sum by (le) (rate(browser_controller_startup_seconds_count[5m]))",
            "the label le",
        ),
        (
            "browser_controller_browsers{phase=\"None\"} or up == 0",
            "queries up, which is no metric of the operator",
        ),
        (
            "sum by (stage) ({__name__=\"x\"})",
            "queries no metric of the operator",
        ),
    ];
    for (expr, expected) in cases {
        let problems = check(expr, &families).problems;
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{expr}: expected a problem containing {expected:?}, got {problems:?}"
        );
    }
}

#[test]
fn the_checker_accepts_what_the_operator_exports() {
    let families = exported();
    for expr in [
        "sum by (phase) (browser_controller_browsers{namespace=~\"team-.*\", phase!=\"by (x)\"})",
        "histogram_quantile(0.99, sum by (le, stage) (rate(browser_controller_startup_seconds_bucket{stage=\"running\"}[$__rate_interval])))",
        "sum(rate(browser_controller_startup_seconds_count{stage=\"pod_created\"}[10m])) or vector(0)",
        "sum by (reason) (increase(browser_controller_browser_failures_total[30m])) / on() group_left() sum(increase(browser_controller_browser_deletions_total[30m])) > 0.1",
        "absent(browser_controller_browserconfig_entries)",
        "min by (pod) (browser_controller_api_reachable) == bool 0",
        "browser_controller_reconciles_in_flight offset 5m",
    ] {
        let checked = check(expr, &families);
        assert!(
            checked.problems.is_empty(),
            "{expr}: {:?}",
            checked.problems
        );
        assert!(!checked.families.is_empty(), "{expr}");
    }
}

#[test]
fn every_metric_and_label_the_alerts_and_the_dashboard_use_is_exported() {
    let families = exported();
    assert!(
        families.len() >= 20,
        "expected every family to carry a sample, got {:?}",
        families.keys()
    );
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
        let checked = check(&query.expr, &families);
        for family in checked.families {
            let labels = families[&family]
                .labels
                .iter()
                .filter(|l| checked.referenced.contains(*l) || query.shown.contains(*l))
                .cloned();
            used.entry(family).or_default().extend(labels);
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
