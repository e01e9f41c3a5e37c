//! The pure core of browser-controller: what the operator decides, as data in and data out.
//! The kinds and their schemas (`api`), Kubernetes name rules (`names`), BrowserConfig merge,
//! lookup and validation (`config`), the pod of a Browser (`pod`), the lifecycle decision
//! and what follows a write's answer (`lifecycle`), image pre-pull (`prepull`), and what
//! follows a failed start-up step (`startup`), and the work queue of the reconciles
//! (`workqueue`). This crate has no async runtime, no kube
//! client and no clock: the binary crate talks to the API server and passes the time in.

pub mod api;
pub mod cached;
pub mod config;
pub mod decoded;
pub mod duration;
/// Builders of test objects: for the core's tests and, with feature `fixtures`, the suites'.
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod index;
pub mod lifecycle;
pub mod manifest;
pub mod names;
pub mod outbox;
pub mod pod;
pub mod prepull;
pub mod reach;
pub mod startup;
pub mod workqueue;
