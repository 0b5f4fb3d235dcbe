//! The commands' workflows, each one call that takes resolved settings and a
//! [`Frontend`] and returns what the command's view renders, the way
//! OpenTofu's `internal/backend/local` runs `plan` and `apply` for its CLI:
//! - [`plan`], [`apply`] (a fresh plan or a saved one, `-refresh-only`, then
//!   the final Kubernetes gate), [`destroy`], [`import`], [`health`];
//! - [`state`] (list, show, rm, encrypt, decrypt, force-unlock, the outputs)
//!   and [`secrets`] (export, import);
//! - [`validate`] and [`render`], which read files only.
//!
//! The engine builds the clients, opens the state and holds its lock
//! ([`store::locked`], waiting with the state crate's `lock_waiting`), loads
//! and saves the state, plans, asks through the frontend, executes and waits.
//! The frontend only shows and asks: warnings, diagnostics, plans, the
//! executor's events and the gate's, and the questions.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use talosprov_base::diagnostics::Diagnostic;

use crate::apply::event::Update;
use crate::apply::session::{Question, Shown};
use crate::health::gate::{GateEvent, GateOutcome};

mod addons;
pub mod adopt;
mod adopt_talos;
pub mod apply;
pub mod destroy;
pub mod etcd;
mod gate;
mod guard;
pub mod health;
pub mod import;
pub mod init;
pub mod migrate;
pub mod plan;
mod planning;
pub mod prepare;
pub mod privileges;
pub mod render;
pub mod rotate;
pub mod secrets;
pub mod state;
pub mod store;
pub mod validate;
pub mod validate_online;

use talosprov_retry::Notice;

