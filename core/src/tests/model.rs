//! Property tests against a reference model (placeholder; filled in below).
