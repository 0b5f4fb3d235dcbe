//! The checks of a topology that look at the paths it names, through the
//! caller's [`Inputs`] (the core still does no I/O of its own): a
//! `backup.destination` folder must be a folder, or not exist yet (the first
//! snapshot makes it), never a file, a FIFO or a device such as `/dev/zero`.

use std::path::Path;

use super::raw::RawTopology;
use talosprov_base::backup::Location;
use talosprov_base::diagnostics::{Code, Diagnostic};
use talosprov_base::inputs::Inputs;

/// Every problem with the paths `raw` (read from `file`) names, as
/// `inputs` sees them.
pub(super) fn check(
    raw: &RawTopology,
    file: &Path,
    inputs: &(impl Inputs + ?Sized),
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let destination = raw
        .backup
        .as_ref()
        .and_then(|b| b.value.destination.as_ref());
    if let Some(d) = destination
        && let Ok(Location::Folder(dir)) =
            Location::parse(&d.value, talosprov_base::paths::folder_of(file))
        && let Some(what) = inputs.kind(&dir)
    {
        out.push(
            Diagnostic::error(
                Code::InvalidValue,
                file,
                format!(
                    "backup.destination {:?} is {what}: it must be a folder (the first snapshot \
                     makes one that does not exist) or s3://bucket/prefix",
                    d.value
                ),
            )
            .at(d.pos)
            .field("backup.destination"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_base::inputs::MemoryInputs;

    struct Kinds;

    impl Inputs for Kinds {
        fn read(&self, path: &Path) -> Result<String, talosprov_base::limits::ReadError> {
            MemoryInputs::new().read(path)
        }
        fn list(&self, dir: &Path) -> std::io::Result<Vec<talosprov_base::inputs::Listed>> {
            MemoryInputs::new().list(dir)
        }
        fn kind(&self, path: &Path) -> Option<&'static str> {
            match path.to_str()? {
                "/dev/zero" => Some("a device file"),
                "/srv/pipe" => Some("a FIFO"),
                "/srv/notes.txt" => Some("a regular file"),
                _ => None,
            }
        }
    }

    fn found(destination: &str) -> Vec<String> {
        let text = format!("backup:\n  destination: {destination}\n");
        let (raw, _) = super::super::read::read(&text, Path::new("/srv/cluster.yaml"));
        check(&raw.expect("raw"), Path::new("/srv/cluster.yaml"), &Kinds)
            .iter()
            .map(|d| format!("{}:{}", d.pos.map_or(0, |p| p.line), d.message))
            .collect()
    }

    #[test]
    fn a_destination_must_be_a_folder_or_not_exist_yet() {
        assert_eq!(
            found("/dev/zero"),
            vec![
                "2:backup.destination \"/dev/zero\" is a device file: it must be a folder (the \
                 first snapshot makes one that does not exist) or s3://bucket/prefix"
                    .to_owned()
            ]
        );
        assert!(
            found("pipe")[0].contains("is a FIFO"),
            "relative to the file"
        );
        assert!(found("notes.txt")[0].contains("is a regular file"));
        assert!(
            found("snapshots").is_empty(),
            "absent: made by the first snapshot"
        );
        assert!(found("s3://bucket/lab").is_empty());
    }
}
