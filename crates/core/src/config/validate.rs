//! Local validation of BrowserConfigs (docs/behaviour.md, "BrowserConfig validation and
//! status"): the checks that need no cluster. Every resolvable entry must yield an image,
//! container names must be unique and not `browser` for sidecars and init containers, volume
//! mounts must name existing volumes, and the container fields most often written wrong (env,
//! command and args, ports, pull policy, mounts, volume names) must have the shape Kubernetes
//! takes, so that `render` and the BrowserConfig's status name them before any dry run. The
//! cluster's Pod schema (dry-run apply) is the validator for the rest.

use kube_core::DynamicObject;
use serde_json::{Map, Value};

use super::lookup;
use crate::api::keys::BROWSER_CONTAINER;

/// Problems of one entry of a BrowserConfig; `problems` is empty when it is valid.
/// Structural problems use an empty `version` (a browser's map of versions) or empty
/// `browser` and `version` (the spec itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryReport {
    pub browser: String,
    pub version: String,
    pub problems: Vec<String>,
}

/// Checks one merged entry; every problem found is listed.
pub fn validate_entry(entry: &Value) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    if let Some(problem) = string_problem(entry, "image") {
        problems.push(problem);
    }
    let containers = containers(entry, &mut problems);
    check_names(&containers, &mut problems);
    for container in &containers {
        check_container_fields(container, &mut problems);
    }
    check_mounts(entry, &containers, &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// One report per resolvable entry of `config` (explicit versions, and `"*"` when it
/// carries an image, validated with `{version}` left as is), after the reports of
/// structural problems.
pub fn validate_config(config: &DynamicObject) -> Vec<EntryReport> {
    let mut reports = structural_reports(config);
    for (browser, version) in lookup::resolvable_entries(config) {
        let problems = match lookup::merged_entry(config, &browser, &version) {
            Ok(entry) => validate_entry(&entry).err().unwrap_or_default(),
            Err(error) => vec![format!("{} is not an object", error.path)],
        };
        reports.push(EntryReport {
            browser,
            version,
            problems,
        });
    }
    reports
}

/// Problems of `spec.browsers` and of each browser's map of versions.
fn structural_reports(config: &DynamicObject) -> Vec<EntryReport> {
    let report = |browser: &str, problems: Vec<String>| EntryReport {
        browser: browser.to_owned(),
        version: String::new(),
        problems,
    };
    let browsers = match config
        .data
        .get("spec")
        .and_then(|spec| spec.get("browsers"))
    {
        None | Some(Value::Null) => {
            return vec![report("", vec!["spec.browsers is missing".into()])];
        }
        Some(Value::Object(browsers)) => browsers,
        Some(_) => {
            let problem = "spec.browsers must be a map of browser names to versions";
            return vec![report("", vec![problem.into()])];
        }
    };
    let mut reports = Vec::new();
    let duplicates = case_duplicates(browsers, "browser names");
    if !duplicates.is_empty() {
        reports.push(report("", duplicates));
    }
    for (browser, versions) in browsers {
        let problems = match versions {
            Value::Object(versions) => case_duplicates(versions, "versions"),
            _ => vec![format!(
                "spec.browsers.{browser} must be a map of versions to entries"
            )],
        };
        if !problems.is_empty() {
            reports.push(report(browser, problems));
        }
    }
    reports
}

/// Keys equal ignoring case make lookups depend on the requested spelling.
fn case_duplicates(map: &Map<String, Value>, what: &str) -> Vec<String> {
    let keys: Vec<&String> = map.keys().collect();
    keys.iter()
        .enumerate()
        .flat_map(|(index, key)| {
            keys[index + 1..]
                .iter()
                .filter(|other| other.to_lowercase() == key.to_lowercase())
                .map(move |other| format!("{what} \"{key}\" and \"{other}\" differ only in case"))
        })
        .collect()
}

/// A container of the pod an entry renders: the browser, a sidecar or an init container.
struct Container<'a> {
    /// How messages name it, e.g. `sidecars[1] (x-server)`.
    label: String,
    name: Option<&'a str>,
    spec: &'a Value,
}

