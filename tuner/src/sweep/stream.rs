//! One OpenAI streamed completion against `runtime serve`, measured from
//! the client side.
//!
//! Principal items: [`complete`] (send one greedy streamed request, read
//! every chunk), [`Streamed`] (its text, usage, time to first token and
//! end-to-end time, with the server's own [`ServedTimings`], docs/serve.md),
//! [`StreamError`]. Chunks are typed structs; a chunk that
//! does not parse, a mid-stream error, a missing usage chunk or a stream
//! that ends before `data: [DONE]` is an error naming what was wrong.
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use runtime::events::{FinishReason, ServedTimings, Usage};
use runtime::prompts::PromptKind;
use serde::Deserialize;

use crate::data::streamed::Streamed;
use crate::sweep::http::{self, HttpError, SseEvent};

/// The endpoint a prompt goes to: text prompts to completions, message
/// lists to chat completions (rendered with the model's chat template, as
/// `runtime generate` renders them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

impl Endpoint {
    pub fn of(prompt: &PromptKind) -> Endpoint {
        match prompt {
            PromptKind::Text(_) => Endpoint::Completions,
            PromptKind::Chat(_) => Endpoint::Chat,
        }
    }

    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Completions => "/v1/completions",
            Endpoint::Chat => "/v1/chat/completions",
        }
    }
}

