//! Pod construction (docs/behaviour.md, "The Pod of a Browser"): rendering a Browser and its
//! resolved entry into a Pod, the per-session options annotation, and what the admin lets into
//! a pod: the fence around labels and annotations (`policy`) and the pod security ceiling
//! (`security`).

pub mod options;
pub mod policy;
pub mod render;
pub mod schema;
pub mod security;
