//! The Browser lifecycle (SPEC §4): status derivation and the reconcile decision are pure;
//! `execute` performs a decided plan against the API.

pub mod decide;
pub mod desired;
pub mod execute;
pub mod status;
