//! Options annotation of SPEC §2.3.
