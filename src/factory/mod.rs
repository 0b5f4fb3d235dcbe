//! Image Factory: schematics, schematic IDs computed as the factory does, image and installer
//! references (pure, `schematic.rs`), and the client that registers a schematic (`client.rs`,
//! the one part that does I/O).

pub mod client;
pub mod schematic;

pub use client::{FactoryClient, FactoryError};
pub use schematic::{Schematic, SchematicId, image_url, installer_image};