/// The request body: greedy, streamed, usage asked for. The same settings
/// as a generate arm's `--temperature 0 --seed 0 --max-tokens N`.
pub fn request_body(model: &str, prompt: &PromptKind, max_tokens: usize) -> serde_json::Value {
    let mut b = serde_json::json!({
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    match prompt {
        PromptKind::Text(t) => b["prompt"] = t.clone().into(),
        PromptKind::Chat(m) => b["messages"] = serde_json::to_value(m).unwrap_or_default(),
    }
    b
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    draftwise: Option<ServedTimings>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<FinishReason>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: String,
    #[serde(default)]
    code: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("chunk {index} is not an OpenAI chunk ({source}): {excerpt}")]
    BadChunk { index: usize, source: serde_json::Error, excerpt: String },
    #[error("the server sent an error in the stream: {0}")]
    Server(String),
    #[error("chunk {index} has id {found:?}, the stream's is {expected:?}")]
    MixedIds { index: usize, expected: String, found: String },
    #[error("the stream ended before `data: [DONE]`, after {chunks} chunk(s)")]
    NoDone { chunks: usize },
    #[error("{0} (the stream had {1} chunk(s))")]
    Missing(&'static str, usize),
}

fn excerpt(s: &str) -> String {
    match s.char_indices().nth(120) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Reads a stream of chunks to `[DONE]`. Split from [`complete`] so that the
/// parsing runs on any event source.
pub fn read_chunks(
    mut next: impl FnMut() -> Result<Option<SseEvent>, HttpError>,
    written_at: Instant,
) -> Result<Streamed, StreamError> {
    let ms = |t: Instant| t.duration_since(written_at).as_secs_f64() * 1e3;
    let mut id: Option<String> = None;
    let mut text = String::new();
    let mut usage = None;
    let mut draftwise = None;
    let mut finish_reason = None;
    let mut ttft_ms = None;
    let mut chunks = 0;
    loop {
        let Some(ev) = next()? else {
            return Err(StreamError::NoDone { chunks });
        };
        let now = Instant::now();
        chunks += 1;
        let data = match ev {
            SseEvent::Done => {
                let id = id.ok_or(StreamError::Missing("no chunk carried an id", chunks))?;
                let usage = usage.ok_or(StreamError::Missing(
                    "no usage chunk, though stream_options.include_usage was asked for",
                    chunks,
                ))?;
                let finish_reason =
                    finish_reason.ok_or(StreamError::Missing("no chunk carried a finish_reason", chunks))?;
                let ttft_ms = ttft_ms.ok_or(StreamError::Missing("no chunk carried a choice", chunks))?;
                return Ok(Streamed { id, text, usage, finish_reason, ttft_ms, e2e_ms: ms(now), chunks, draftwise });
            }
            SseEvent::Data(d) => d,
        };
        let c: Chunk = serde_json::from_str(&data).map_err(|source| StreamError::BadChunk {
            index: chunks - 1,
            source,
            excerpt: excerpt(&data),
        })?;
        if let Some(e) = c.error {
            return Err(StreamError::Server(match e.code {
                Some(code) => format!("{} ({code})", e.message),
                None => e.message,
            }));
        }
        match (&id, c.id) {
            (None, Some(x)) => id = Some(x),
            (Some(a), Some(b)) if *a != b => {
                return Err(StreamError::MixedIds { index: chunks - 1, expected: a.clone(), found: b });
            }
            _ => {}
        }
        if !c.choices.is_empty() && ttft_ms.is_none() {
            ttft_ms = Some(ms(now));
        }
        for ch in c.choices {
            if let Some(t) = ch.text.or(ch.delta.and_then(|d| d.content)) {
                text.push_str(&t);
            }
            if ch.finish_reason.is_some() {
                finish_reason = ch.finish_reason;
            }
        }
        if c.usage.is_some() {
            usage = c.usage;
        }
        if c.draftwise.is_some() {
            draftwise = c.draftwise;
        }
    }
}

/// Sends one greedy streamed request for `prompt` and reads it to the end;
/// `timeout` bounds the whole exchange.
pub fn complete(
    addr: SocketAddr,
    model: &str,
    prompt: &PromptKind,
    max_tokens: usize,
    timeout: Duration,
) -> Result<Streamed, StreamError> {
    let body = request_body(model, prompt, max_tokens).to_string();
    let mut s = http::post_stream(addr, Endpoint::of(prompt).path(), body.as_bytes(), timeout)?;
    let written_at = s.written_at;
    read_chunks(|| s.next_event(), written_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[&str]) -> Result<Streamed, StreamError> {
        let mut it = events.iter().map(|e| if *e == "[DONE]" { SseEvent::Done } else { SseEvent::Data(e.to_string()) });
        read_chunks(|| Ok(it.next()), Instant::now())
    }

    const USAGE: &str = r#"{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"draftwise":{"queue_ms":0.1,"prefill_ms":1,"decode_ms":2,"decode_steps":1,"decode_tok_per_s":500,"token_ids":[7,8],"speculative":null}}"#;

    #[test]
    fn chat_and_completion_chunks_concatenate_to_the_text_with_usage_and_timings() {
        let s = run(&[
            r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],"usage":null}"#,
            r#"{"id":"c","choices":[{"index":0,"text":" there","finish_reason":"length"}],"usage":null}"#,
            USAGE,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!((s.id.as_str(), s.text.as_str(), s.finish_reason), ("c", "Hi there", FinishReason::Length));
        assert_eq!(s.usage.completion_tokens, 2);
        assert_eq!(s.draftwise.unwrap().token_ids, Some(vec![7, 8]));
        assert!(s.ttft_ms <= s.e2e_ms && s.chunks == 5);
    }

    #[test]
    fn malformed_truncated_or_incomplete_streams_are_errors_that_say_why() {
        let e = run(&[r#"{"id":"c","choices":"#]).unwrap_err();
        assert!(matches!(e, StreamError::BadChunk { index: 0, .. }), "{e}");
        let e = run(&["[1,2]"]).unwrap_err();
        assert!(e.to_string().contains("not an OpenAI chunk"), "{e}");
        let e = run(&[r#"{"id":"c","choices":[{"text":"a","finish_reason":null}]}"#]).unwrap_err();
        assert!(matches!(e, StreamError::NoDone { chunks: 1 }), "{e}");
        let e = run(&[r#"{"id":"c","choices":[{"text":"a","finish_reason":"stop"}]}"#, "[DONE]"]).unwrap_err();
        assert!(e.to_string().contains("no usage chunk"), "{e}");
        let e = run(&[r#"{"error":{"message":"boom","type":"x","param":null,"code":"internal_error"}}"#, "[DONE]"])
            .unwrap_err();
        assert!(e.to_string().contains("boom (internal_error)"), "{e}");
        let e = run(&[r#"{"id":"a","choices":[]}"#, r#"{"id":"b","choices":[]}"#]).unwrap_err();
        assert!(matches!(e, StreamError::MixedIds { .. }), "{e}");
        let e = run(&[USAGE, "[DONE]"]).unwrap_err();
        assert!(e.to_string().contains("finish_reason"), "{e}");
    }

    #[test]
    fn text_prompts_go_to_completions_and_message_lists_to_chat() {
        let chat =
            PromptKind::Chat(vec![runtime::tokenizer::chat::Message { role: "user".into(), content: "x".into() }]);
        let b = request_body("m", &chat, 8);
        assert_eq!(Endpoint::of(&chat).path(), "/v1/chat/completions");
        assert_eq!((b["messages"][0]["content"].as_str(), b["temperature"].as_u64()), (Some("x"), Some(0)));
        assert_eq!(b["stream_options"]["include_usage"], true);
        let text = PromptKind::Text("y".into());
        assert_eq!(
            (Endpoint::of(&text).path(), request_body("m", &text, 8)["prompt"].as_str()),
            ("/v1/completions", Some("y"))
        );
    }
}
