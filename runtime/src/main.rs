//! `runtime`: a thin binary over the `runtime` library.
use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("DRAFTWISE_LOG").unwrap_or_else(|_| "info".into()))
        .init();
    // Usage errors exit 2 (clap exits before `run`); runtime errors exit 1.
    match runtime::cli::run(runtime::cli::Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", runtime::limits::error_chain(&e));
            ExitCode::from(runtime::limits::EXIT_RUNTIME_ERROR)
        }
    }
}
