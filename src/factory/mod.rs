//! Image Factory: schematics, schematic IDs, image and installer references.
