//! Pod rendering of SPEC §2.1.
