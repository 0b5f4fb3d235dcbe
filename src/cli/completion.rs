//! `talosprov completion SHELL`: print a completion script for bash, zsh, fish
//! or PowerShell, generated from the same clap description the parser uses, so
//! every command and flag is in it.

use clap::Args;
use clap_complete::Shell;

use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;

/// Arguments of `talosprov completion`.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell to print the script for.
    #[arg(value_name = "SHELL", value_parser = ["bash", "zsh", "fish", "powershell"])]
    pub shell: String,
}

/// Print the completion script of `command` (the whole command line, as
/// `Cli::command()` describes it) on stdout.
///
/// # Errors
/// Only when stdout is closed.
pub fn run(args: CompletionArgs, mut command: clap::Command) -> Result<Outcome, CommandError> {
    let shell = match args.shell.as_str() {
        "bash" => Shell::Bash,
        "zsh" => Shell::Zsh,
        "fish" => Shell::Fish,
        _ => Shell::PowerShell,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "talosprov", &mut script);
    crate::ui::out::write_stdout(&String::from_utf8_lossy(&script))?;
    Ok(Outcome::Success)
}
