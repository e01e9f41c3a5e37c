//! The Browser lifecycle (docs/behaviour.md, "Lifecycle"): status derivation, the reconcile
//! decision, what follows the API server's answers to its writes and what a rejected write
//! means, all pure; the binary crate's executor performs a decided plan against the API.

pub mod capacity;
pub mod decide;
pub mod desired;
pub mod lane;
pub mod milestones;
pub mod plan;
pub mod reason;
pub mod reconcile;
pub mod rejection;
pub mod request;
pub mod status;
