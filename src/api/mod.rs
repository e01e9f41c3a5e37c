//! The kinds the operator works with: well-known keys, CRD schema types and generation,
//! and resolution of `ApiResource`s through discovery.

pub mod crd;
pub mod discovery;
pub mod error;
pub mod keys;
pub mod openapi;
