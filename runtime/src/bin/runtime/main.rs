//! `runtime`: a thin binary over the `runtime` library: the command tree
//! (its flags in [`args`]), and a dispatch to the library function that runs
//! each command.

mod args;
#[cfg(test)]
mod flag_table;

use args::{BenchArgs, FetchModelArgs, GenerateArgs, PolicyCommand, ServeArgs};
use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::process::ExitCode;

/// draftwise runtime: an LLM inference engine with measured speculative defaults.
#[derive(Parser, Debug)]
#[command(
    name = "runtime",
    version,
    after_help = "Exit status: 0 on success, 1 when the command fails, 2 for a usage error (a bad flag or value)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Said under the help of the commands whose flags follow llama.cpp's.
const OTHER_ENGINES: &str = "llama.cpp's -ngl, -md, -np, -fa, -ub, -cb, --draft-max, --spec-type, vLLM's \
`serve MODEL` and --speculative-config, and SGLang's --speculative-* flags are taken too: each works, maps onto \
these flags (said once on stderr), or is refused naming what to give instead (docs/flags.md).";

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate completions for a prompt or a prompt set.
    #[command(after_help = OTHER_ENGINES)]
    Generate(GenerateArgs),
    /// Serve the model over HTTP with an OpenAI-compatible API (docs/serve.md).
    #[command(after_help = OTHER_ENGINES)]
    Serve(ServeArgs),
    /// Download a known model into the cache and verify it (default smollm2-135m: SmolLM2-135M-Instruct Q4_1; --model gemma3-270m).
    FetchModel(FetchModelArgs),
    /// Print this build's identity.
    BuildInfo {
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The draft-width policy: `show` the compiled table, `explain` a resolution.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Measure prefill and decode tokens per second, the verify-cost curve, or (with
    /// --drafter) the speculative width curve against classic decoding.
    #[command(after_help = OTHER_ENGINES)]
    Bench(BenchArgs),
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Generate(args) => runtime::commands::generate(args.into()),
        Command::Serve(args) => runtime::serve::run(args.into()),
        Command::FetchModel(args) => runtime::commands::fetch_model(args.into()),
        Command::Policy(PolicyCommand::Show { json }) => runtime::commands::policy::show(json),
        Command::Policy(PolicyCommand::Explain(args)) => runtime::commands::policy::explain_command((*args).into()),
        Command::Bench(args) => runtime::commands::bench(args.into()),
        Command::BuildInfo { json } => runtime::commands::build_info(json),
    }
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DRAFTWISE_LOG").unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter);
    // DRAFTWISE_LOG_FORMAT=json: one JSON object per line (timestamp, level,
    // target, fields) for log collectors; otherwise text, coloured only on a
    // terminal and never under NO_COLOR (no-color.org: set and not empty).
    if std::env::var("DRAFTWISE_LOG_FORMAT").is_ok_and(|f| f == "json") {
        logs.json().with_ansi(false).init();
    } else {
        logs.with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()))
            .init();
    }
    // Usage errors exit 2 (clap exits before `run`, as does a foreign flag
    // refused by name); runtime errors exit 1.
    let line = match runtime::commands::compat::rewrite(std::env::args_os().collect(), cfg!(feature = "cuda")) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for n in &line.notes {
        tracing::info!(target: "draftwise::flags", "{n}");
    }
    match run(Cli::parse_from(line.args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", runtime::exit::error_chain(&e));
            ExitCode::from(runtime::exit::EXIT_RUNTIME_ERROR)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every flag, short flag and alias is unique and well formed (clap
    /// checks this only in debug builds, and the tests run in release).
    #[test]
    fn the_command_tree_is_consistent() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn llama_cpp_short_flags_parse_as_ours() {
        use clap::Parser;
        let cli = super::Cli::try_parse_from([
            "runtime",
            "generate",
            "-m",
            "x.gguf",
            "-p",
            "hi",
            "-n",
            "16",
            "-t",
            "2",
            "-c",
            "512",
            "-s",
            "7",
            "--temp",
            "0.5",
            "--draft-max",
            "4",
            "--model-draft",
            "d.gguf",
        ])
        .unwrap();
        let super::Command::Generate(g) = cli.command else { panic!("not generate") };
        assert_eq!(g.load.model.as_deref(), Some(std::path::Path::new("x.gguf")));
        assert_eq!(g.prompt.as_deref(), Some("hi"));
        assert_eq!((g.max_tokens, g.load.threads, g.load.ctx_size, g.seed), (16, Some(2), Some(512), 7));
        assert_eq!(g.temperature, 0.5);
        assert_eq!(g.spec.draft_width.as_deref(), Some("4"));
        assert_eq!(g.spec.drafter_model.as_deref(), Some(std::path::Path::new("d.gguf")));
        let cli = super::Cli::try_parse_from(["runtime", "policy", "explain", "--target", "x.gguf"]).unwrap();
        let super::Command::Policy(super::PolicyCommand::Explain(e)) = cli.command else { panic!("not explain") };
        assert_eq!(e.target, Some(std::path::PathBuf::from("x.gguf")));
    }
}
