//! The topology file: the raw serde mirror, the validated model, and diagnostics.
