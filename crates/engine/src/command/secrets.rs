//! `secrets export` and `secrets import`: the state's secrets bundle in
//! talosctl's `secrets.yaml` format, out of the state or into a new one. A
//! state that already has secrets never takes others: a lineage's secrets
//! never change. A state that lost its secrets takes them back if they are
//! its cluster's (its talosconfig trusts the bundle's OS CA).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, anyhow};

use talosprov_backend::backend::Backend as _;
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets_file::{parse_secrets_yaml, secrets_yaml};
use talosprov_statefile::format::State;

use super::prepare::credentials_from_talosconfig;
use super::store::{StateSettings, no_state, with_lock};
use super::{CommandError, Ui};

/// The state's secrets bundle (talosctl's `secrets.yaml` text).
///
/// # Errors
/// No state, or a state without a bundle (saying how to get one).
pub async fn export(settings: &StateSettings, ui: &Ui) -> Result<Sensitive, CommandError> {
    let store = settings.open(ui)?;
    let loaded = store.load().await?.ok_or_else(|| no_state(&store))?;
    Ok(loaded.state.secrets.ok_or_else(|| {
        anyhow!(
            "the state {} has no secrets bundle yet: `talosprov apply` creates one, \
             `talosprov secrets import FILE` brings an existing cluster's",
            store.backend().describe()
        )
    })?)
}

/// What `secrets import` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretsImported {
    /// The state's location, as the backend describes it.
    pub location: String,
    /// The state's lineage (a new one when there was no state).
    pub lineage: uuid::Uuid,
    /// The serial the state was saved with.
    pub serial: u64,
}

/// Put the bundle at `path` into the state (a new one when there is none).
///
/// # Errors
/// An unreadable or invalid bundle; a state that already has secrets; a
/// state whose talosconfig does not trust the bundle's OS CA; a held lock;
/// the save.
pub async fn import(
    settings: &StateSettings,
    lock_timeout: Duration,
    path: &Path,
    ui: &Ui,
) -> Result<SecretsImported, CommandError> {
    let text = talosprov_base::inputs::Inputs::read(&talosprov_files::Disk, path)
        .with_context(|| format!("cannot read the secrets bundle {}", path.display()))?;
    let bundle = parse_secrets_yaml(&text)
        .with_context(|| format!("{} is not a valid secrets bundle", path.display()))?;
    let store = settings.open(ui)?;
    let location = store.backend().describe();
    let (lineage, serial) = with_lock(&store, lock_timeout, "secrets import", ui, async || {
        let (mut state, encrypted) = match store.load().await? {
            Some(loaded) if loaded.state.secrets.is_some() => {
                return Err(anyhow!(
                    "the state {location} already has a secrets bundle (lineage {}): a \
                     cluster's secrets are never replaced; to start another cluster from {}, \
                     use a new state (--state PATH)",
                    loaded.state.lineage,
                    path.display()
                )
                .into());
            }
            Some(loaded) => {
                if let Some(t) = &loaded.state.outputs.talosconfig {
                    let trusted = credentials_from_talosconfig(t.value.expose())
                        .context("the state's talosconfig is unreadable")?
                        .ca_pem;
                    if first_cert(&trusted) != first_cert(&bundle.certs.os.crt) {
                        return Err(anyhow!(
                            "{} is not this cluster's secrets bundle: its OS CA is not the one \
                             the talosconfig in the state {location} trusts; import the bundle \
                             of the cluster this state describes",
                            path.display()
                        )
                        .into());
                    }
                }
                (loaded.state, loaded.encrypted)
            }
            None => (State::new(uuid::Uuid::new_v4()), store.has_keys()),
        };
        state.secrets = Some(Sensitive::new(secrets_yaml(&bundle)));
        store
            .save(&mut state, encrypted)
            .await
            .context("cannot save the state")?;
        Ok((state.lineage, state.serial))
    })
    .await?;
    Ok(SecretsImported {
        location,
        lineage,
        serial,
    })
}

/// The DER of the first certificate in `pem` (empty when there is none).
fn first_cert(pem: &str) -> Vec<u8> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .flatten()
        .next()
        .map(|c| c.to_vec())
        .unwrap_or_default()
}
