//! The state commands: `state list`, `state show`, `state rm`, `state
//! encrypt`/`decrypt`, `force-unlock`, and reading the outputs for `output`.
//! Reading needs no lock; every change is made under it, in one save.

use std::time::Duration;

use anyhow::{Context as _, anyhow};

use talosprov_backend::backend::Backend as _;
use talosprov_backend::encrypt::{IDENTITY_FILE_VAR, PASSPHRASE_VAR, RECIPIENTS_FILE_VAR};
use talosprov_statefile::address::Address;
use talosprov_statefile::format::Outputs;
use talosprov_statefile::format::State;

use super::store::{StateSettings, no_state, with_lock};
use crate::apply::session::Question;
use crate::command::{Answer, CommandError, Ui};

/// The state, read without the lock.
///
/// # Errors
/// No state, or one that cannot be read.
pub async fn read(settings: &StateSettings, ui: &Ui) -> Result<State, CommandError> {
    let store = settings.open(ui)?;
    Ok(store.load().await?.ok_or_else(|| no_state(&store))?.state)
}

/// A client config `output --ttl` issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientConfig {
    /// A talosconfig: the state's context, endpoints and nodes, with an admin client
    /// certificate (`os:admin`) from the OS CA.
    Talosconfig,
    /// An admin kubeconfig: the state's cluster and API server, with a client certificate
    /// (`system:masters`) from the Kubernetes CA.
    Kubeconfig,
}

/// The longest `--ttl`: the 365 days of the certificates the state keeps.
pub const MAX_CLIENT_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// `output talosconfig|kubeconfig --ttl`: a client config for a person, valid for `ttl`
/// from now, issued from the CAs in the state's secrets and recorded nowhere (the state's
/// own is untouched), as `talosctl config new --crt-ttl` does for a talosconfig.
///
/// # Errors
/// As [`read`]; a `ttl` of zero or over [`MAX_CLIENT_TTL`]; a state without secrets, or
/// without the output to take the cluster's addresses from.
pub async fn short_lived(
    settings: &StateSettings,
    which: ClientConfig,
    ttl: Duration,
    ui: &Ui,
) -> Result<talosprov_base::sensitive::Sensitive, CommandError> {
    use talosprov_base::talosconfig::Talosconfig;
    use talosprov_machine::expiry::kubeconfig_cluster;
    use talosprov_machine::kubeconfig::{AdminKubeconfig, KubeconfigInput};
    use talosprov_machine::talosconfig::{TalosconfigInput, generate};
    if ttl.is_zero() || ttl > MAX_CLIENT_TTL {
        return Err(anyhow!("--ttl must be more than 0 and at most 365 days").into());
    }
    let lifetime = time::Duration::try_from(ttl).context("--ttl is too long")?;
    let state = read(settings, ui).await?;
    let secrets = super::prepare::state_secrets(&state)?.ok_or_else(|| {
        anyhow!("the state has no secrets bundle to issue a client certificate from")
    })?;
    let now = time::OffsetDateTime::now_utc();
    let missing =
        |name: &str| anyhow!("output {name} is not in the state yet: run `talosprov apply` first");
    let text = match which {
        ClientConfig::Talosconfig => {
            let stored = state
                .outputs
                .talosconfig
                .as_ref()
                .ok_or_else(|| missing("talosconfig"))?;
            let stored = Talosconfig::parse(stored.value.expose())
                .context("cannot read the stored talosconfig")?;
            let input = TalosconfigInput {
                context: stored.context,
                endpoints: stored.endpoints,
                nodes: stored.nodes,
                secrets: &secrets,
                now,
                lifetime,
            };
            generate(&input, &mut rand::rngs::OsRng)
                .context("cannot issue the talosconfig")?
                .to_yaml()
        }
        ClientConfig::Kubeconfig => {
            let stored = state
                .outputs
                .kubeconfig
                .as_ref()
                .ok_or_else(|| missing("kubeconfig"))?;
            let (cluster_name, endpoint) = kubeconfig_cluster(stored.value.expose())
                .context("the stored kubeconfig names no cluster and server")?;
            let input = KubeconfigInput {
                cluster_name,
                endpoint,
                secrets: &secrets,
                now,
                lifetime,
            };
            AdminKubeconfig::generate(&input, &mut rand::rngs::OsRng)
                .context("cannot issue the kubeconfig")?
                .yaml
        }
    };
    Ok(talosprov_base::sensitive::Sensitive::new(text))
}

/// Every address recorded in the state, in the state's order.
///
/// # Errors
/// As [`read`].
pub async fn list(settings: &StateSettings, ui: &Ui) -> Result<Vec<Address>, CommandError> {
    Ok(read(settings, ui).await?.addresses())
}

