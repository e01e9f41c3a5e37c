//! Pod construction (docs/behaviour.md, "The Pod of a Browser"): rendering a Browser and its
//! resolved entry into a Pod, and the per-session options annotation.

pub mod names;
pub mod options;
pub mod render;
pub mod schema;