/// A failed command: what to tell the user once, and which exit code it maps
/// to in the CLI (OpenTofu's: 1, 3 for a held lock, 130 or 143 after a
/// signal).
#[derive(Debug)]
pub enum CommandError {
    /// An error already shown (diagnostics given to the frontend): exit 1
    /// without saying more.
    Reported,
    /// Any other error: shown once, with its chain of causes; exit 1.
    Failed(anyhow::Error),
    /// Ctrl-C or SIGTERM stopped the run (the first signal decides the exit
    /// code).
    Interrupted,
    /// The state lock is held by another run, still once `-lock-timeout` ran
    /// out: exit 3, so a script can tell "busy, try later" from a failure.
    Locked(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for CommandError {
    fn from(e: E) -> Self {
        CommandError::Failed(e.into())
    }
}

/// A frontend's answer to a [`Question`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// "yes".
    Yes,
    /// Anything else.
    No,
    /// There is no terminal to ask on (CI): the command says which flag
    /// skips the question.
    NoTerminal,
}

/// A boxed future borrowed from the frontend, so that [`Frontend`] stays
/// object-safe.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a command's output goes: the CLI's views (text, live progress or
/// JSON lines), or a test's recorder. Every method only shows or asks; none
/// decides anything about the run.
pub trait Frontend: Send + Sync {
    /// A warning (`Warning: …` on stderr, or a JSON diagnostic).
    fn warn(&self, text: &str);
    /// A line about the run itself on stderr that is not a warning: the wait
    /// for a state lock, the lock's ID on the http backend.
    fn note(&self, text: &str);
    /// Topology, patch, template or add-on problems, each with its location.
    fn diagnostics(&self, found: &[Diagnostic]);
    /// A request a client retries (Proxmox busy, a connection reset).
    fn retry(&self, notice: &Notice);
    /// Show a plan.
    ///
    /// # Errors
    /// The output cannot be written.
    fn show(&self, shown: Shown<'_>) -> anyhow::Result<()>;
    /// Ask `question` (on the terminal). The engine stops waiting for the
    /// answer on the first interruption.
    fn ask<'a>(&'a self, question: &'a Question) -> Pending<'a, anyhow::Result<Answer>>;
    /// Where the executor's events go, asked for once, just before the first
    /// change (a view started earlier would draw over the question).
    fn updates(&self) -> mpsc::UnboundedSender<Update>;
    /// Resolves once the view fed by [`Frontend::updates`] has drawn every
    /// event (the sender was dropped); at once when none was started.
    fn updates_done(&self) -> Pending<'_, ()>;
    /// An event of the final Kubernetes gate: it started, what it still
    /// waits for, or a failed read.
    fn gate(&self, event: &GateEvent);
    /// How the final gate ended; `wait` is how long it could wait.
    fn gate_outcome(&self, outcome: &GateOutcome, wait: Duration);
    /// Start delivering Ctrl-C and SIGTERM to the command, which then stops
    /// cleanly on the first and at once on the second; `None` leaves the
    /// default behaviour (the process ends). Called when the state lock is
    /// taken.
    fn interrupts(&self) -> Option<Interrupts>;
    /// The name of the first signal received (`SIGINT`, `SIGTERM`), for the
    /// messages that say what was interrupted.
    fn interrupted_by(&self) -> &'static str;
}

/// A shared frontend, as every workflow takes it (the clients' retry watcher
/// holds a clone).
pub type Ui = Arc<dyn Frontend>;

/// The signals a command receives, by name (`SIGINT`, `SIGTERM`), in order.
#[derive(Debug)]
pub struct Interrupts(mpsc::UnboundedReceiver<&'static str>);

impl Interrupts {
    /// Signals sent on `rx`'s channel.
    pub fn new(rx: mpsc::UnboundedReceiver<&'static str>) -> Interrupts {
        Interrupts(rx)
    }

    /// The next signal's name; never resolves once the sender is gone.
    pub async fn next(&mut self) -> &'static str {
        match self.0.recv().await {
            Some(name) => name,
            None => std::future::pending().await,
        }
    }
}

/// Ask `question` unless `skip`. A "no" fails with `refused`; no terminal
/// fails saying to add `flag` to run without asking; an interruption while
/// asking is [`CommandError::Interrupted`].
///
/// # Errors
/// As above, and the frontend's read errors.
pub(crate) async fn approve(
    ui: &Ui,
    skip: bool,
    question: &Question,
    flag: &str,
    refused: &str,
    mut cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<(), CommandError> {
    if skip {
        return Ok(());
    }
    let answer = tokio::select! {
        a = ui.ask(question) => a?,
        _ = cancel.wait_for(|c| *c) => return Err(CommandError::Interrupted),
    };
    match answer {
        Answer::Yes => Ok(()),
        Answer::No => Err(anyhow::anyhow!("{refused}").into()),
        Answer::NoTerminal => Err(anyhow::anyhow!(
            "no terminal to confirm on: add {flag} to run without asking"
        )
        .into()),
    }
}

/// The duration the variable `name` gives, read as every duration is
/// ([`talosprov_base::duration::parse`]: seconds, or such as `5m`); `default`
/// when it is unset or empty.
///
/// # Errors
/// A value that is neither seconds nor a duration, naming the variable.
pub fn duration_var(name: &str, default: Duration) -> anyhow::Result<Duration> {
    let Some(text) = std::env::var(name).ok().filter(|t| !t.trim().is_empty()) else {
        return Ok(default);
    };
    talosprov_base::duration::parse(&text)
        .map_err(|expected| anyhow::anyhow!("{name}={text:?} is {expected}"))
}

/// Now, UTC, to the second, as RFC 3339 (`2026-12-07T23:45:00Z`): when a
/// record was made.
pub(crate) fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// The variable that sets how long before a certificate in the state expires a plan renews
/// it (a duration: `30days`, `720h`; default 30 days).
pub const RENEW_WITHIN_VAR: &str = "TALOSPROV_RENEW_WITHIN";

/// A plan's clock (now, UTC) and renewal window: [`RENEW_WITHIN_VAR`], else
/// [`talosprov_plan::renewal::DEFAULT_RENEW_WITHIN`].
///
/// # Errors
/// A value that is not a duration, naming the variable.
pub fn renewal() -> anyhow::Result<talosprov_plan::renewal::Renewal> {
    use talosprov_plan::renewal::{DEFAULT_RENEW_WITHIN, Renewal};
    let default =
        std::time::Duration::from_secs(DEFAULT_RENEW_WITHIN.whole_seconds().unsigned_abs());
    let within = duration_var(RENEW_WITHIN_VAR, default)?;
    Ok(Renewal {
        now: time::OffsetDateTime::now_utc(),
        within: time::Duration::try_from(within)
            .map_err(|_| anyhow::anyhow!("{RENEW_WITHIN_VAR} is too long"))?,
    })
}

/// The add-on sources' bounds in time: a `helm template` run's and a
/// download's deadline from [`talosprov_sources::SOURCE_TIMEOUT_ENV`]
/// (seconds, or a duration such as `5m`; default 120 s), and the minimum
/// rate of a download ([`talosprov_sources::SourceLimits::default`]).
///
/// # Errors
/// A value that is not a duration, or is zero, naming the variable.
pub fn source_limits() -> anyhow::Result<talosprov_sources::limits::SourceLimits> {
    let name = talosprov_sources::limits::SOURCE_TIMEOUT_ENV;
    let default = talosprov_sources::limits::SourceLimits::default();
    let deadline = duration_var(name, default.deadline)?;
    if deadline.is_zero() {
        anyhow::bail!("{name} is 0: a download or a helm run needs some time; unset it for 120 s");
    }
    Ok(talosprov_sources::limits::SourceLimits {
        deadline,
        ..default
    })
}

#[cfg(test)]
mod tests;
