//! Ctrl-C (SIGINT) and SIGTERM while a command holds the state lock: the
//! first asks the run to stop cleanly, a second one ends it at once. The
//! first signal received decides the exit code: 130 for SIGINT, 143 for
//! SIGTERM (128 + the signal number, as a shell reports a process killed by
//! it, and as OpenTofu exits).

use std::sync::atomic::{AtomicU8, Ordering};

/// An interrupting signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT (Ctrl-C on a terminal).
    Interrupt,
    /// SIGTERM (`kill`, a cancelled CI job, a container stopping).
    Terminate,
}

impl Signal {
    /// The exit code of a run it stopped: 130 (SIGINT) or 143 (SIGTERM).
    pub fn exit_code(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }

    /// `SIGINT` or `SIGTERM`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }
}

/// Say on stderr that the signal stopped `command` (`plan`, `apply`, `destroy`)
/// while it was making its plan: nothing was changed, no plan was saved, and
/// running it again starts over. The lock is released after this is said.
pub fn warn_planning_interrupted(command: &str) {
    let signal = received().map_or("Interrupt", Signal::name);
    crate::ui::out::warn(&format!(
        "{signal} received while making the plan: stopped before any change; nothing was \
         changed and no plan was saved; run `talosprov {command}` again to start over"
    ));
}

/// The first signal received (0: none, else its number).
static FIRST: AtomicU8 = AtomicU8::new(0);

fn remember(signal: Signal) {
    let number = match signal {
        Signal::Interrupt => 2,
        Signal::Terminate => 15,
    };
    let _ = FIRST.compare_exchange(0, number, Ordering::SeqCst, Ordering::SeqCst);
}

/// The first signal this process received, if any.
pub fn received() -> Option<Signal> {
    match FIRST.load(Ordering::SeqCst) {
        2 => Some(Signal::Interrupt),
        15 => Some(Signal::Terminate),
        _ => None,
    }
}

/// Handlers for SIGINT and SIGTERM. Once installed, the signals no longer
/// kill the process: they are delivered to [`Signals::recv`].
pub struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Install the handlers; `None` when they cannot be installed (the
    /// default behaviour, being killed, then stays).
    pub fn install() -> Option<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let int = signal(SignalKind::interrupt()).ok()?;
            let term = signal(SignalKind::terminate()).ok()?;
            Some(Signals { int, term })
        }
        #[cfg(not(unix))]
        {
            Some(Signals {})
        }
    }

    /// The next signal; the first one of the process is remembered for the
    /// exit code.
    pub async fn recv(&mut self) -> Signal {
        #[cfg(unix)]
        let signal = tokio::select! {
            _ = self.int.recv() => Signal::Interrupt,
            _ = self.term.recv() => Signal::Terminate,
        };
        #[cfg(not(unix))]
        let signal = {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            Signal::Interrupt
        };
        remember(signal);
        signal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_128_plus_the_signal_number() {
        assert_eq!(Signal::Interrupt.exit_code(), 130);
        assert_eq!(Signal::Terminate.exit_code(), 143);
    }
}
