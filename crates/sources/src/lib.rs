//! Add-on sources produced at the edge: a `url` add-on's manifest file,
//! downloaded and checked against its pinned SHA-256 ([`fetch`]), and a
//! `helm` add-on's manifests, printed by `helm template` ([`helm`]).

#![warn(missing_docs)]

pub mod fetch;
pub mod helm;

pub use fetch::{FetchError, Fetcher, MAX_MANIFEST_BYTES};
pub use helm::{HELM_ENV, HelmError, find_helm, template};
