//! Merge rules of SPEC §3.3.
