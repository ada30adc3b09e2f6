//! The `runtime` commands, each from its plain settings: `generate`,
//! `bench`, `fetch-model` and `build-info` here, `policy show` and `policy
//! explain` in [`policy`]; `serve` is [`crate::serve::run`]. The command tree
//! and its flags are the binary's (`src/bin/runtime/`).

pub mod compat;
pub mod drafter_flags;
pub mod policy;

use crate::build_info::BuildInfo;
use crate::engine::{Engine, NoSink};
use crate::events::{Completion, Event, SpeculationReport, startup_event};
use crate::fetch;
use crate::open::{ModelSettings, Opened, open};
use crate::prompts::{PromptItem, PromptKind, parse_prompts};
use crate::sampling::SamplingParams;
use crate::speculative::setup::SpeculationSettings;
use crate::tokenizer::chat::Message;
use anyhow::{Context, Result, bail};
use kernels::dispatch;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// What `runtime bench` measures, as given (`runtime bench --help` says
/// what each field is; [`bench`] checks them).
#[derive(Debug, Clone)]
pub struct BenchSettings {
    /// The model and how it is opened.
    pub load: ModelSettings,
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub reps: usize,
    pub warmup: usize,
    /// Time verify passes of 1..=`max_rows` rows instead.
    pub verify_cost: bool,
    pub max_rows: usize,
    pub json: bool,
    /// Width curve (with a drafter): the draft widths measured.
    pub widths: Vec<usize>,
    /// Width curve: the prompt set (`None`: [`WIDTH_CURVE_PROMPTS`]).
    pub prompts: Option<PathBuf>,
    /// Width curve: tokens generated per prompt.
    pub max_tokens: usize,
    /// A drafter here asks for the width curve.
    pub spec: SpeculationSettings,
}

/// The width curve's built-in prompt set (`runtime bench --drafter`).
pub const WIDTH_CURVE_PROMPTS: &str = include_str!("../../../prompts/width-curve.jsonl");

/// Which known model `runtime fetch-model` fetches, and where to.
#[derive(Debug, Clone)]
pub struct FetchModelSettings {
    /// A known model's name (`fetch::MODELS`).
    pub model: String,
    /// The model cache (`None`: the default one).
    pub cache_dir: Option<PathBuf>,
}

/// What `runtime generate` runs, as given (`runtime generate --help` says
/// what each field is; [`generate`] checks them).
#[derive(Debug, Clone)]
pub struct GenerateSettings {
    /// The model and how it is opened.
    pub load: ModelSettings,
    /// One prompt; exactly one of `prompt` and `prompts` is given.
    pub prompt: Option<String>,
    /// A JSONL prompt set.
    pub prompts: Option<PathBuf>,
    /// Render `prompt` as a user message through the chat template.
    pub chat: bool,
    pub max_tokens: usize,
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    /// llama.cpp's `--repeat-penalty` (1: off).
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// llama.cpp's `--repeat-last-n`: -1 the whole context, 0 no penalty.
    pub repeat_last_n: i64,
    pub seed: u64,
    /// Recorded passes over the prompts.
    pub repeat: usize,
    /// Unrecorded passes first.
    pub warmup: usize,
    pub json: bool,
    pub spec: SpeculationSettings,
}

