//! Test support of browser-controller, a dev-only crate of the workspace compiled once for
//! every suite: an in-process Kubernetes API server double, a kubelet simulator that drives
//! pods through a `kube::Client`, and the control-plane and real-node harnesses. The scenario
//! language itself, `Ctx`, lives with the scenarios in `tests/e2e/main.rs`.

use std::path::{Path, PathBuf};

/// Builders of Browsers, pods and BrowserConfigs, the core's unit tests' own.
pub use browser_controller_core::fixtures;

pub mod apiserver;
pub mod controlplane;
pub mod crd_history;
pub mod golden;
pub mod history;
pub mod host;
pub mod images;
pub mod invariants;
pub mod kinds;
pub mod kubelet;
pub mod markdown;
pub mod metrics;
pub mod node;
pub mod partition;
pub mod rendered;
pub mod stack;
pub mod stats;
pub mod upstream;
pub mod webdriver;

/// The repository's root folder.
pub fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Every `.rs` file below `dir`, sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("readable directory").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    files
}
