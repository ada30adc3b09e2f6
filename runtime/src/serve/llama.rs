//! llama-server's native `POST /completion`, answered in its shape
//! (llama.cpp `tools/server/README.md`): `content`, `stop`, `stop_type`
//! (`eos`, `limit` or `word`), `stopping_word`, `tokens_predicted`,
//! `tokens_evaluated`, `generation_settings` and `timings`, beside this
//! server's own `draftwise` object. A stream sends `data: {"content": ...,
//! "stop": false}` pieces and ends with the whole final object (`stop:
//! true`), with no `[DONE]` line, as llama-server does. The request side
//! is [`super::parse`] with [`super::parse::Endpoint::Llama`].

use super::worker::Finished;
use crate::engine::FinishReason;
use serde_json::{Value, json};

/// What the final object repeats of the request.
#[derive(Clone, Debug)]
pub struct Settings {
    pub model: String,
    /// The request's stop strings (to name the one that stopped it).
    pub stop: Vec<String>,
    /// llama-server's `generation_settings`: the values this request ran with.
    pub generation_settings: Value,
}

/// `stop_type` and `stopping_word`: `limit` at the token budget, `word`
/// when one of the request's stop strings ended the text (the completion's
/// text goes on with it where the response's stops), else `eos`.
fn stop_type(s: &Settings, f: &Finished) -> (&'static str, String) {
    if f.finish_reason == FinishReason::Length {
        return ("limit", String::new());
    }
    let after = f.completion.text.get(f.text.len()..).filter(|_| f.completion.text.starts_with(&f.text));
    match after.and_then(|rest| s.stop.iter().find(|w| rest.starts_with(w.as_str()))) {
        Some(w) => ("word", w.clone()),
        None => ("eos", String::new()),
    }
}

/// llama-server's `timings`: the prompt's (prefill) and the predicted
/// tokens' (decode) counts, times and rates.
fn timings(f: &Finished) -> Value {
    let o = &f.completion.outcome;
    let rates = |n: usize, ms: f64| {
        let per_token_ms = if n > 0 { ms / n as f64 } else { 0.0 };
        let per_second = if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        (per_token_ms, per_second)
    };
    let (prompt_per_token_ms, prompt_per_second) = rates(o.usage.prompt_tokens, o.prefill_ms);
    let (predicted_per_token_ms, predicted_per_second) = rates(o.usage.completion_tokens, o.decode_ms);
    json!({
        "prompt_n": o.usage.prompt_tokens,
        "prompt_ms": o.prefill_ms,
        "prompt_per_token_ms": prompt_per_token_ms,
        "prompt_per_second": prompt_per_second,
        "predicted_n": o.usage.completion_tokens,
        "predicted_ms": o.decode_ms,
        "predicted_per_token_ms": predicted_per_token_ms,
        "predicted_per_second": predicted_per_second,
    })
}

/// The final object: the whole response of a non-streaming request (with
/// the text), the last event of a stream (`content` then empty).
pub fn response(s: &Settings, f: &Finished, content: &str, draftwise: Value) -> Value {
    let (stop_type, stopping_word) = stop_type(s, f);
    let usage = &f.completion.outcome.usage;
    json!({
        "index": 0,
        "id_slot": 0,
        "content": content,
        "tokens": [],
        "stop": true,
        "stop_type": stop_type,
        "stopping_word": stopping_word,
        "model": s.model,
        "tokens_predicted": usage.completion_tokens,
        "tokens_evaluated": usage.prompt_tokens,
        "tokens_cached": 0,
        "truncated": false,
        "has_new_line": f.text.contains('\n'),
        "generation_settings": s.generation_settings,
        "timings": timings(f),
        "draftwise": draftwise,
    })
}

/// A stream's piece of text.
pub fn partial(text: &str) -> Value {
    json!({"index": 0, "id_slot": 0, "content": text, "tokens": [], "stop": false})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Completion, Outcome, Usage};

    fn finished(text: &str, full: &str, reason: FinishReason) -> Finished {
        let usage = Usage { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 };
        let outcome = Outcome {
            usage,
            finish_reason: reason,
            prefill_ms: 10.0,
            decode_ms: 20.0,
            total_ms: 30.0,
            decode_steps: 3,
            decode_tokens: 3,
            decode_tok_per_s: Some(150.0),
            prefill_tok_per_s: 500.0,
            text_sha256: String::new(),
            token_ids_sha256: String::new(),
            token_ids: vec![1, 2, 3, 4],
        };
        Finished {
            completion: Completion {
                schema_version: 1,
                prompt_id: "p".into(),
                warmup: false,
                repeat: 0,
                text: full.into(),
                outcome,
            },
            speculation: None,
            text: text.into(),
            finish_reason: reason,
            queue_ms: 0.0,
            batch: Default::default(),
            logprobs: None,
            echo: None,
        }
    }

    fn settings(stop: &[&str]) -> Settings {
        Settings {
            model: "m".into(),
            stop: stop.iter().map(|s| s.to_string()).collect(),
            generation_settings: json!({"n_predict": 4}),
        }
    }

    #[test]
    fn the_final_object_has_llama_servers_fields_and_names_the_stop() {
        let f = finished(" Paris", " Paris.\nThe", FinishReason::Stop);
        let r = response(&settings(&["."]), &f, &f.text, Value::Null);
        assert_eq!(r["content"], " Paris");
        assert_eq!(
            (r["stop"].as_bool(), r["stop_type"].as_str(), r["stopping_word"].as_str()),
            (Some(true), Some("word"), Some("."))
        );
        assert_eq!((r["tokens_predicted"].as_u64(), r["tokens_evaluated"].as_u64()), (Some(4), Some(5)));
        assert_eq!(r["timings"]["prompt_n"], 5);
        assert_eq!(r["timings"]["predicted_per_second"], 200.0);
        assert_eq!(r["model"], "m");
        // No stop string ended it: an end-of-generation token did; the budget is `limit`.
        let f = finished(" Paris.", " Paris.", FinishReason::Stop);
        assert_eq!(response(&settings(&["\n"]), &f, "", Value::Null)["stop_type"], "eos");
        let f = finished(" Paris", " Paris", FinishReason::Length);
        assert_eq!(response(&settings(&[]), &f, "", Value::Null)["stop_type"], "limit");
        assert_eq!(partial("x"), json!({"index": 0, "id_slot": 0, "content": "x", "tokens": [], "stop": false}));
    }
}
