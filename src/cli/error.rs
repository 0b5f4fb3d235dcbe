//! The one error type at the top of the CLI, and the one place that decides
//! exit codes, following OpenTofu: 0 success, 1 error, 2 `plan
//! -detailed-exitcode` found changes, 3 the state is locked by another run
//! (still, once `-lock-timeout` ran out), 130 interrupted by SIGINT (Ctrl-C),
//! 143 interrupted by SIGTERM (128 + the signal's number).

use std::process::ExitCode;

/// What a command ended with, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Success,
    /// Exit 2: only `plan -detailed-exitcode` returns this, when the plan has changes.
    Changes,
}

use talosprov_engine::command::CommandError;

/// The process exit code for a failed command: 1, 3 when the state is
/// locked, or when interrupted 130 (SIGINT) or 143 (SIGTERM), the first
/// signal received deciding.
pub fn exit_code(error: &CommandError) -> ExitCode {
    match error {
        CommandError::Interrupted => ExitCode::from(
            super::signals::received()
                .unwrap_or(super::signals::Signal::Interrupt)
                .exit_code(),
        ),
        CommandError::Locked(_) => ExitCode::from(3),
        CommandError::Reported | CommandError::Failed(_) => ExitCode::from(1),
    }
}

impl Outcome {
    /// The process exit code: 0, or 2 for changes.
    pub fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Success => ExitCode::SUCCESS,
            Outcome::Changes => ExitCode::from(2),
        }
    }
}

/// Whether an error chain ends in a broken pipe (`talosprov render | head`),
/// which counts as success, as in ripgrep.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
