//! The `runtime` commands that run in this module: `generate`, `bench`,
//! `fetch-model`, `build-info`, with their flags. The command tree itself is
//! the binary's (`main.rs`); `serve` and `policy` live in their own modules.

use crate::build_info::BuildInfo;
use crate::events::{Completion, Event, SpeculationReport, startup_event};
use crate::fetch;
use crate::generate::{Engine, NoSink};
use crate::open::{OpenSettings, Opened, open};
use crate::prompts::{PromptItem, PromptKind, parse_prompts};
use crate::sampling::SamplingParams;
use crate::tokenizer::chat::Message;
use anyhow::{Context, Result, bail};
use clap::Args;
use kernels::dispatch;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// A GGUF file, a Hugging Face checkpoint directory, or a known model by name (smollm2-135m, gemma3-270m: fetched on first use); default: smollm2-135m.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Worker threads (default: the CPUs available to this process).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Prompt length: one prefill forward pass of this many tokens.
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Tokens decoded one forward pass at a time after the prefill.
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    /// Recorded repetitions.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Repetitions run first and discarded.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Time one forward pass of W = 1..=--max-width tokens (a verify block) instead.
    #[arg(long)]
    pub verify_cost: bool,
    /// Widest verify block for --verify-cost.
    #[arg(long, default_value_t = 16)]
    pub max_width: usize,
    /// One JSON object with every raw sample on stdout.
    #[arg(long)]
    pub json: bool,
    /// Width curve (with --drafter): draft widths to measure against classic decoding.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5,6,7,8")]
    pub widths: Vec<usize>,
    /// Width curve: the prompt set, grouped into tasks by each line's `type`
    /// (default: the repository's prompts/width-curve.jsonl, built in).
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Width curve: tokens generated per prompt.
    #[arg(long, default_value_t = 96)]
    pub max_tokens: usize,
    /// Where forward passes run: cpu, cuda or cuda:N (default: CUDA device 0 when this build has
    /// CUDA and it is usable, else the CPU).
    #[arg(long, env = "DRAFTWISE_DEVICE")]
    pub device: Option<String>,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// The width curve's built-in prompt set (`runtime bench --drafter`).
pub const WIDTH_CURVE_PROMPTS: &str = include_str!("../../prompts/width-curve.jsonl");

#[derive(Args, Debug, Clone)]
pub struct CacheArgs {
    /// Model cache directory (default: $DRAFTWISE_CACHE_DIR, else $XDG_CACHE_HOME/draftwise, else ~/.cache/draftwise).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct FetchModelArgs {
    /// Which known model: smollm2-135m (the default) or gemma3-270m.
    #[arg(long, default_value = "smollm2-135m")]
    pub model: String,
    #[command(flatten)]
    pub cache: CacheArgs,
}

#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    /// A GGUF file, a Hugging Face checkpoint directory, or a known model by name (smollm2-135m, gemma3-270m: fetched on first use); default: smollm2-135m.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The prompt text.
    #[arg(long, conflicts_with = "prompts", required_unless_present = "prompts")]
    pub prompt: Option<String>,
    /// A JSONL prompt set: {"id": ..., "prompt": ...} or {"id": ..., "messages": [...]} per line.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Render --prompt as a user message through the model's chat template.
    #[arg(long)]
    pub chat: bool,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// Worker threads (default: the CPUs available to this process).
    #[arg(long)]
    pub threads: Option<usize>,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// 0 keeps every token.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Run each prompt this many times (recorded passes).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Unrecorded passes over the prompt set first, marked `warmup` in events.
    #[arg(long, default_value_t = 0)]
    pub warmup: usize,
    /// JSONL events on stdout (startup, completion); human logs stay on stderr.
    #[arg(long)]
    pub json: bool,
    /// Where forward passes run: cpu, cuda or cuda:N (default: CUDA device 0 when this build has
    /// CUDA and it is usable, else the CPU).
    #[arg(long, env = "DRAFTWISE_DEVICE")]
    pub device: Option<String>,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// Speculative decoding settings. Without `--drafter` the measured policy
