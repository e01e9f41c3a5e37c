//! The kinds the operator works with: well-known keys, typed reads of a Browser, CRD schema
//! types and generation, and resolution of `ApiResource`s through discovery.

pub mod apply;
pub mod browser;
pub mod crd;
pub mod discovery;
pub mod error;
pub mod keys;
pub mod openapi;
