//! The kinds the operator works with: well-known keys, typed reads of a Browser, the head of
//! an apply body, CRD schema types and generation, the resolved kinds and the groups they are
//! looked for in. No network: discovery and the Pod schema fetch are in `controller`.

pub mod apply;
pub mod browser;
pub mod crd;
pub mod finalizers;
pub mod keys;
pub mod kinds;
pub mod owner;
pub mod status;
