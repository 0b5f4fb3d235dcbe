//! Add-on sources produced at the edge: a `url` add-on's manifest file,
//! downloaded and checked against its pinned SHA-256 ([`fetch`]), and a
//! `helm` add-on's manifests, printed by `helm template` ([`helm`]); each
//! bounded in time by [`SourceLimits`] ([`limits`]).

#![warn(missing_docs)]

pub mod fetch;
pub mod helm;
pub mod limits;
