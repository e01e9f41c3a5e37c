//! The Browser lifecycle (docs/behaviour.md, "Lifecycle"): status derivation and the reconcile
//! decision, all pure; `controller::execute` performs a decided plan against the API.

pub mod decide;
pub mod desired;
pub mod status;
