//! BrowserConfig resolution (docs/configuration.md): tier merge, lookup and validation.
//! Everything here is pure: untyped JSON in, untyped JSON out.

pub mod lookup;
pub mod merge;
pub mod report;
pub mod validate;
