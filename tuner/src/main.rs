//! `tuner`: measures draft widths on this host. Only help exists so far.
use clap::Parser;

/// Measure speculative draft widths on this host and write records and policy entries.
#[derive(Parser)]
#[command(name = "tuner", version)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _ = Cli::parse();
    println!("tuner: no subcommands yet; see `tuner --help`.");
    Ok(())
}
