//! CRD schema types and generation (SPEC §1).
