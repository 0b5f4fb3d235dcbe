//! Rendering of patch templates: minijinja, and OpenTofu templatefile syntax.
