//! BrowserConfig resolution: tier merge (SPEC §3.2–§3.3), lookup (§3.1) and validation (§3.4).
//! Everything here is pure: untyped JSON in, untyped JSON out.

pub mod lookup;
pub mod merge;
pub mod report;
pub mod validate;
