//! The `talosprov` binary: parse the command line, run the command, report the
//! error once, and turn the outcome into an exit code.

use std::process::ExitCode;

/// mimalloc instead of the C library's allocator: the configs are rendered
/// and merged on every core, and glibc's and musl's allocators spend about a
/// third of `validate`'s time (see the README's performance figures).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    talosprov::cli::main()
}
