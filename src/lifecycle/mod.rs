//! The Browser lifecycle (docs/behaviour.md, "Lifecycle"): status derivation, the reconcile
//! decision and what a rejected write means, all pure; `controller::execute` performs a
//! decided plan against the API.

pub mod decide;
pub mod desired;
pub mod milestones;
pub mod plan;
pub mod reason;
pub mod rejection;
pub mod status;
