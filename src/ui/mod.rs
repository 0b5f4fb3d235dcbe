//! Everything talosprov shows a person: errors, diagnostics, plans and progress.
//! No other module writes to the terminal; `tracing` carries developer logs.

pub mod cell;
pub mod console;
pub mod diagnostics;
pub mod json;
pub mod lines;
pub mod out;
pub mod plan;
pub mod progress;
pub mod summary;
pub mod view;

/// Set up developer logs on stderr. By default only talosprov's own warnings:
/// a library's log lines (kube-rs retrying a connection, say) never reach the
/// console, since talosprov says itself what it waits for. `-v` adds the
/// libraries' warnings and talosprov's debug lines, `-vv` the libraries' debug
/// lines and talosprov's trace; `RUST_LOG` overrides all of it. Coloured only on
/// a terminal without `NO_COLOR`, like the rest of the output.
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "off,talosprov=warn",
        1 => "warn,talosprov=debug",
        _ => "debug,talosprov=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(diagnostics::stderr_colour())
        .try_init();
}
