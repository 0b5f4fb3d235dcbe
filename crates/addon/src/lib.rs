//! Kubernetes add-ons (`addons:`), the pure part: what the cluster's rendered
//! machine configs say about it ([`ClusterFacts`]), each preset's values and
//! the effective values of a Helm add-on ([`values`]), and the checks that
//! need the rendered configs ([`checks`]). Rendering charts and manifests,
//! and applying them, happen at the edges.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

pub mod checks;
pub mod delivery;
pub mod facts;
pub mod helm;
pub mod manifests;
pub mod object;
pub mod order;
pub mod values;
