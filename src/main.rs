//! The `talosprov` binary: parse the command line, run the command, report the
//! error once, and turn the outcome into an exit code.

use std::process::ExitCode;

fn main() -> ExitCode {
    talosprov::cli::main()
}
