//! The ngram drafter's acceptance, position by position, on a prompt set:
//! the trace an adaptive draft-length controller can be replayed on without
//! timing anything.
//!
//! `cargo run --release -p runtime --example accept_trace -- MODEL.gguf PROMPTS.jsonl MAX_TOKENS [THREADS]`
//!
//! For each prompt, greedy classic decoding gives the tokens every
//! speculative run emits too (the exactness contract). At each point of
//! that output with `p` tokens emitted (the context is the prompt and
//! those `p` tokens, as the decode loop's drafter sees it), the ngram
//! drafter's proposal of up to 16 tokens is compared with the tokens
//! classic decoding emitted next: `avail[p]` is the proposal's length and
//! `agree[p]` how many of its first tokens equal the output's. A draft of
//! `n` tokens there is the proposal's first `min(n, avail)` (the ngram
//! lookup copies a prefix), and a round drafting it accepts
//! `min(n, agree)`, so any schedule of draft lengths can be replayed on the
//! trace exactly, token for token (`scripts/bench/replay-adaptive.py`).
//!
//! One JSON line per prompt: `{"id", "type", "prompt_tokens", "out", "avail", "agree"}`
//! (`avail` and `agree` indexed by `p`, from 1: the first token comes from the prefill).

use runtime::engine::Engine;
use runtime::sampling::SamplingParams;
use runtime::speculative::drafter::NgramDrafter;

const LOOKAHEAD: usize = 16;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        anyhow::bail!("usage: accept_trace MODEL.gguf PROMPTS.jsonl MAX_TOKENS [THREADS]");
    }
    let path = std::path::PathBuf::from(&args[0]);
    let prompts_path = std::path::PathBuf::from(&args[1]);
    let max_tokens: usize = args[2].parse()?;
    let threads: usize = args.get(3).map_or(Ok(2), |t| t.parse())?;
    let loaded = runtime::model::load(&path)?;
    let fam = kernels::dispatch::KernelFamily::best();
    let eng = Engine::new(loaded, fam, threads)?;
    let text = runtime::limits::read_prompt_file(&prompts_path)?;
    let items = runtime::prompts::parse_prompts(&text, &prompts_path)?;
    let drafter = NgramDrafter::default();
    for it in &items {
        let ids = it.encode(&eng.loaded.tokenizer)?;
        let g = eng.generate(&ids, max_tokens, &SamplingParams::default())?;
        let out = &g.token_ids;
        let mut avail = vec![0usize];
        let mut agree = vec![0usize];
        // The drafter's context at point p: the prompt and out[..p].
        let mut context = ids.clone();
        context.extend(out.first());
        for p in 1..out.len() {
            let d = drafter.lookup(&context, LOOKAHEAD);
            avail.push(d.len());
            agree.push(d.iter().zip(&out[p..]).take_while(|(a, b)| a == b).count());
            context.push(out[p]);
        }
        let line = serde_json::json!({
            "id": it.id, "type": it.task_type(), "prompt_tokens": ids.len(),
            "out": out.len(), "avail": avail, "agree": agree,
        });
        println!("{line}");
    }
    Ok(())
}