/// decides: a measurement for this host that beats classic decoding turns its
/// drafter on; otherwise decoding is classic. `--drafter none` is classic.
#[derive(Args, Debug, Clone, Default)]
pub struct SpecArgs {
    /// Drafter kind: ngram, layerskip or draft-model (dflash and mtp are recognized, not loadable yet),
    /// or none for classic decoding. Default: what the policy table measured for this host.
    #[arg(long)]
    pub drafter: Option<String>,
    /// Tokens drafted per verify step (overrides DRAFTWISE_DRAFT_BLOCK_SIZE and the policy table).
    #[arg(long)]
    pub draft_block_size: Option<String>,
    /// The draft checkpoint for `--drafter draft-model` (GGUF or Hugging Face directory).
    #[arg(long)]
    pub drafter_model: Option<PathBuf>,
    /// `layerskip` layers: a count K (the first K layers) or a list like 0,1,2,7.
    #[arg(long)]
    pub layerskip_layers: Option<String>,
    /// `ngram`: longest pattern looked up (default: the measured entry's, else 4).
    #[arg(long)]
    pub ngram_max: Option<usize>,
    /// `ngram`: shortest pattern looked up (default: the measured entry's, else 3).
    #[arg(long)]
    pub ngram_min: Option<usize>,
    /// Speculate even if the block-vs-chain probe finds verify rows that differ from the chain
    /// (forfeits byte-identical output; also DRAFTWISE_ALLOW_INEXACT=1).
    #[arg(long)]
    pub allow_inexact: bool,
}

impl From<&SpecArgs> for crate::spec::setup::SpecSettings {
    fn from(a: &SpecArgs) -> Self {
        crate::spec::setup::SpecSettings {
            drafter: a.drafter.clone(),
            draft_block_size: a.draft_block_size.clone(),
            drafter_model: a.drafter_model.clone(),
            layerskip_layers: a.layerskip_layers.clone(),
            ngram_max: a.ngram_max,
            ngram_min: a.ngram_min,
            allow_inexact: a.allow_inexact,
        }
    }
}

/// `runtime fetch-model`: a known model's path in the cache, fetched if needed.
pub fn fetch_model(c: FetchModelArgs) -> Result<ExitCode> {
    let Some(spec) = fetch::find_model(&c.model) else {
        bail!("fetch-model --model {}: not a known model (known: {})", c.model, fetch::model_names());
    };
    let p = fetch::ensure_model(spec, c.cache.cache_dir.as_deref())?;
    println!("{}", p.display());
    Ok(ExitCode::SUCCESS)
}

