//! Machine config patches: discovery of the patch tree, the `PatchSet` of files the
//! nodes use (each read and compiled once), template rendering, and Talos's
//! strategic-merge and JSON 6902 rules.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

pub mod apply;
pub mod budget;
pub mod delete;
pub mod discover;
pub mod document;
pub mod expr;
pub mod functions;
pub mod json6902;
pub mod load;
pub mod locate;
pub mod merge;
pub mod origin;
pub mod provenance;
pub mod render;
pub mod rules;
pub mod set;
pub mod shape;
pub mod tftpl;
