//! Test support of browser-controller, a dev-only crate of the workspace compiled once for
//! every suite: an in-process Kubernetes API server double, a kubelet simulator that drives
//! pods through a `kube::Client`, the control-plane and real-node harnesses, and `env::Env`,
//! the scenario language of the suites that run the operator in the test process.

use std::path::PathBuf;

pub mod apiserver;
pub mod controlplane;
pub mod crd_history;
pub mod env;
pub mod golden;
pub mod host;
pub mod images;
pub mod kinds;
pub mod kubelet;
pub mod metrics;
pub mod node;
pub mod partition;
pub mod upstream;

/// The repository's root folder.
pub fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}
