//! Lookup of SPEC §3.1.