/// `runtime fetch-model`: a known model's path in the cache, fetched if needed.
pub fn fetch_model(c: FetchModelSettings) -> Result<ExitCode> {
    let Some(spec) = fetch::find_model(&c.model) else {
        bail!("fetch-model --model {}: not a known model (known: {})", c.model, fetch::model_names());
    };
    let p = fetch::ensure_model(spec, c.cache_dir.as_deref())?;
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

/// `runtime bench`: the throughput report, or with a drafter the width curve.
pub fn bench(args: BenchSettings) -> Result<ExitCode> {
    use crate::limits::{MAX_BENCH_TOKENS, MAX_PASSES, MAX_VERIFY_ROWS, MAX_WARMUP_PASSES, check_range};
    let threads = crate::limits::resolve_threads(args.load.threads)?;
    for (flag, v, lo, hi) in [
        ("--reps", args.reps, 1, MAX_PASSES),
        ("--warmup", args.warmup, 0, MAX_WARMUP_PASSES),
        ("--prompt-tokens", args.prompt_tokens, 1, MAX_BENCH_TOKENS),
        ("--gen-tokens", args.gen_tokens, 0, MAX_BENCH_TOKENS),
        ("--max-rows", args.max_rows, 1, MAX_VERIFY_ROWS),
        ("--max-tokens", args.max_tokens, 2, MAX_BENCH_TOKENS),
    ] {
        check_range(flag, v as u64, lo, hi).map_err(anyhow::Error::msg)?;
    }
    bench_flags_apply(&args)?;
    let Opened { engine, path, .. } = open(&args.load, threads)?;
    // The prefill and what follows it must fit the model's context.
    let context = engine.loaded.model.config.context_length;
    let (after, flag) =
        if args.verify_cost { (args.max_rows, "--max-rows") } else { (args.gen_tokens, "--gen-tokens") };
    if args.spec.drafter.as_deref().is_none_or(|k| k == "none") && args.prompt_tokens + after > context {
        bail!(
            "--prompt-tokens {} plus {flag} {after} is more than the model's context length {context}",
            args.prompt_tokens
        );
    }
    let spec = crate::bench::BenchSpec {
        prompt_tokens: args.prompt_tokens.max(1),
        gen_tokens: args.gen_tokens,
        reps: args.reps,
        warmup: args.warmup,
        verify_cost: args.verify_cost.then_some(args.max_rows),
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

/// A prompt of `n_prompt` tokens leaves room for at least one generated
/// token in a context of `context` positions, or is refused naming the
/// prompt and both numbers (the server's `context_length_exceeded`).
pub fn check_prompt_fits(id: &str, n_prompt: usize, context: usize) -> Result<()> {
    if n_prompt >= context {
        bail!(
            "prompt {id} is {n_prompt} tokens; the context length is {context}, so at most {} tokens of prompt \
             leave room for one generated token: shorten it",
            context.saturating_sub(1)
        );
    }
    Ok(())
}

/// Every flag `bench` takes acts, or it is refused here, before the model
/// loads: `--policy` (bench measures the widths it is given, it resolves
/// none from a table), the width curve's flags without `--drafter`, and
/// `--verify-cost` with one. (`--drafter-model` with a drafter that takes
/// no model is refused with the drafter's settings.)
fn bench_flags_apply(args: &BenchSettings) -> Result<()> {
    let s = &args.spec;
    if let Some(p) = &s.policy {
        bail!(
            "--policy {}: bench resolves no width from a table (it measures classic decoding, or with --drafter \
             every width in --widths); try a table with `runtime generate --policy FILE` or `runtime serve --policy \
             FILE`",
            p.display()
        );
    }
    let curve = s.drafter.as_deref().is_some_and(|k| k != "none");
    if curve {
        if args.verify_cost {
            bail!("--verify-cost times the target's verify passes without a drafter: run it without --drafter");
        }
        return Ok(());
    }
    let given = [
        ("--draft-width", s.draft_width.is_some()),
        ("--drafter-model", s.drafter_model.is_some()),
        ("--layerskip-layers", s.layerskip_layers.is_some()),
        ("--ngram-min", s.ngram_min.is_some()),
        ("--ngram-max", s.ngram_max.is_some()),
        ("--suffix-min-match", s.suffix_min_match.is_some()),
        ("--suffix-max-match", s.suffix_max_match.is_some()),
        ("--suffix-min-prob", s.suffix_min_prob.is_some()),
        ("--allow-inexact", s.allow_inexact),
        ("--adaptive", s.adaptive.is_some()),
        ("--cost-curve", !s.cost_curves.is_empty()),
        ("--prompts", args.prompts.is_some()),
    ];
    if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
        bail!(
            "{flag} applies to the width curve, which needs --drafter KIND; without a drafter bench measures \
             classic decoding and would ignore it"
        );
    }
    Ok(())
}

/// `runtime bench --drafter KIND`: the width curve, one table per task.
fn width_curve(args: &BenchSettings, kind: &str, engine: &Engine) -> Result<ExitCode> {
    use crate::bench::curve::{self, CurveSpec, Task};
    if args.spec.draft_width.is_some() || args.spec.allow_inexact {
        bail!(
            "bench --drafter measures every width in --widths exactly: --draft-width and --allow-inexact do not apply"
        );
    }
    let widths: Vec<::policy::Width> = match args.widths.iter().map(|&w| ::policy::Width::new(w)).collect() {
        Ok(w) if !args.widths.is_empty() => w,
        _ => bail!("--widths: give widths in 1..={}", ::policy::MAX_WIDTH),
    };
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
    // `--adaptive on` adds the adaptive arm, weighing the `--cost-curve`s given.
    let adaptive_cost = ::policy::table::parse_cost_curves(&args.spec.cost_curves).map_err(anyhow::Error::msg)?;
    match (args.spec.adaptive, adaptive_cost.is_empty()) {
        (Some(true), true) => bail!(
            "bench --drafter --adaptive on weighs the verify pass's cost: give --cost-curve CONTEXT=R1,R2,... \
             (an entry's verify_cost, or `runtime bench --verify-cost`)"
        ),
        (Some(true), false) | (None, true) => {}
        _ => bail!("bench --drafter: --cost-curve goes with --adaptive on (which adds the adaptive arm)"),
    }
    let (drafter_kind, mut drafter) = crate::speculative::setup::build_drafter(kind, &args.spec, engine)?;
    let spec = CurveSpec {
        drafter: drafter_kind,
        widths,
        max_tokens: args.max_tokens,
        reps: args.reps,
        warmup: args.warmup,
        adaptive_cost,
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

/// `runtime generate`'s text mode: each token's text to the terminal as
/// it is decoded (whole characters only; the rest follows at the end).
struct TerminalSink<'a> {
    tok: &'a crate::tokenizer::Tokenizer,
    ids: Vec<u32>,
    detok: crate::serve::text::Detokenizer,
    printed: String,
}

impl crate::engine::TokenSink for TerminalSink<'_> {
    fn token(&mut self, id: u32) -> std::ops::ControlFlow<crate::engine::Halt> {
        self.ids.push(id);
        // A piece that fails to decode only waits: the end prints the rest.
        let piece = self.detok.next(self.tok, &self.ids).unwrap_or_default();
        if !piece.is_empty() {
            let mut o = std::io::stdout().lock();
            if write!(o, "{piece}").and_then(|()| o.flush()).is_ok() {
                self.printed.push_str(&piece);
            }
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// A [`SamplingParams::validate`] message (it starts with the setting's
/// name) with the name as `generate`'s flag spells it.
fn flag_spelling(e: &str) -> String {
    let (name, rest) = e.split_once(' ').unwrap_or((e, ""));
    let flag = match name {
        "repetition_penalty" => "repeat-penalty".to_string(),
        n => n.replace('_', "-"),
    };
    format!("{flag} {rest}")
}

/// `runtime generate`: each prompt decoded as the settings and the policy say.
pub fn generate(args: GenerateSettings) -> Result<ExitCode> {
    // The penalties count llama.cpp's window: the flags are llama.cpp's.
    let penalty_scope = crate::sampling::PenaltyScope::from_repeat_last_n(args.repeat_last_n)
        .map_err(|e| anyhow::anyhow!("--{}", flag_spelling(&e)))?;
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        presence_penalty: args.presence_penalty,
        frequency_penalty: args.frequency_penalty,
        penalty_scope,
    };
    sampling.validate().map_err(|e| anyhow::anyhow!("--{}", flag_spelling(&e)))?;
    for (flag, v, lo, hi) in [
        ("--repeat", args.repeat, 1, crate::limits::MAX_PASSES),
        ("--warmup", args.warmup, 0, crate::limits::MAX_WARMUP_PASSES),
    ] {
        crate::limits::check_range(flag, v as u64, lo, hi).map_err(anyhow::Error::msg)?;
    }
    let threads = crate::limits::resolve_threads(args.load.threads)?;
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
    let Opened { engine, selection, cuda, .. } = open(&args.load, threads)?;
    let tok = &engine.loaded.tokenizer;

    // Tokenize everything up front: a bad prompt fails before any work,
    // one past the context too (as the server refuses it), not after its
    // prefill.
    let mut prompts = Vec::with_capacity(items.len());
    for it in &items {
        let ids = it.encode(tok)?;
        check_prompt_fits(&it.id, ids.len(), engine.loaded.info.context_length)?;
        prompts.push((it.id.clone(), ids));
    }

    let decoding = crate::speculative::setup::Speculation::from_settings(&args.spec, &engine)?;
    // Stdout is locked per write, never across a decode: the terminal
    // sink writes from the engine's threads while tokens are decoded.
    let out = || std::io::stdout().lock();
    eprintln!("{}", decoding.summary());
    if args.json {
        let ev = Event::Startup(startup_event(&engine, &selection, &decoding, sampling, args.max_tokens, cuda));
        let mut o = out();
        writeln!(o, "{}", ev.to_line())?;
        o.flush()?;
    }
    let mut spec = decoding.speculation;
    let passes = (0..args.warmup).map(|r| (true, r)).chain((0..args.repeat).map(|r| (false, r)));
    for (warmup, repeat) in passes {
        for (id, ids) in &prompts {
            let tag = crate::request::Tag { id, warmup, repeat };
            // Text mode prints each recorded completion as it is decoded;
            // the JSON events are written whole, as before.
            let mut terminal = TerminalSink { tok, ids: Vec::new(), detok: Default::default(), printed: String::new() };
            let mut quiet = NoSink;
            let sink: &mut dyn crate::engine::TokenSink = if args.json || warmup { &mut quiet } else { &mut terminal };
            let (g, extra) = crate::request::decode(&engine, spec.as_mut(), ids, args.max_tokens, &sampling, sink, tag)
                .with_context(|| format!("prompt {id}"))?;
            let text = tok.decode(&g.token_ids)?;
            let c = Completion::new(id, warmup, repeat, g, text);
            let extra = extra.and_then(SpeculationReport::from_event);
            let mut out = out();
            if args.json {
                writeln!(out, "{}", Event::Completion(c).to_line())?;
                if let Some(s) = extra {
                    writeln!(out, "{}", s.into_event().to_line())?;
                }
            } else if !warmup {
                // What the stream has not shown yet (text held back at a
                // split character, or after the last token).
                match c.text.strip_prefix(terminal.printed.as_str()) {
                    Some(rest) => writeln!(out, "{rest}")?,
                    None => {
                        writeln!(out)?;
                        tracing::warn!("the streamed text differs from the decoded completion; the completion is:");
                        writeln!(out, "{}", c.text)?;
                    }
                }
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

#[cfg(test)]
mod bench_flag_tests {
    use super::*;

    fn bench(spec: SpeculationSettings, prompts: Option<PathBuf>, verify_cost: bool) -> BenchSettings {
        BenchSettings {
            load: ModelSettings::default(),
            prompt_tokens: 8,
            gen_tokens: 8,
            reps: 1,
            warmup: 0,
            verify_cost,
            max_rows: 4,
            json: false,
            widths: vec![1, 2],
            prompts,
            max_tokens: 8,
            spec,
        }
    }

    #[test]
    fn every_bench_flag_acts_or_is_refused_before_the_model_loads() {
        // --policy: never read by bench, even when the file does not exist.
        let policy = SpeculationSettings { policy: Some("/no/such/table.toml".into()), ..Default::default() };
        let e = bench_flags_apply(&bench(policy.clone(), None, false)).unwrap_err().to_string();
        assert!(e.contains("--policy /no/such/table.toml") && e.contains("resolves no width"), "{e}");
        let curve = SpeculationSettings { drafter: Some("ngram".into()), ..policy };
        assert!(bench_flags_apply(&bench(curve, None, false)).is_err());
        // The width curve's flags without a drafter.
        let model = SpeculationSettings { drafter_model: Some("d.gguf".into()), ..Default::default() };
        let e = bench_flags_apply(&bench(model, None, false)).unwrap_err().to_string();
        assert!(e.contains("--drafter-model applies to the width curve"), "{e}");
        let none = SpeculationSettings { drafter: Some("none".into()), adaptive: Some(true), ..Default::default() };
        assert!(bench_flags_apply(&bench(none, None, false)).unwrap_err().to_string().contains("--adaptive"));
        let e = bench_flags_apply(&bench(SpeculationSettings::default(), Some("p.jsonl".into()), false)).unwrap_err();
        assert!(e.to_string().contains("--prompts"), "{e}");
        // --verify-cost with a drafter.
        let ngram = SpeculationSettings { drafter: Some("ngram".into()), ..Default::default() };
        assert!(
            bench_flags_apply(&bench(ngram.clone(), None, true)).unwrap_err().to_string().contains("--verify-cost")
        );
        // What acts is accepted.
        assert!(bench_flags_apply(&bench(ngram, Some("p.jsonl".into()), false)).is_ok());
        assert!(bench_flags_apply(&bench(SpeculationSettings::default(), None, true)).is_ok());
    }
}
