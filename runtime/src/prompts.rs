//! The prompt-set format both binaries read: JSONL, one prompt a line,
//! `{"id": ..., "prompt": "..."}` (a text prompt) or
//! `{"id": ..., "messages": [...]}` (a chat, rendered through the model's
//! chat template), with an optional `type` (the task type: `bench --drafter`
//! groups its tasks by it, the tuner records it per request).
//!
//! Principal items: [`parse_prompts`], [`PromptItem`], [`PromptKind`].

use crate::tokenizer::Tokenizer;
use crate::tokenizer::chat::Message;
use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::path::Path;

/// The task type of a prompt whose line has no `type`.
pub const UNTYPED: &str = "untyped";

/// One prompt of a set.
#[derive(Debug, Clone)]
pub struct PromptItem {
    pub id: String,
    pub kind: PromptKind,
    /// The line's `type` tag (task type), when it has one.
    pub tag: Option<String>,
}

impl PromptItem {
    /// The task type: the line's `type`, else [`UNTYPED`].
    pub fn task_type(&self) -> &str {
        self.tag.as_deref().unwrap_or(UNTYPED)
    }

    /// A prompt item's token ids (chat items through the chat template).
    pub fn encode(&self, tok: &Tokenizer) -> Result<Vec<u32>> {
        let ids = match &self.kind {
            PromptKind::Text(t) => tok.encode_prompt(t),
            // Message content as text: the same ids `runtime serve` gives a chat.
            PromptKind::Chat(m) => tok.encode_chat(m, usize::MAX),
        }
        .with_context(|| format!("prompt {}", self.id))?;
        if ids.is_empty() {
            bail!("prompt {}: encodes to no tokens", self.id);
        }
        Ok(ids)
    }
}

#[derive(Debug, Clone)]
pub enum PromptKind {
    Text(String),
    Chat(Vec<Message>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptLine {
    id: serde_json::Value,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
    /// Free-form tag (task type): carried by the tuner, groups `bench --drafter`'s tasks.
    #[serde(default, rename = "type")]
    tag: Option<String>,
}

/// Parses a JSONL prompt set; errors name the line.
pub fn parse_prompts(text: &str, origin: &Path) -> Result<Vec<PromptItem>> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let p: PromptLine =
            serde_json::from_str(line).with_context(|| format!("{}:{n}: not a prompt object", origin.display()))?;
        let id = match p.id {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(x) => x.to_string(),
            other => bail!("{}:{n}: id must be a string or number, got {other}", origin.display()),
        };
        if !seen.insert(id.clone()) {
            bail!("{}:{n}: duplicate id {id:?}", origin.display());
        }
        let kind = match (p.prompt, p.messages) {
            (Some(t), None) => PromptKind::Text(t),
            (None, Some(m)) if !m.is_empty() => PromptKind::Chat(m),
            (None, Some(_)) => bail!("{}:{n}: messages is empty", origin.display()),
            _ => bail!("{}:{n}: give exactly one of \"prompt\" or \"messages\"", origin.display()),
        };
        out.push(PromptItem { id, kind, tag: p.tag });
    }
    if out.is_empty() {
        bail!("{}: no prompts", origin.display());
    }
    Ok(out)
}
