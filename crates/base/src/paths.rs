//! Path helpers that do no I/O.

use std::path::Path;

/// The folder of a path, `.` when it has none: `patches/a.yaml` gives
/// `patches`, a bare file name such as `s.tfstate` (whose `parent()` is empty)
/// gives `.`, so the result can always be listed, synced or joined.
pub fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_lives_in_the_current_folder() {
        assert_eq!(folder_of(Path::new("s.tfstate")), Path::new("."));
        assert_eq!(folder_of(Path::new("a/b.yaml")), Path::new("a"));
        assert_eq!(folder_of(Path::new("/x")), Path::new("/"));
        assert_eq!(folder_of(Path::new("/")), Path::new("."));
    }
}
