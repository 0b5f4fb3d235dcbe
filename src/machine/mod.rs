//! Machine configs: the secrets bundle, base configs per role, talosconfig and kubeconfig (pure).
