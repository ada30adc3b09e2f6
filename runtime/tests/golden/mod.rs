//! The golden check against llama.cpp's greedy continuations, shared by the
//! real-checkpoint test binaries (`gemma3.rs`, `qwen25.rs`): per reference
//! prompt, our greedy tokens equal llama.cpp's up to its first near-tie,
//! our top-1 equals its top-1 wherever its margin is clear, and its top-8
//! logits lie within a tolerance of ours on the same (teacher-forced)
//! tokens.

use runtime::engine::{Engine, FinishReason};
use runtime::model::Session;
use runtime::model::forward::LogitRows;
use runtime::sampling::{SamplingParams, argmax};
use runtime::tokenizer::Tokenizer;
use runtime::tokenizer::chat::Message;
use serde_json::Value;

/// A reference prompt's ids: a chat's through the file's template (its
/// rendering checked against the reference's `rendered` text first), or a
/// text prompt's.
pub fn prompt_ids(tok: &Tokenizer, p: &Value) -> Vec<u32> {
    match p.get("messages") {
        Some(m) => {
            let msgs: Vec<Message> = serde_json::from_value(m.clone()).unwrap();
            assert_eq!(tok.render_chat(&msgs, true).unwrap(), p["rendered"].as_str().unwrap(), "{}", p["id"]);
            tok.encode_chat(&msgs, usize::MAX).unwrap()
        }
        None => tok.encode_prompt(p["text"].as_str().unwrap()).unwrap(),
    }
}

/// What one model's check allows.
pub struct Golden {
    /// `{size:?}` or the model's name, for messages.
    pub name: &'static str,
    /// Steps where llama.cpp's top-2 margin is below this are near-ties.
    pub near_tie: f32,
    /// The largest top-8 logit difference allowed.
    pub tolerance: f32,
    /// Greedy steps compared before near-ties, at least (fewer proves little).
    pub min_compared: usize,
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// The one-token chain from `prompt`, fed `forced` (llama.cpp's tokens)
/// and returning each step's logits.
pub fn teacher_forced(e: &Engine, prompt: &[u32], forced: &[u32]) -> Vec<Vec<f32>> {
    let m = &e.loaded.model;
    e.install(|| {
        let mut s = Session::new(&m.config);
        let mut out = vec![m.forward(e.family, &mut s, prompt, LogitRows::Last).unwrap()];
        for &t in forced {
            out.push(m.forward(e.family, &mut s, &[t], LogitRows::Last).unwrap());
        }
        out
    })
}

/// The check over `reference["greedy"]` (llama.cpp's dump: prompt ids,
/// greedy ids, margins and top-8 logits per step).
pub fn check_greedy(e: &Engine, reference: &Value, g: &Golden) {
    let name = g.name;
    let mut worst = (0.0f32, String::new());
    let mut compared = 0;
    for p in reference["greedy"].as_array().unwrap() {
        let id = p["id"].as_str().unwrap();
        let want = ids(&p["greedy_ids"]);
        let margins: Vec<f32> = p["margins"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        let prompt = ids(&p["prompt_ids"]);
        let logits = teacher_forced(e, &prompt, &want);
        // Greedy on our own logits: equal up to llama.cpp's first near-tie.
        // A generation holds its ids without the end-of-generation token
        // that llama.cpp's list ends with when it stopped (`Red<|im_end|>`):
        // that token counts as agreed when ours stopped there too.
        let out = e.generate(&prompt, want.len(), &SamplingParams::default()).unwrap();
        let mut agree = out.token_ids.iter().zip(&want).take_while(|(a, b)| a == b).count();
        let eog = &e.loaded.tokenizer.end_of_generation;
        if agree == out.token_ids.len() && agree + 1 == want.len() && eog.contains(&want[agree]) {
            assert_eq!(out.finish_reason, FinishReason::Stop, "{name} {id}");
            agree += 1;
        }
        let first_tie = margins.iter().position(|&m| m < g.near_tie).unwrap_or(want.len());
        compared += first_tie;
        assert!(
            agree >= first_tie.min(want.len()),
            "{name} {id}: our greedy tokens leave llama.cpp's at step {agree} (margin there {}), before its first \
             near-tie (step {first_tie})",
            margins.get(agree).copied().unwrap_or(f32::NAN)
        );
        for (step, top) in p["top_logits"].as_array().unwrap().iter().enumerate() {
            for pair in top.as_array().unwrap() {
                let (t, theirs) = (pair[0].as_u64().unwrap() as usize, pair[1].as_f64().unwrap() as f32);
                let ours = logits[step][t];
                if (ours - theirs).abs() > worst.0 {
                    worst =
                        ((ours - theirs).abs(), format!("{id} step {step} token {t}: {ours} vs llama.cpp {theirs}"));
                }
            }
            if margins[step] >= g.near_tie {
                assert_eq!(argmax(&logits[step]) as u64, top[0][0].as_u64().unwrap(), "{name} {id} step {step}: top-1");
            }
        }
    }
    eprintln!(
        "{name}: largest top-8 logit difference from llama.cpp: {} ({}); {compared} greedy steps compared",
        worst.0, worst.1
    );
    assert!(compared >= g.min_compared, "only {compared} greedy steps before near-ties: the check would prove little");
    assert!(worst.0 <= g.tolerance, "largest difference {} over the tolerance: {}", worst.0, worst.1);
}
