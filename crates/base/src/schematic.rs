//! Image Factory schematics: extensions (in the order written) and kernel args, the schematic ID
//! computed locally exactly as the factory computes it, and the image and installer references.
//! Source: siderolabs/image-factory `pkg/schematic/schematic.go` (ID = SHA-256 of go-yaml
//! `Marshal` of the schematic).

use serde_yaml_ng::{Mapping, Value};
use sha2::{Digest, Sha256};
use std::fmt;

use crate::version::TalosVersion;
use crate::yaml::{Flavour, to_string};

/// What a node's boot image is built from. Order matters: the factory hashes extensions in the
/// order given, so the same set in another order is another schematic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Schematic {
    /// Official system extensions, e.g. `siderolabs/qemu-guest-agent`.
    pub extensions: Vec<String>,
    /// Extra kernel command-line arguments (applied by disk images, not by the installer).
    pub kernel_args: Vec<String>,
}

/// A schematic ID: 64 lowercase hex characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SchematicId(String);

impl SchematicId {
    /// The ID text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Accept an ID given by the factory or a user: 64 hex characters, kept lowercase.
    pub fn parse(s: &str) -> Option<Self> {
        (s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| SchematicId(s.to_ascii_lowercase()))
    }
}

impl fmt::Display for SchematicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Schematic {
    /// The schematic as the factory serialises it: `customization` (always present, `{}` when
    /// empty) with `extraKernelArgs` then `systemExtensions.officialExtensions`, 4-space indent.
    pub fn to_yaml(&self) -> String {
        let list = |v: &[String]| Value::Sequence(v.iter().map(|s| s.as_str().into()).collect());
        let mut customization = Mapping::new();
        if !self.kernel_args.is_empty() {
            customization.insert("extraKernelArgs".into(), list(&self.kernel_args));
        }
        if !self.extensions.is_empty() {
            let mut system = Mapping::new();
            system.insert("officialExtensions".into(), list(&self.extensions));
            customization.insert("systemExtensions".into(), Value::Mapping(system));
        }
        let mut doc = Mapping::new();
        doc.insert("customization".into(), Value::Mapping(customization));
        to_string(&Value::Mapping(doc), Flavour::Marshal)
    }

    /// Read a schematic in the factory's YAML shape (the body of `POST /schematics`):
    /// `customization.systemExtensions.officialExtensions` and
    /// `customization.extraKernelArgs`, both optional lists of strings.
    ///
    /// # Errors
    /// Text that is not YAML, or a list item that is not a string.
    pub fn from_yaml(text: &[u8]) -> Result<Schematic, String> {
        let doc: Value =
            serde_yaml_ng::from_slice(text).map_err(|e| format!("invalid schematic: {e}"))?;
        let customization = doc.get("customization");
        let list = |v: Option<&Value>, what: &str| -> Result<Vec<String>, String> {
            let Some(items) = v.and_then(Value::as_sequence) else {
                return Ok(Vec::new());
            };
            items
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("invalid schematic: {what} must be strings"))
                })
                .collect()
        };
        Ok(Schematic {
            extensions: list(
                customization
                    .and_then(|c| c.get("systemExtensions"))
                    .and_then(|s| s.get("officialExtensions")),
                "officialExtensions",
            )?,
            kernel_args: list(
                customization.and_then(|c| c.get("extraKernelArgs")),
                "extraKernelArgs",
            )?,
        })
    }

    /// The schematic ID: lowercase hex SHA-256 of [`Schematic::to_yaml`].
    pub fn id(&self) -> SchematicId {
        SchematicId(hex::encode(Sha256::digest(self.to_yaml().as_bytes())))
    }
}

/// The factory's nocloud disk image for a schematic and Talos version, uncompressed qcow2:
/// `<factory>/image/<id>/<version>/nocloud-amd64.qcow2`.
pub fn image_url(factory: &url::Url, id: &SchematicId, version: &TalosVersion) -> String {
    format!(
        "{}/image/{id}/{version}/nocloud-amd64.qcow2",
        factory.as_str().trim_end_matches('/')
    )
}

