//! Rust code generated at build time from our `proto/` files (common, machine,
//! google.rpc), wire-compatible with the Talos API. Only `talos` and `sim` use it.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/talos_api.rs"));
