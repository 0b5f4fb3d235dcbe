//! Image Factory client: registers a schematic (`POST /schematics`) and checks
//! that the factory returns the ID computed offline. The schematic model and the
//! image and installer references are pure and live in
//! `talosprov_base::schematic`.

#![warn(missing_docs)]

pub mod client;