/// `runtime build-info`: this build's identity, as text or one JSON object.
pub fn build_info(json: bool) -> Result<ExitCode> {
    let b = BuildInfo::current();
    if json {
        println!("{}", serde_json::to_string(&b)?);
    } else {
        println!(
            "runtime {} ({}{}), {}, profile {}, features [{}]",
            b.version,
            b.git_commit,
            if b.git_dirty == crate::build_info::GitDirty::Dirty { ", dirty" } else { "" },
            b.rustc,
            b.profile,
            b.features.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn bench(args: BenchArgs) -> Result<ExitCode> {
    let threads = crate::limits::resolve_threads(args.threads)?;
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    if args.verify_cost && args.max_width == 0 {
        bail!("--max-width must be at least 1");
    }
    let Opened { engine, path, .. } = open(OpenSettings {
        model: args.model.as_deref(),
        cache_dir: args.cache.cache_dir.as_deref(),
        device: args.device.as_deref(),
        threads,
    })?;
    let spec = crate::bench::BenchSpec {
        prompt_tokens: args.prompt_tokens.max(1),
        gen_tokens: args.gen_tokens,
        reps: args.reps,
        warmup: args.warmup,
        verify_cost: args.verify_cost.then_some(args.max_width),
    };
    // `bench` measures classic decoding unless a drafter is named (the
    // policy does not pick one here: the bench measures, it does not serve).
    if let Some(kind) = args.spec.drafter.as_deref().filter(|k| *k != "none") {
        return width_curve(&args, kind, &engine);
    }
    let report = crate::bench::run(&engine, &path.display().to_string(), &spec)?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", crate::bench::render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// `runtime bench --drafter KIND`: the width curve, one table per task.
fn width_curve(args: &BenchArgs, kind: &str, engine: &Engine) -> Result<ExitCode> {
    use crate::bench::curve::{self, CurveSpec, Task};
    if args.spec.draft_block_size.is_some() || args.spec.allow_inexact {
        bail!(
            "bench --drafter measures every width in --widths exactly: --draft-block-size and --allow-inexact do not apply"
        );
    }
    if args.widths.is_empty() || args.widths.iter().any(|&w| w == 0 || w > crate::policy::MAX_BLOCK_SIZE) {
        bail!("--widths: give widths in 1..={}", crate::policy::MAX_BLOCK_SIZE);
    }
    if args.max_tokens < 2 {
        bail!("--max-tokens must be at least 2 (decode throughput needs a token after the first)");
    }
    let (origin, text) = match &args.prompts {
        Some(p) => (p.clone(), crate::limits::read_prompt_file(p)?),
        None => (PathBuf::from("prompts/width-curve.jsonl (built in)"), WIDTH_CURVE_PROMPTS.to_string()),
    };
    let items = parse_prompts(&text, &origin)?;
    let tok = &engine.loaded.tokenizer;
    let mut tasks: Vec<Task> = Vec::new();
    for it in &items {
        let ids = it.encode(tok)?;
        let name = it.task_type().to_string();
        match tasks.iter_mut().find(|t| t.name == name) {
            Some(t) => t.prompts.push((it.id.clone(), ids)),
            None => tasks.push(Task { name, prompts: vec![(it.id.clone(), ids)] }),
        }
    }
    let (drafter_kind, mut drafter) = crate::spec::setup::build_drafter(kind, &(&args.spec).into(), engine)?;
    let spec = CurveSpec {
        drafter: drafter_kind,
        widths: args.widths.clone(),
        max_tokens: args.max_tokens,
        reps: args.reps,
        warmup: args.warmup,
    };
    let curves = curve::run(engine, drafter.as_mut(), &tasks, &spec)?;
    if args.json {
        println!("{}", serde_json::to_string(&curve::report(engine, spec, curves))?);
    } else {
        println!(
            "kernels {} | threads {} | multirow {} | max tokens {} | reps {} (+{} warm-up) | prompts {}",
            engine.family.name(),
            engine.threads,
            if dispatch::multirow_enabled() { "on" } else { "off" },
            spec.max_tokens,
            spec.reps,
            spec.warmup,
            origin.display()
        );
        print!("{}", curve::render(&curves, &spec));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn generate(args: GenerateArgs) -> Result<ExitCode> {
    let sampling =
        SamplingParams { temperature: args.temperature, top_k: args.top_k, top_p: args.top_p, seed: args.seed };
    sampling.validate().map_err(anyhow::Error::msg)?;
    let threads = crate::limits::resolve_threads(args.threads)?;
    let items = match (&args.prompt, &args.prompts) {
        (Some(p), _) => {
            let kind = if args.chat {
                PromptKind::Chat(vec![Message { role: "user".into(), content: p.clone() }])
            } else {
                PromptKind::Text(p.clone())
            };
            vec![PromptItem { id: "prompt".into(), kind, tag: None }]
        }
        (None, Some(path)) => {
            let text = crate::limits::read_prompt_file(path)?;
            parse_prompts(&text, path)?
        }
        (None, None) => bail!("give --prompt or --prompts"),
    };
    let Opened { engine, selection, cuda, .. } = open(OpenSettings {
        model: args.model.as_deref(),
        cache_dir: args.cache.cache_dir.as_deref(),
        device: args.device.as_deref(),
        threads,
    })?;
    let tok = &engine.loaded.tokenizer;

    // Tokenize everything up front: a bad prompt fails before any work.
    let mut prompts = Vec::with_capacity(items.len());
    for it in &items {
        prompts.push((it.id.clone(), it.encode(tok)?));
    }

    let decoding = crate::spec::setup::Speculation::from_args(&args.spec, &engine)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    eprintln!("{}", decoding.summary());
    if args.json {
        let ev = Event::Startup(startup_event(&engine, &selection, &decoding, sampling, args.max_tokens, cuda));
        writeln!(out, "{}", ev.to_line())?;
        out.flush()?;
    }
    let mut spec = decoding.speculation;
    let passes = (0..args.warmup).map(|r| (true, r)).chain((0..args.repeat).map(|r| (false, r)));
    for (warmup, repeat) in passes {
        for (id, ids) in &prompts {
            let tag = crate::request::Tag { id, warmup, repeat };
            let (g, extra) =
                crate::request::decode(&engine, spec.as_mut(), ids, args.max_tokens, &sampling, &mut NoSink, tag)
                    .with_context(|| format!("prompt {id}"))?;
            let text = tok.decode(&g.token_ids)?;
            let c = Completion::new(id, warmup, repeat, g, text);
            let extra = extra.and_then(SpeculationReport::from_event);
            if args.json {
                writeln!(out, "{}", Event::Completion(c).to_line())?;
                if let Some(s) = extra {
                    writeln!(out, "{}", s.into_event().to_line())?;
                }
            } else if !warmup {
                writeln!(out, "{}", c.text)?;
                eprintln!(
                    "[{}] prompt {} tok, completion {} tok ({}), prefill {:.1} tok/s, decode {} tok/s",
                    c.prompt_id,
                    c.outcome.usage.prompt_tokens,
                    c.outcome.usage.completion_tokens,
                    c.outcome.finish_reason.as_str(),
                    c.outcome.prefill_tok_per_s,
                    c.outcome.decode_tok_per_s.map_or("-".into(), |v| format!("{v:.1}")),
                );
                if let Some(d) = extra.as_ref().and_then(SpeculationReport::diagnostics) {
                    eprintln!(
                        "[{}] {} rounds, accepted {}/{} drafted, {} tokens per verify",
                        c.prompt_id,
                        d.rounds,
                        d.accepted,
                        d.drafted,
                        d.emitted_per_verify.map_or("-".into(), |v| format!("{v:.2}"))
                    );
                }
            }
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
