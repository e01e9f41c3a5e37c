//! The CRD files under `crds/`, the `crds` subcommand, and compatibility of the schemas with
//! the BrowserConfigs of the current Selenosis stack (upgrades from older CRDs:
//! `tests/crd_upgrades.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use browser_controller::api::crd::{self, Layout};
use browser_controller::manifest;

const REGENERATE: &str = "UPDATE_CRDS=1 cargo test --test crds crds_are_up_to_date";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn crds_dir() -> PathBuf {
    repo().join("crds")
}

/// Every manifest file below `dir`, recursively, sorted.
fn manifest_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path
                .extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn crds_are_up_to_date() {
    let dir = crds_dir();
    if std::env::var_os("UPDATE_CRDS").is_some() {
        for (relative, text) in crd::files().unwrap() {
            let path = dir.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }
    let expected = crd::files().unwrap();
    let mut problems = Vec::new();
    for (relative, text) in &expected {
        match std::fs::read_to_string(dir.join(relative)) {
            Ok(found) if &found == text => {}
            Ok(_) => problems.push(format!("crds/{} differs", relative.display())),
            Err(e) => problems.push(format!("crds/{}: {e}", relative.display())),
        }
    }
    for path in manifest_files(&dir) {
        let relative = path.strip_prefix(&dir).unwrap();
        if !expected.iter().any(|(p, _)| p == relative) {
            problems.push(format!("crds/{} is not generated", relative.display()));
        }
    }
    assert!(
        problems.is_empty(),
        "{problems:#?}\nregenerate with: {REGENERATE}"
    );
}

fn run_crds(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_browser-controller"))
        .arg("crds")
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(output.stderr.is_empty(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// What `cat` of the layout's files prints (shell glob order).
fn concatenated(dir: &Path) -> String {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 2, "{paths:?}");
    paths
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

#[test]
fn crds_subcommand_prints_the_files() {
    assert_eq!(run_crds(&[]), concatenated(&crds_dir()));
    assert_eq!(
        run_crds(&["--split-groups"]),
        concatenated(&crds_dir().join("split-groups"))
    );
}

#[test]
fn crds_for_a_kubernetes_release_carry_what_it_enforces() {
    let old = run_crds(&["--kubernetes-version", "1.24"]);
    assert!(!old.contains("x-kubernetes-validations"), "{old}");
    assert!(!old.contains("selectableFields"));
    let mut expected = concatenated(&crds_dir());
    assert!(expected.contains("x-kubernetes-validations"));
    assert_eq!(run_crds(&["--kubernetes-version", "v1.30.4"]), expected);
    let new = run_crds(&["--kubernetes-version", "1.31", "--split-groups"]);
    assert!(new.contains("x-kubernetes-validations"));
    assert!(
        new.contains("selectableFields:\n    - jsonPath: .spec.browserName\n"),
        "{new}"
    );
    expected = concatenated(&crds_dir().join("split-groups"));
    assert_eq!(
        new.lines().filter(|l| !expected.contains(l)).count(),
        4,
        "only the selectableFields block is new"
    );
}

#[test]
fn crds_refuse_an_unsupported_or_malformed_kubernetes_version() {
    for (version, message) in [
        (
            "1.23",
            "Kubernetes 1.23 is not supported: browser-controller needs 1.24 or newer",
        ),
        (
            "latest",
            "invalid Kubernetes version \"latest\": expected MAJOR.MINOR",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_browser-controller"))
            .args(["crds", "--kubernetes-version", version])
            .output()
            .unwrap();
        assert!(!output.status.success());
        assert!(output.stdout.is_empty());
        let stderr = String::from_utf8(output.stderr).unwrap();
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.contains(message), "{stderr}");
    }
}

#[test]
fn crd_files_name_their_objects() {
    for path in manifest_files(&crds_dir()) {
        let objects = manifest::read_file(&path).unwrap();
        assert_eq!(objects.len(), 1, "{}", path.display());
        let name = objects[0]["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            path.file_name().unwrap().to_string_lossy(),
            format!("{name}.yaml")
        );
    }
}

// ---- a small validator of manifests against a generated openAPIV3Schema ----

/// Checks `value` against a structural schema: types, closed property sets (unless the node
/// keeps unknown fields), required fields, enums, lengths, bounds and `minProperties`.
fn validate(value: &Value, schema: &Value, path: &str, errors: &mut Vec<String>) {
    let open = schema["x-kubernetes-preserve-unknown-fields"] == true;
    let Some(expected) = schema["type"].as_str() else {
        return;
    };
    let type_ok = match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => false,
    };
    if !type_ok {
        errors.push(format!("{path}: expected {expected}, found {value}"));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        errors.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    match value {
        Value::Object(map) => {
            let properties = schema["properties"].as_object();
            let additional = schema.get("additionalProperties");
            for (key, child) in map {
                let child_path = format!("{path}.{key}");
                if let Some(child_schema) = properties.and_then(|p| p.get(key)) {
                    validate(child, child_schema, &child_path, errors);
                } else if let Some(additional) = additional {
                    validate(child, additional, &child_path, errors);
                } else if properties.is_some() && !open {
                    errors.push(format!("{child_path}: unknown field"));
                }
            }
            for required in schema["required"].as_array().into_iter().flatten() {
                let name = required.as_str().unwrap();
                if !map.contains_key(name) {
                    errors.push(format!("{path}: missing required field {name}"));
                }
            }
            if let Some(min) = schema["minProperties"].as_u64()
                && (map.len() as u64) < min
            {
                errors.push(format!("{path}: fewer than {min} properties"));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                validate(item, &schema["items"], &format!("{path}[{i}]"), errors);
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if schema["minLength"].as_u64().is_some_and(|min| len < min)
                || schema["maxLength"].as_u64().is_some_and(|max| len > max)
            {
                errors.push(format!("{path}: length {len} out of bounds"));
            }
        }
        Value::Number(n) => {
            let n = n.as_f64().unwrap();
            if schema["minimum"].as_f64().is_some_and(|min| n < min)
                || schema["maximum"].as_f64().is_some_and(|max| n > max)
            {
                errors.push(format!("{path}: {n} out of bounds"));
            }
        }
        _ => {}
    }
}

fn schema_of(kind: &str) -> Value {
    crd::crds(Layout::Default)
        .into_iter()
        .find(|c| c["spec"]["names"]["kind"] == kind)
        .unwrap()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        .clone()
}

fn errors_of(object: &Value, kind: &str) -> Vec<String> {
    let mut errors = Vec::new();
    validate(object, &schema_of(kind), "", &mut errors);
    errors
}

#[test]
fn validator_accepts_a_minimal_browserconfig_and_reports_mistakes() {
    let good = json!({
        "apiVersion": "selenosis.io/v1",
        "kind": "BrowserConfig",
        "metadata": {"name": "c", "namespace": "n"},
        "spec": {
            "template": {
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                "sidecars": [{"name": "seleniferous", "image": "s:1", "ports": [{"containerPort": 4445}]}],
            },
            "browsers": {"chrome": {"*": {"image": "chrome:{version}"}, "120.0": {"privileged": true}}},
        },
    });
    assert_eq!(errors_of(&good, "BrowserConfig"), Vec::<String>::new());

    let mut bad = good.clone();
    bad["spec"]["template"]["nodeSelektor"] = json!({"a": "b"});
    bad["spec"]["template"]["sidecars"][0]
        .as_object_mut()
        .unwrap()
        .remove("name");
    bad["spec"]["browsers"]["chrome"]["120.0"]["privileged"] = json!("yes");
    bad["spec"]["template"]["imagePullPolicy"] = json!("Sometimes");
    let errors = errors_of(&bad, "BrowserConfig");
    for expected in [
        ".spec.template.nodeSelektor: unknown field",
        ".spec.template.sidecars[0]: missing required field name",
        ".spec.browsers.chrome.120.0.privileged: expected boolean",
        ".spec.template.imagePullPolicy: \"Sometimes\" is not one of",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "{expected}: {errors:#?}"
        );
    }
    assert_eq!(errors.len(), 4, "{errors:#?}");

    let empty = json!({"spec": {"browsers": {}}});
    assert_eq!(
        errors_of(&empty, "BrowserConfig"),
        [".spec.browsers: fewer than 1 properties"]
    );
}

#[test]
fn validator_checks_browser_specs() {
    let good = json!({"spec": {"browserName": "chrome", "browserVersion": "120.0"}});
    assert_eq!(errors_of(&good, "Browser"), Vec::<String>::new());
    let long = "x".repeat(64);
    let bad =
        json!({"spec": {"browserName": "", "browserVersion": long}, "status": {"phase": "Done"}});
    assert_eq!(errors_of(&bad, "Browser").len(), 3);
    assert_eq!(
        errors_of(&json!({}), "Browser"),
        [": missing required field spec"]
    );
}

// ---- compatibility with the current Selenosis stack ----

fn upstream_dir() -> Option<PathBuf> {
    let dir = repo().join("../shared/upstream-examples");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "note: {} is absent; upstream compatibility not checked",
            dir.display()
        );
        None
    }
}

fn served_api_versions(kind: &str) -> Vec<String> {
    Layout::ALL
        .into_iter()
        .map(|layout| {
            let group = match kind {
                "Browser" => layout.browser_group(),
                _ => layout.browserconfig_group(),
            };
            format!("{group}/v1")
        })
        .collect()
}

#[test]
fn upstream_browserconfigs_validate_against_our_schema() {
    let Some(dir) = upstream_dir() else {
        return;
    };
    let mut checked = 0;
    for path in manifest_files(&dir) {
        if path.to_string_lossy().contains("helm-template") {
            continue;
        }
        for object in manifest::read_file(&path).unwrap() {
            if object["kind"] != "BrowserConfig" {
                continue;
            }
            let api_version = object["apiVersion"].as_str().unwrap().to_string();
            assert!(
                served_api_versions("BrowserConfig").contains(&api_version),
                "{}: {api_version}",
                path.display()
            );
            let errors = errors_of(&object, "BrowserConfig");
            assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
            checked += 1;
        }
    }
    assert!(
        checked >= 10,
        "only {checked} upstream BrowserConfigs found"
    );
}