/// The browser container, then sidecars, then init containers; shape problems recorded.
fn containers<'a>(entry: &'a Value, problems: &mut Vec<String>) -> Vec<Container<'a>> {
    let mut containers = vec![Container {
        label: BROWSER_CONTAINER.to_owned(),
        name: Some(BROWSER_CONTAINER),
        spec: entry,
    }];
    for section in ["sidecars", "initContainers"] {
        match entry.get(section) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => containers.extend(
                items
                    .iter()
                    .enumerate()
                    .filter_map(|(index, item)| extra_container(section, index, item, problems)),
            ),
            Some(_) => problems.push(format!("{section} must be a list")),
        }
    }
    containers
}

fn extra_container<'a>(
    section: &str,
    index: usize,
    item: &'a Value,
    problems: &mut Vec<String>,
) -> Option<Container<'a>> {
    if !item.is_object() {
        problems.push(format!("{section}[{index}] must be an object"));
        return None;
    }
    let name = non_empty_str(item.get("name"));
    let label = match name {
        Some(name) => format!("{section}[{index}] ({name})"),
        None => format!("{section}[{index}]"),
    };
    for field in ["name", "image"] {
        if let Some(problem) = string_problem(item, field) {
            problems.push(format!("{label}: {problem}"));
        }
    }
    Some(Container {
        label,
        name,
        spec: item,
    })
}

/// Container names must be unique across the pod and `browser` is the browser's own.
fn check_names(containers: &[Container], problems: &mut Vec<String>) {
    let mut seen: Vec<&Container> = Vec::new();
    for container in containers.iter().skip(1) {
        let Some(name) = container.name else {
            continue;
        };
        if name == BROWSER_CONTAINER {
            problems.push(format!(
                "{}: name \"{name}\" is reserved for the browser container",
                container.label
            ));
        } else if let Some(first) = seen.iter().find(|other| other.name == Some(name)) {
            problems.push(format!(
                "{}: container name \"{name}\" is already used by {}",
                container.label, first.label
            ));
        } else {
            seen.push(container);
        }
    }
}

/// Pull policies Kubernetes knows.
const PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];
/// Port protocols Kubernetes knows.
const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

/// The shapes of a container's env, envFrom, command, args, ports and pull policy, and mount
/// paths used once.
fn check_container_fields(container: &Container, problems: &mut Vec<String>) {
    let spec = container.spec;
    let mut problem = |text: String| problems.push(format!("{}: {text}", container.label));
    match spec.get("env") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                if !item.is_object() {
                    problem(format!(
                        "env[{index}] must be an object with name and value"
                    ));
                } else if non_empty_str(item.get("name")).is_none() {
                    problem(format!("env[{index}] has no name"));
                } else if let Some(value) = item.get("value")
                    && !(value.is_string() || value.is_null())
                {
                    problem(format!(
                        "env[{index}] ({}): value must be a string (quote it)",
                        item["name"].as_str().unwrap_or_default()
                    ));
                }
            }
        }
        Some(Value::Object(_)) => {
            problem("env must be a list of {name, value} items, not a map".into());
        }
        Some(_) => problem("env must be a list of {name, value} items".into()),
    }
    if !matches!(
        spec.get("envFrom"),
        None | Some(Value::Null | Value::Array(_))
    ) {
        problem("envFrom must be a list".into());
    }
    for field in ["command", "args"] {
        match spec.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => {}
            Some(Value::String(_)) => problem(format!(
                "{field} must be a list of strings, not one string (e.g. [\"/bin/sh\", \"-c\", \"...\"])"
            )),
            Some(_) => problem(format!("{field} must be a list of strings")),
        }
    }
    match spec.get("ports") {
        None | Some(Value::Null) => {}
        Some(Value::Array(ports)) => {
            for (index, port) in ports.iter().enumerate() {
                if let Some(text) = port_problem(port) {
                    problem(format!("ports[{index}]: {text}"));
                }
            }
        }
        Some(_) => problem("ports must be a list".into()),
    }
    match spec.get("imagePullPolicy") {
        None | Some(Value::Null) => {}
        Some(Value::String(policy)) if PULL_POLICIES.contains(&policy.as_str()) => {}
        Some(other) => problem(format!(
            "imagePullPolicy {other} is not one of Always, IfNotPresent, Never"
        )),
    }
    let mut paths: Vec<&str> = Vec::new();
    for path in spec
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|mount| mount.get("mountPath").and_then(Value::as_str))
    {
        if paths.contains(&path) {
            problem(format!("volumeMount path {path} is used twice"));
        } else {
            paths.push(path);
        }
    }
}

