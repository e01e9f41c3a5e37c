//! browser-controller: a Kubernetes operator that runs Selenium-compatible browsers as
//! ephemeral Pods. The pure core (`config`, `pod`, `lifecycle`) decides; the edges
//! (`controller`, `server`) talk to the API and the network.

pub mod api;
pub mod cli;
pub mod commands;
pub mod config;
pub mod controller;
pub mod duration;
pub mod leader;
pub mod lifecycle;
pub mod link;
pub mod logging;
pub mod manifest;
pub mod metrics;
pub mod operator;
pub mod permissions;
pub mod pod;
pub mod prepull;
pub mod server;
