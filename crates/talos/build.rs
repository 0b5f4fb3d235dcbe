//! Compiles our own Talos API definitions in `proto/` with a pure-Rust protobuf
//! compiler (protox), so the build needs nothing outside crates.io.

use std::path::{Path, PathBuf};

fn protos(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            protos(&path, out);
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let mut files = Vec::new();
    protos(Path::new("proto"), &mut files);
    files.sort();
    if files.is_empty() {
        return Ok(());
    }
    let descriptors = protox::compile(&files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // One file that nests every package (common, machine, google.rpc) as modules.
        .include_file("talos_api.rs")
        .compile_fds(descriptors)?;
    Ok(())
}
