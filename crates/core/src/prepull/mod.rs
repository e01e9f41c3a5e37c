//! Image pre-pull (docs/configuration.md, "Image pre-pull"; docs/operations.md, "Image
//! pre-pull"): per BrowserConfig that asks for it, DaemonSets that pull the images of its
//! entries on the nodes where their browsers may run, so that a session does not wait for a
//! browser image on a fresh node. Pure: what the DaemonSets are and how far they got; the
//! writes are in `controller::prepull`.

pub mod progress;
pub mod render;
