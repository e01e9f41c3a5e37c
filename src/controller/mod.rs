//! The IO edge of the reconciles, one folder per controller: the Browser controller
//! (`browser`: the watches and index of each scope, the workers and one reconcile) and the
//! BrowserConfig controller (`config`: validation by dry run, status, image pre-pull). What
//! both use lives beside them: the state every scope shares (`shared`),
//! the watch pipeline (`watch`), Events (`events`), the dry-run verdicts the Browser
//! controller reads (`verdicts`). At start-up, the kinds are resolved through discovery (`discovery`) and
//! the cluster's Pod schema is read from OpenAPI (`openapi`).

mod browser;
pub mod config;
pub mod discovery;
mod events;
pub mod openapi;
mod shared;
pub mod verdicts;
pub mod watch;

pub use browser::run;
pub use shared::{Shared, SharedParts};