/// The first Talos release (major, minor, patch) for which the Image Factory serves
/// `<platform>-installer` images such as `nocloud-installer`: v1.10.0. Before it the factory
/// builds only the generic `installer` (metal) image, which would move a nocloud node to the
/// metal platform on upgrade.
///
/// Sources: siderolabs/image-factory `internal/frontend/http/ui.go` offers
/// `<factory>/<platform>-installer/<id>:<version>` only when
/// `quirks.New(version).SupportsUnifiedInstaller()`, and `internal/artifacts/fetch.go`
/// (`InstallerImageName`) builds from the unified `installer-base` image only then; Talos
/// `pkg/machinery/imager/quirks/quirks.go` sets `minVersionUnifiedInstaller = 1.10.0`
/// (the request: siderolabs/talos#10486, "Image Factory should support `[platform]-installer`").
pub const FIRST_PLATFORM_INSTALLER: (u32, u32, u32) = (1, 10, 0);

/// The installer image reference for `machine.install.image` and upgrades:
/// `<factory host>/nocloud-installer/<id>:<version>` (the nocloud installer keeps the node's
/// platform on upgrade).
pub fn installer_image(factory: &url::Url, id: &SchematicId, version: &TalosVersion) -> String {
    let host = factory.host_str().unwrap_or("factory.talos.dev");
    let host = match factory.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    format!("{host}/nocloud-installer/{id}:{version}")
}

#[cfg(test)]
mod tests {

    #[test]
    fn from_yaml_reads_back_what_to_yaml_writes() {
        let schematic = Schematic {
            extensions: vec![
                "siderolabs/qemu-guest-agent".into(),
                "siderolabs/iscsi-tools".into(),
            ],
            kernel_args: vec!["console=ttyS0".into()],
        };
        assert_eq!(
            Schematic::from_yaml(schematic.to_yaml().as_bytes()),
            Ok(schematic)
        );
        assert_eq!(
            Schematic::from_yaml(b"customization: {}\n"),
            Ok(Schematic::default())
        );
        assert!(Schematic::from_yaml(b"customization: {extraKernelArgs: [{a: 1}]}").is_err());
    }
    use super::*;

    fn schematic(ext: &[&str]) -> Schematic {
        Schematic {
            extensions: ext.iter().map(|s| s.to_string()).collect(),
            kernel_args: vec![],
        }
    }

    #[test]
    fn empty_schematic_id_matches_the_factory() {
        assert_eq!(Schematic::default().to_yaml(), "customization: {}\n");
        assert_eq!(
            Schematic::default().id().as_str(),
            "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
        );
    }

    #[test]
    fn qemu_guest_agent_schematic_id_matches_the_factory() {
        assert_eq!(
            schematic(&["siderolabs/qemu-guest-agent"]).id().as_str(),
            "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"
        );
    }

    #[test]
    fn nvidia_schematic_id_matches_the_factory_and_order_matters() {
        let sorted = schematic(&[
            "siderolabs/nvidia-container-toolkit-production",
            "siderolabs/nvidia-open-gpu-kernel-modules-production",
            "siderolabs/qemu-guest-agent",
        ]);
        assert_eq!(
            sorted.id().as_str(),
            "a31d81eceab05afdc2c59b0002701173e117a5fb81bdc1f64062d27655145848"
        );
        let qemu_first = schematic(&[
            "siderolabs/qemu-guest-agent",
            "siderolabs/nvidia-container-toolkit-production",
            "siderolabs/nvidia-open-gpu-kernel-modules-production",
        ]);
        assert_ne!(qemu_first.id(), sorted.id());
    }

    #[test]
    fn kernel_args_schematic_id_matches_the_factory_test() {
        let s = Schematic {
            extensions: vec![],
            kernel_args: vec!["noapic".into(), "nolapic".into()],
        };
        assert_eq!(
            s.to_yaml(),
            "customization:\n    extraKernelArgs:\n        - noapic\n        - nolapic\n"
        );
        assert!(s.id().as_str().starts_with("9cba8e32"), "{}", s.id());
    }

    #[test]
    fn image_and_installer_references_use_the_factory_url_and_host() {
        let factory = url::Url::parse("https://factory.talos.dev").unwrap();
        let id = Schematic::default().id();
        let v: TalosVersion = "v1.13.9".parse().unwrap();
        assert_eq!(
            image_url(&factory, &id, &v),
            format!("https://factory.talos.dev/image/{id}/v1.13.9/nocloud-amd64.qcow2")
        );
        assert_eq!(
            installer_image(&factory, &id, &v),
            format!("factory.talos.dev/nocloud-installer/{id}:v1.13.9")
        );
        let local = url::Url::parse("http://127.0.0.1:8080/").unwrap();
        assert_eq!(
            installer_image(&local, &id, &v),
            format!("127.0.0.1:8080/nocloud-installer/{id}:v1.13.9")
        );
    }
}
