//! BrowserConfig resolution (docs/configuration.md): tier merge, lookup and validation, and
//! what another controller left on a config (`leftovers`). Everything here is pure: untyped
//! JSON in, untyped JSON out.

pub mod leftovers;
pub mod lookup;
pub mod merge;
pub mod report;
pub mod validate;
