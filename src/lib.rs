//! browser-controller: a Kubernetes operator that runs Selenium-compatible browsers as
//! ephemeral Pods. The pure core (the `browser-controller-core` crate, re-exported here)
//! decides; the modules of this crate are the edges that talk to the API server and the
//! network and execute its plans.

pub use browser_controller_core::{
    api, cached, config, decoded, duration, index, lifecycle, names, outbox, pod, prepull, reach,
    startup, workqueue,
};

pub mod check;
pub mod cli;
pub mod commands;
pub mod controller;
pub mod leader;
pub mod link;
pub mod logging;
pub mod manifest;
pub mod metrics;
pub mod operator;
pub mod permissions;
pub mod server;