fn port_problem(port: &Value) -> Option<String> {
    let number = |field: &str, min: i64| match port.get(field) {
        None | Some(Value::Null) if field == "hostPort" => None,
        None | Some(Value::Null) => Some(format!("{field} is missing")),
        Some(value) => match value.as_i64() {
            Some(n) if (min..=65535).contains(&n) => None,
            _ => Some(format!(
                "{field} {value} must be a number from {min} to 65535"
            )),
        },
    };
    if !port.is_object() {
        return Some("must be an object with containerPort".into());
    }
    number("containerPort", 1)
        .or_else(|| number("hostPort", 0))
        .or_else(|| match port.get("protocol") {
            None | Some(Value::Null) => None,
            Some(Value::String(p)) if PROTOCOLS.contains(&p.as_str()) => None,
            Some(other) => Some(format!("protocol {other} is not one of TCP, UDP, SCTP")),
        })
}

/// Every volume mount of every container must name a volume of the entry.
fn check_mounts(entry: &Value, containers: &[Container], problems: &mut Vec<String>) {
    let volumes = volume_names(entry, problems);
    for container in containers {
        match container.spec.get("volumeMounts") {
            None | Some(Value::Null) => {}
            Some(Value::Array(mounts)) => {
                for (index, mount) in mounts.iter().enumerate() {
                    if let Some(problem) = mount_problem(mount, index, &volumes) {
                        problems.push(format!("{}: {problem}", container.label));
                    }
                }
            }
            Some(_) => problems.push(format!("{}: volumeMounts must be a list", container.label)),
        }
    }
}

fn volume_names<'a>(entry: &'a Value, problems: &mut Vec<String>) -> Vec<&'a str> {
    match entry.get("volumes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(volumes)) => {
            let mut names: Vec<&str> = Vec::new();
            for (index, volume) in volumes.iter().enumerate() {
                match non_empty_str(volume.get("name")) {
                    None => problems.push(format!("volumes[{index}]: name is missing")),
                    Some(name) if names.contains(&name) => {
                        problems.push(format!("volumes[{index}]: name \"{name}\" is used twice"))
                    }
                    Some(name) => names.push(name),
                }
            }
            names
        }
        Some(_) => {
            problems.push("volumes must be a list".to_owned());
            Vec::new()
        }
    }
}

fn mount_problem(mount: &Value, index: usize, volumes: &[&str]) -> Option<String> {
    let path = mount
        .get("mountPath")
        .and_then(Value::as_str)
        .map_or_else(|| format!("[{index}]"), str::to_owned);
    match non_empty_str(mount.get("name")) {
        None => Some(format!("volumeMount {path} names no volume")),
        Some(name) if !volumes.contains(&name) => Some(format!(
            "volumeMount {path} names unknown volume \"{name}\""
        )),
        Some(_) => None,
    }
}

/// What is wrong with a required string field, if anything.
fn string_problem(object: &Value, field: &str) -> Option<String> {
    match object.get(field) {
        None | Some(Value::Null) => Some(format!("{field} is missing")),
        Some(Value::String(value)) if value.trim().is_empty() => Some(format!("{field} is empty")),
        Some(Value::String(_)) => None,
        Some(_) => Some(format!("{field} must be a string")),
    }
}

