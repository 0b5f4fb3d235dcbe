//! Machine config patches: discovery of the patch tree, template rendering, and
//! Talos's strategic-merge and JSON 6902 rules.

pub mod discover;
pub mod merge;
pub mod render;
