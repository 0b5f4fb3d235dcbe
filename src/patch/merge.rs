//! Talos strategic merge and JSON 6902 patches over YAML documents.