/// The attributes recorded at `address`, as JSON, sensitive values shown as
/// `(sensitive)`.
///
/// # Errors
/// As [`read`]; no resource at `address`.
pub async fn show(
    settings: &StateSettings,
    address: &Address,
    ui: &Ui,
) -> Result<serde_json::Value, CommandError> {
    let state = read(settings, ui).await?;
    Ok(state.show(address).ok_or_else(|| {
        anyhow!("no resource at {address} in the state (see `talosprov state list`)")
    })?)
}

/// The outputs in the state (kubeconfig, talosconfig, machine configs).
///
/// # Errors
/// As [`read`].
pub async fn outputs(settings: &StateSettings, ui: &Ui) -> Result<Outputs, CommandError> {
    Ok(read(settings, ui).await?.outputs)
}

/// `state rm`: forget `addresses` without touching what they name, after
/// asking unless `approved`. Returns how many were removed.
///
/// # Errors
/// No state; an address not in the state (every one named); a "no"; a held
/// lock; the save.
pub async fn remove(
    settings: &StateSettings,
    lock_timeout: Duration,
    addresses: &[Address],
    approved: bool,
    ui: &Ui,
) -> Result<usize, CommandError> {
    let store = settings.open(ui)?;
    with_lock(&store, lock_timeout, "state rm", ui, async || {
        let loaded = store.load().await?.ok_or_else(|| no_state(&store))?;
        let mut state = loaded.state;
        let missing: Vec<String> = addresses
            .iter()
            .filter(|a| state.show(a).is_none())
            .map(ToString::to_string)
            .collect();
        if !missing.is_empty() {
            return Err(anyhow!(
                "not in the state: {} (see `talosprov state list`)",
                missing.join(", ")
            )
            .into());
        }
        if !approved {
            match ui.ask(&Question::Forget(addresses.to_vec())).await? {
                Answer::Yes => {}
                Answer::No => return Err(anyhow!("state rm cancelled: nothing was removed").into()),
                Answer::NoTerminal => {
                    return Err(anyhow!(
                        "state rm needs confirmation and there is no terminal to ask on: add \
                     -auto-approve"
                    )
                    .into());
                }
            }
        }
        for a in addresses {
            state.remove(a);
        }
        store
            .save(&mut state, loaded.encrypted)
            .await
            .context("cannot save the state")?;
        Ok(addresses.len())
    })
    .await
}

/// What `state encrypt` or `state decrypt` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switched {
    /// The state's location, as the backend describes it.
    pub location: String,
    /// The serial the state was saved with; `None` when it already was as
    /// asked (nothing saved).
    pub serial: Option<u64>,
}

/// Store the state encrypted (`encrypted`) or in clear, with the keys from
/// the environment. Encryption never changes as a side effect of another
/// command.
///
/// # Errors
/// No state key, no state, a held lock, the save.
pub async fn set_encryption(
    settings: &StateSettings,
    lock_timeout: Duration,
    encrypted: bool,
    ui: &Ui,
) -> Result<Switched, CommandError> {
    let store = settings.open(ui)?;
    if !store.has_keys() {
        return Err(anyhow!(
            "no state key: set {PASSPHRASE_VAR}, or {RECIPIENTS_FILE_VAR} and {IDENTITY_FILE_VAR}"
        )
        .into());
    }
    let operation = if encrypted {
        "state encrypt"
    } else {
        "state decrypt"
    };
    let serial = with_lock(&store, lock_timeout, operation, ui, async || {
        let loaded = store.load().await?.ok_or_else(|| no_state(&store))?;
        if loaded.encrypted == encrypted {
            return Ok(None);
        }
        let mut state = loaded.state;
        store
            .save(&mut state, encrypted)
            .await
            .context("cannot save the state")?;
        Ok(Some(state.serial))
    })
    .await?;
    Ok(Switched {
        location: store.backend().describe(),
        serial,
    })
}

/// `force-unlock ID`: release a lock left by a run that was killed or
/// cancelled, after asking unless `approved`. Returns the state's location.
///
/// # Errors
/// A "no", a lock ID that is not the holder's, a backend failure.
pub async fn force_unlock(
    settings: &StateSettings,
    id: &str,
    approved: bool,
    ui: &Ui,
) -> Result<String, CommandError> {
    let store = settings.open(ui)?;
    let location = store.backend().describe();
    if !approved {
        let question = Question::ForceUnlock {
            id: id.to_owned(),
            location: location.clone(),
        };
        match ui.ask(&question).await? {
            Answer::Yes => {}
            Answer::No => return Err(anyhow!("force-unlock cancelled: the lock is kept").into()),
            Answer::NoTerminal => {
                return Err(anyhow!(
                    "force-unlock needs confirmation and there is no terminal to ask on: add -force"
                )
                .into());
            }
        }
    }
    store.unlock(id).await?;
    Ok(location)
}
