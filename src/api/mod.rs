//! The kinds the operator works with: well-known keys, CRD schema types and generation, the
//! resolved kinds and the groups they are looked for in. No network: discovery and the Pod
//! schema fetch are in `controller`.

pub mod crd;
pub mod error;
pub mod keys;
pub mod kinds;
