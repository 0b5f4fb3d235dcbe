//! `talosprov secrets import FILE`: seed a new state with an existing cluster's secrets
//! bundle (talosctl's secrets.yaml), so talosprov builds configs with the same CAs and tokens.
//! A state that already has secrets is refused: a lineage's secrets never change. A state
//! that lost its secrets takes them back, if they are its cluster's (its talosconfig trusts
//! the bundle's OS CA).

use anyhow::{Context as _, bail};
use clap::Args;
use std::path::PathBuf;

use super::state_options::{LockOptions, StateOptions, with_lock};
use super::{CommandError, Outcome};
use talosprov_core::machine::{parse_secrets_yaml, secrets_yaml};
use talosprov_state::{Backend as _, Sensitive, State};

/// Arguments of `talosprov secrets import`.
#[derive(Debug, Args)]
pub struct SecretsImportArgs {
    /// The bundle, in talosctl's secrets.yaml format (`talosctl gen secrets`).
    #[arg(value_name = "FILE")]
    pub bundle: PathBuf,

    #[command(flatten)]
    pub state: StateOptions,

    /// How long to wait for a state lock another run holds.
    #[command(flatten)]
    pub lock: LockOptions,
}

/// Check the bundle, then store it in the state under the lock: a new state (new lineage)
/// when there is none, or an existing state that has no secrets yet. The state is saved
/// encrypted when state encryption keys are configured, or when it already was.
///
/// # Errors
/// An unreadable or invalid bundle, a state that already holds secrets, a lock conflict or
/// a failed save.
pub async fn run(args: SecretsImportArgs) -> Result<Outcome, CommandError> {
    let path = &args.bundle;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the secrets bundle {}", path.display()))?;
    let bundle = parse_secrets_yaml(&text)
        .with_context(|| format!("{} is not a valid secrets bundle", path.display()))?;
    let store = args.state.open()?;
    let location = store.backend().describe();
    let (lineage, serial) = with_lock(&store, &args.lock, "secrets import", async |store| {
        let (mut state, encrypted) = match store.load().await? {
            Some(loaded) if loaded.state.secrets.is_some() => bail!(
                "the state {location} already has a secrets bundle (lineage {}): a cluster's \
                 secrets are never replaced; to start another cluster from {}, use a new state \
                 (--state PATH)",
                loaded.state.lineage,
                path.display()
            ),
            Some(loaded) => {
                if let Some(t) = &loaded.state.outputs.talosconfig {
                    let trusted = super::cluster::credentials_from_talosconfig(t.value.expose())
                        .context("the state's talosconfig is unreadable")?
                        .ca_pem;
                    if first_cert(&trusted) != first_cert(&bundle.certs.os.crt) {
                        bail!(
                            "{} is not this cluster's secrets bundle: its OS CA is not the one \
                             the talosconfig in the state {location} trusts; import the bundle \
                             of the cluster this state describes",
                            path.display()
                        );
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
    crate::ui::print_line(&format!(
        "Imported the secrets bundle {} into the state {location} (lineage {lineage}, serial {serial}).",
        path.display()
    ));
    Ok(Outcome::Success)
}

/// The DER of the first certificate in PEM text; empty when there is none.
fn first_cert(pem: &str) -> Vec<u8> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .flatten()
        .next()
        .map(|c| c.to_vec())
        .unwrap_or_default()
}