fn non_empty_str(value: Option<&Value>) -> Option<&str> {
    value
        .and_then(Value::as_str)
        .filter(|value| !value.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    fn problems(entry: Value) -> Vec<String> {
        validate_entry(&entry).err().unwrap_or_default()
    }

    #[test]
    fn valid_entry_passes() {
        let entry = json!({
            "image": "chrome:120",
            "volumes": [{"name": "tmp", "emptyDir": {}}],
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            "sidecars": [{"name": "seleniferous", "image": "s:1", "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
            "initContainers": [{"name": "init", "image": "busybox"}]
        });
        assert_eq!(validate_entry(&entry), Ok(()));
    }

    #[test]
    fn image_must_be_a_non_empty_string() {
        assert_eq!(problems(json!({})), ["image is missing"]);
        assert_eq!(problems(json!({"image": " "})), ["image is empty"]);
        assert_eq!(problems(json!({"image": 5})), ["image must be a string"]);
    }

    #[test]
    fn sidecars_and_init_containers_need_name_and_image() {
        let entry = json!({
            "image": "c",
            "sidecars": [{"image": "s"}, {"name": "x-server"}, "oops"],
            "initContainers": [{"name": "init", "image": ""}]
        });
        assert_eq!(
            problems(entry),
            [
                "sidecars[0]: name is missing",
                "sidecars[1] (x-server): image is missing",
                "sidecars[2] must be an object",
                "initContainers[0] (init): image is empty",
            ]
        );
    }

    #[test]
    fn container_lists_must_be_lists() {
        assert_eq!(
            problems(json!({"image": "c", "sidecars": {"name": "s"}})),
            ["sidecars must be a list"]
        );
    }

    #[test]
    fn container_names_are_unique_across_sidecars_and_init_containers() {
        let entry = json!({
            "image": "c",
            "sidecars": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}],
            "initContainers": [{"name": "a", "image": "a"}]
        });
        assert_eq!(
            problems(entry),
            ["initContainers[0] (a): container name \"a\" is already used by sidecars[0] (a)"]
        );
    }

    #[test]
    fn browser_name_is_reserved() {
        let entry = json!({
            "image": "c",
            "sidecars": [{"name": "browser", "image": "x"}],
            "initContainers": [{"name": "browser", "image": "y"}]
        });
        assert_eq!(
            problems(entry),
            [
                "sidecars[0] (browser): name \"browser\" is reserved for the browser container",
                "initContainers[0] (browser): name \"browser\" is reserved for the browser container",
            ]
        );
    }

    #[test]
    fn volume_mounts_must_name_existing_volumes() {
        let entry = json!({
            "image": "c",
            "volumes": [{"name": "tmp", "emptyDir": {}}],
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}],
            "sidecars": [
                {"name": "seleniferous", "image": "s"},
                {"name": "x-server", "image": "x", "volumeMounts": [{"name": "tmpx", "mountPath": "/tmp"}, {"mountPath": "/home"}]}
            ],
            "initContainers": [{"name": "init", "image": "i", "volumeMounts": [{"name": "tmpx"}]}]
        });
        assert_eq!(
            problems(entry),
            [
                "browser: volumeMount /dev/shm names unknown volume \"dshm\"",
                "sidecars[1] (x-server): volumeMount /tmp names unknown volume \"tmpx\"",
                "sidecars[1] (x-server): volumeMount /home names no volume",
                "initContainers[0] (init): volumeMount [0] names unknown volume \"tmpx\"",
            ]
        );
    }

    #[test]
    fn container_fields_must_have_the_shape_kubernetes_takes() {
        let entry = json!({
            "image": "c",
            "env": {"TZ": "UTC"},
            "command": "/opt/bin/entry_point.sh",
            "ports": [{"containerPort": 4444}, {"containerPort": 70000}, {"name": "vnc"}, {"containerPort": 5900, "protocol": "tcp"}],
            "imagePullPolicy": "always",
            "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, {"name": "tmp", "mountPath": "/tmp"}],
            "sidecars": [{"name": "seleniferous", "image": "s", "env": [{"name": "A", "value": "1"}, {"value": "x"}, {"name": "N", "value": 5}],
                          "args": ["--port", 4445], "envFrom": {"configMapRef": {}}, "ports": [{"containerPort": "4445"}]}]
        });
        assert_eq!(
            problems(entry),
            [
                "browser: env must be a list of {name, value} items, not a map",
                "browser: command must be a list of strings, not one string (e.g. [\"/bin/sh\", \"-c\", \"...\"])",
                "browser: ports[1]: containerPort 70000 must be a number from 1 to 65535",
                "browser: ports[2]: containerPort is missing",
                "browser: ports[3]: protocol \"tcp\" is not one of TCP, UDP, SCTP",
                "browser: imagePullPolicy \"always\" is not one of Always, IfNotPresent, Never",
                "browser: volumeMount path /tmp is used twice",
                "sidecars[0] (seleniferous): env[1] has no name",
                "sidecars[0] (seleniferous): env[2] (N): value must be a string (quote it)",
                "sidecars[0] (seleniferous): envFrom must be a list",
                "sidecars[0] (seleniferous): args must be a list of strings",
                "sidecars[0] (seleniferous): ports[0]: containerPort \"4445\" must be a number from 1 to 65535",
                "volumes[1]: name \"tmp\" is used twice",
            ]
        );
    }

    #[test]
    fn volumes_need_names() {
        let entry = json!({"image": "c", "volumes": [{"emptyDir": {}}]});
        assert_eq!(problems(entry), ["volumes[0]: name is missing"]);
    }

    fn config(spec: Value) -> DynamicObject {
        fixtures::config("a")
            .namespace("ns")
            .created("2026-01-01T00:00:00Z")
            .spec(spec)
            .object()
    }

    fn report(browser: &str, version: &str, problems: &[&str]) -> EntryReport {
        EntryReport {
            browser: browser.into(),
            version: version.into(),
            problems: problems
                .iter()
                .map(|problem| (*problem).to_owned())
                .collect(),
        }
    }

    #[test]
    fn config_reports_every_resolvable_entry_with_merged_tiers() {
        let config = config(json!({
            "template": {"sidecars": [{"name": "seleniferous", "image": "s"}]},
            "browsers": {
                "chrome": {
                    "*": {"image": "chrome:{version}"},
                    "120": {},
                    "121": {"sidecars": [{"name": "browser", "image": "x"}]}
                },
                "firefox": {"*": {"labels": {}}, "100": {}}
            }
        }));
        assert_eq!(
            validate_config(&config),
            [
                report("chrome", "*", &[]),
                report("chrome", "120", &[]),
                report(
                    "chrome",
                    "121",
                    &[
                        "sidecars[1] (browser): name \"browser\" is reserved for the browser container"
                    ]
                ),
                report("firefox", "100", &["image is missing"]),
            ]
        );
    }

    #[test]
    fn config_reports_structural_problems() {
        assert_eq!(
            validate_config(&config(json!({}))),
            [report("", "", &["spec.browsers is missing"])]
        );
        assert_eq!(
            validate_config(&config(json!({"browsers": ["chrome"]}))),
            [report(
                "",
                "",
                &["spec.browsers must be a map of browser names to versions"]
            )]
        );
        let config = config(json!({"browsers": {
            "chrome": {"120": "chrome:120", "121": {"image": "c"}, "*": {"image": "c"}},
            "Chrome": {"120": {"image": "c"}, "*": {"image": "c"}},
            "edge": null
        }}));
        assert_eq!(
            validate_config(&config),
            [
                report(
                    "",
                    "",
                    &["browser names \"chrome\" and \"Chrome\" differ only in case"]
                ),
                report(
                    "edge",
                    "",
                    &["spec.browsers.edge must be a map of versions to entries"]
                ),
                report(
                    "chrome",
                    "120",
                    &["spec.browsers.chrome.120 is not an object"]
                ),
                report("chrome", "121", &[]),
                report("chrome", "*", &[]),
                report("Chrome", "120", &[]),
                report("Chrome", "*", &[]),
            ]
        );
    }

    #[test]
    fn config_reports_versions_differing_only_in_case() {
        let config = config(
            json!({"browsers": {"chrome": {"Beta": {"image": "b"}, "beta": {"image": "b"}}}}),
        );
        assert_eq!(
            validate_config(&config)[0],
            report(
                "chrome",
                "",
                &["versions \"Beta\" and \"beta\" differ only in case"]
            )
        );
    }
}
