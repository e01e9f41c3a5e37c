//! The Browser lifecycle (docs/behaviour.md, "Lifecycle"): status derivation and the reconcile
//! decision are pure; `execute` performs a decided plan against the API.

pub mod decide;
pub mod desired;
pub mod execute;
pub mod reason;
pub mod status;
