//! A simulated Talos node serving the Talos API, for tests and for trying talosprov without hardware.
