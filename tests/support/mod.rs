//! Test support shared by the scenario suites: an in-process Kubernetes API server double, a
//! kubelet simulator that drives pods through a `kube::Client`, and `env::Env`, the scenario
//! language of the suites that run the operator in the test process.
// Each test binary uses a different part of the shared support code.
#![allow(dead_code)]

pub mod apiserver;
pub mod controlplane;
pub mod crd_history;
pub mod env;
pub mod host;
pub mod images;
pub mod kinds;
pub mod kubelet;
pub mod node;
pub mod partition;
pub mod upstream;
