//! Machine config patches: discovery of the patch tree, the `PatchSet` of files the
//! nodes use (each read and compiled once), template rendering, and Talos's
//! strategic-merge and JSON 6902 rules.

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

pub use apply::{
    Applied, ApplyError, apply_patch, apply_patches, apply_patches_all, apply_patches_all_traced,
    apply_patches_traced,
};
pub use document::{DocumentId, MachineConfig};
pub use load::{LoadError, Patch, PatchBody, load_documents, load_patch};
pub use render::{PatchKind, RenderError, Renderer, Reuse, TemplateVars, render_patch};
pub use set::PatchSet;
