//! The manifests of the current Selenosis stack, from the upstream examples folder beside the
//! repository (compatibility data, read in place, never copied into the project; see
//! docs/architecture.md, "Tests").

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The upstream examples folder, or `None` with a printed note saying what is not checked.
pub fn dir(what_is_skipped: &str) -> Option<PathBuf> {
    let dir = crate::repo().join("../shared/upstream-examples");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!("note: {} is absent; {what_is_skipped}", dir.display());
        None
    }
}

/// The CRDs of the selenosis Helm chart (the Go controller's, split-group layout): Browser,
/// then BrowserConfig. The `{{ … }}` lines of the templates only switch them on and off.
pub fn helm_chart_crds(what_is_skipped: &str) -> Option<Vec<Value>> {
    let dir = dir(what_is_skipped)?.join("selenosis-deploy");
    let crds = [
        "crd-browser.helm-template.yaml",
        "crd-browserconfig.helm-template.yaml",
    ]
    .iter()
    .flat_map(|file| {
        let text: String = std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .lines()
            .filter(|l| !l.trim_start().starts_with("{{"))
            .map(|l| format!("{l}\n"))
            .collect();
        browser_controller::manifest::parse(&text, Path::new(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
    })
    .collect();
    Some(crds)
}
