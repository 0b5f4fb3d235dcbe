//! Reading the kubeconfig tarball Talos streams: gzip around a tar whose only entry is
//! `kubeconfig`. Talos closes the gzip writer but never the tar writer, so the entry is
//! not padded and there is no end-of-archive trailer (talos.md §4); we read the first
//! entry and stop.

use std::io::Read as _;

/// Why the kubeconfig bytes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigArchiveError {
    /// The stream was empty.
    #[error("the node sent no bytes")]
    Empty,
    /// Not gzip, or truncated gzip.
    #[error("not a gzip stream: {0}")]
    Gzip(std::io::Error),
    /// The tar header is missing or damaged.
    #[error("no tar entry: {0}")]
    Tar(std::io::Error),
    /// The entry is shorter than its header says.
    #[error("the tar entry is truncated: {0}")]
    Truncated(std::io::Error),
}

/// Gunzips `tarball` and returns the content of its first tar entry.
///
/// Errors: [`KubeconfigArchiveError`]. Missing padding and trailer are not errors.
pub fn extract_kubeconfig(tarball: &[u8]) -> Result<Vec<u8>, KubeconfigArchiveError> {
    if tarball.is_empty() {
        return Err(KubeconfigArchiveError::Empty);
    }
    let mut tar_bytes = Vec::new();
    flate2::read::GzDecoder::new(tarball)
        .read_to_end(&mut tar_bytes)
        .map_err(KubeconfigArchiveError::Gzip)?;
    let mut archive = tar::Archive::new(tar_bytes.as_slice());
    let mut entries = archive.entries().map_err(KubeconfigArchiveError::Tar)?;
    let mut entry = match entries.next() {
        Some(entry) => entry.map_err(KubeconfigArchiveError::Tar)?,
        None => {
            return Err(KubeconfigArchiveError::Tar(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "empty archive",
            )));
        }
    };
    let size = entry.header().size().map_err(KubeconfigArchiveError::Tar)?;
    let mut content = Vec::with_capacity(size as usize);
    entry
        .read_to_end(&mut content)
        .map_err(KubeconfigArchiveError::Truncated)?;
    if content.len() as u64 != size {
        return Err(KubeconfigArchiveError::Truncated(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("header says {size} bytes, got {}", content.len()),
        )));
    }
    Ok(content)
}

/// Builds the tarball exactly as Talos does: one ustar header for a regular file named
/// `name` (mode 0600) followed by the content, no padding, no trailer, gzip-compressed.
/// The simulator serves this; tests use it to check [`extract_kubeconfig`].
pub fn talos_style_tarball(name: &str, content: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut header = tar::Header::new_ustar();
    header.set_path(name)?;
    header.set_size(content.len() as u64);
    header.set_mode(0o600);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(header.as_bytes())?;
    gz.write_all(content)?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &[u8] = b"apiVersion: v1\nkind: Config\nclusters: []\n";

    #[test]
    fn reads_a_tarball_without_padding_or_trailer() {
        let tarball = talos_style_tarball("kubeconfig", KUBECONFIG).unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(tarball.as_slice())
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(raw.len(), 512 + KUBECONFIG.len(), "no padding, no trailer");
        assert_eq!(extract_kubeconfig(&tarball).unwrap(), KUBECONFIG);
    }

    #[test]
    fn reads_a_complete_tarball_too() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(KUBECONFIG.len() as u64);
        header.set_mode(0o600);
        header.set_cksum();
        builder
            .append_data(&mut header, "kubeconfig", KUBECONFIG)
            .unwrap();
        let tar = builder.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        assert_eq!(
            extract_kubeconfig(&gz.finish().unwrap()).unwrap(),
            KUBECONFIG
        );
    }

    #[test]
    fn a_truncated_entry_is_an_error() {
        let mut header = tar::Header::new_ustar();
        header.set_path("kubeconfig").unwrap();
        header.set_size(1000);
        header.set_cksum();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, header.as_bytes()).unwrap();
        std::io::Write::write_all(&mut gz, b"short").unwrap();
        let err = extract_kubeconfig(&gz.finish().unwrap()).unwrap_err();
        assert!(
            matches!(err, KubeconfigArchiveError::Truncated(_)),
            "{err:?}"
        );
    }

    #[test]
    fn plain_bytes_are_not_gzip() {
        assert!(matches!(
            extract_kubeconfig(b"apiVersion: v1"),
            Err(KubeconfigArchiveError::Gzip(_))
        ));
        assert!(matches!(
            extract_kubeconfig(b""),
            Err(KubeconfigArchiveError::Empty)
        ));
    }
}
