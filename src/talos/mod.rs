//! Talos API gRPC client over our own `proto/` definitions.
