//! The IO edge of the reconciles, one folder per controller: the Browser controller
//! (`browser`: its wiring and triggers, one reconcile, the executor of its plans, and
//! read-your-writes) and the BrowserConfig controller (`config`: validation by dry run, status,
//! image pre-pull). What both use lives beside them: the state every scope shares (`shared`),
//! the watch pipeline (`watch`), Events (`events`), the dry-run verdicts the Browser
//! controller reads (`verdicts`), the API of a watched scope (`scope`) and objects too deep to
//! decode (`decoded`). At start-up, the kinds are resolved through discovery (`discovery`) and
//! the cluster's Pod schema is read from OpenAPI (`openapi`).

mod browser;
pub mod config;
pub mod decoded;
pub mod discovery;
mod events;
pub mod openapi;
mod scope;
mod shared;
pub mod verdicts;
pub mod watch;

pub use browser::run_scope;
pub use shared::{Shared, SharedParts};
