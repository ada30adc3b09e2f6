//! Chat prompts rendered from the model's own Jinja template (GGUF
//! `tokenizer.chat_template`; beside a Hugging Face checkpoint,
//! `chat_template.jinja`, else tokenizer_config.json's `chat_template`, a
//! string or a list of named templates of which "default" is used) with
//! minijinja and its Python-compatible methods: the prompt text is
//! whatever the model's authors wrote.
//! Only a file that carries no template gets its architecture's built-in
//! turn format ([`builtin`]), and the startup event says so.

use super::{Tokenizer, TokenizerError};
use serde::{Deserialize, Serialize};

/// What stands in for a special token's text inside message content while
/// the template is rendered a second time to find its own markers: one
/// byte per byte, so both renderings have the same length, and a byte no
/// template treats specially (not whitespace, not part of any token text).
const MASK: u8 = 0x1a;

/// Where a tokenizer's chat template came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateSource {
    /// The model file's own template.
    File,
    /// The built-in turn format of the named architecture ([`builtin`]).
    Builtin(&'static str),
    /// No template: chat requests are refused.
    None,
}

impl TemplateSource {
    pub fn of_file(has_template: bool) -> Self {
        if has_template { TemplateSource::File } else { TemplateSource::None }
    }
}

impl std::fmt::Display for TemplateSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateSource::File => f.write_str("the model file"),
            TemplateSource::Builtin(arch) => write!(f, "built in ({arch} turn format; the model file has none)"),
            TemplateSource::None => f.write_str("none (the model file has no chat template)"),
        }
    }
}

/// Gemma's turn format, as llama.cpp applies it to a Gemma GGUF without a
/// template: `<start_of_turn>{role}\n{content}<end_of_turn>\n`, the
/// assistant's role written `model`, system messages (which Gemma has no
/// turn for) joined and written at the top of the next user turn followed
/// by a blank line, contents trimmed of spaces, tabs and line ends; BOS
/// comes from the tokenizer, not the template.
const GEMMA_TURNS: &str = r#"{%- set ns = namespace(system='') -%}
{%- for m in messages -%}
{%- if m['role'] == 'system' -%}
{%- set ns.system = ns.system + (m['content'] | trim(' \t\n\r')) -%}
{%- else -%}
{%- set role = 'model' if m['role'] == 'assistant' else m['role'] -%}
{{- '<start_of_turn>' + role + '\n' -}}
{%- if ns.system and role != 'model' -%}
{{- ns.system + '\n\n' -}}
{%- set ns.system = '' -%}
{%- endif -%}
{{- (m['content'] | trim(' \t\n\r')) + '<end_of_turn>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<start_of_turn>model\n' -}}
{%- endif -%}"#;

/// The built-in chat template of a GGUF `general.architecture`, for files
/// that carry none.
pub fn builtin(architecture: &str) -> Option<(&'static str, &'static str)> {
    match architecture {
        "gemma" | "gemma2" | "gemma3" => Some(("gemma", GEMMA_TURNS)),
        _ => None,
    }
}

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Tokenizer {
    /// Gives a tokenizer without a chat template its architecture's
    /// built-in one, if there is one.
    pub fn use_builtin_template(&mut self, architecture: &str) {
        if self.chat_template.is_none()
            && let Some((name, src)) = builtin(architecture)
        {
            self.chat_template = Some(src.to_string());
            self.chat_template_from = TemplateSource::Builtin(name);
        }
    }

    /// Renders `messages` with the model's chat template, ending with the
    /// assistant's turn opener when `add_generation_prompt` is set.
    pub fn render_chat(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, TokenizerError> {
        let src = self.chat_template.as_deref().ok_or_else(|| {
            TokenizerError::Template(
                "the model has no chat template; pass a plain prompt instead of --chat/messages".into(),
            )
        })?;
        if src.len() > super::MAX_CHAT_TEMPLATE_BYTES {
            return Err(TokenizerError::Template(format!(
                "the chat template is {} bytes, more than the {} this runtime runs",
                src.len(),
                super::MAX_CHAT_TEMPLATE_BYTES
            )));
        }
        let mut env = minijinja::Environment::new();
        // A bound on the template's work: a template is code from the model file.
        env.set_fuel(Some(super::CHAT_TEMPLATE_FUEL));
        // Hugging Face renders chat templates with these two settings
        // (transformers' `_compile_jinja_template`); templates are written for them.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(true);
        // Python's string and dict methods (`.strip()`, `.startswith()`,
        // `.split()`, `.items()`, ...), which Hugging Face templates call as
        // Jinja2 under Python allows.
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        env.add_template("chat", src).map_err(|e| TokenizerError::Template(e.to_string()))?;
        let tok_text = |id: Option<u32>| id.and_then(|i| self.id_to_token(i)).unwrap_or_default();
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => tok_text(self.bos),
            eos_token => tok_text(self.eos),
        };
        env.get_template("chat").and_then(|t| t.render(ctx)).map_err(|e| TokenizerError::Template(e.to_string()))
    }

    /// The prompt ids of a chat: the template's text with its own markers as
    /// control tokens, and every message's content as plain text, so a
    /// message that writes `<|im_end|>` cannot close its turn and write the
    /// assistant's or the system's. Encoded like
    /// [`Tokenizer::encode_prompt_bounded`] (stopping past `limit` ids).
    ///
    /// Content with no special token's text in it is encoded exactly as the
    /// rendered text always was. Otherwise the template is rendered again
    /// with those texts masked byte for byte ([`MASK`]); the special-token
    /// texts found in that rendering are the template's markers
    /// ([`Tokenizer::find_specials`], leftmost-longest as the tokenizer
    /// matches added tokens that strip no whitespace), and the text between
    /// them is encoded, piece by piece, with special tokens read as text.
    pub fn encode_chat(&self, messages: &[Message], limit: usize) -> Result<Vec<u32>, TokenizerError> {
        let text = self.render_chat(messages, true)?;
        let spoofed = messages.iter().any(|m| self.specials.iter().any(|(s, _)| m.content.contains(s.as_str())));
        if !spoofed {
            return self.encode_prompt_bounded(&text, limit);
        }
        let masked: Vec<Message> = messages
            .iter()
            .map(|m| Message { role: m.role.clone(), content: self.mask_specials(&m.content) })
            .collect();
        let markers_only = self.render_chat(&masked, true)?;
        // The two renderings must differ only where content was masked.
        let aligned = markers_only.len() == text.len()
            && text.bytes().zip(markers_only.bytes()).all(|(a, b)| a == b || b == MASK);
        if !aligned {
            return Err(TokenizerError::Template(
                "this chat template rewrites message content, so special-token text in a message cannot be kept \
                 as text; remove it from the message"
                    .into(),
            ));
        }
        let mut ids = Vec::new();
        if self.add_bos
            && let Some(b) = self.bos
        {
            ids.push(b);
        }
        let mut at = 0;
        for (start, end, id) in self.find_specials(&markers_only) {
            if ids.len() > limit {
                return Ok(ids);
            }
            let between = text.get(at..start).ok_or_else(|| TokenizerError::Template("marker offsets".into()))?;
            self.encode_pieces(super::spm::Specials::AsText, between, limit, super::ENCODE_PIECE_BYTES, &mut ids)?;
            ids.push(id);
            at = end;
        }
        let rest = text.get(at..).ok_or_else(|| TokenizerError::Template("marker offsets".into()))?;
        self.encode_pieces(super::spm::Specials::AsText, rest, limit, super::ENCODE_PIECE_BYTES, &mut ids)?;
        Ok(ids)
    }

    /// Where special tokens' texts occur in `text`: (start, end, id), left
    /// to right, the longest at each place and none overlapping (how the
    /// tokenizer's added-token matcher splits a text). Each text is searched
    /// once, so this is linear in the text per special token, and nothing
    /// but the positions is allocated.
    fn find_specials(&self, text: &str) -> Vec<(usize, usize, u32)> {
        let mut all: Vec<(usize, std::cmp::Reverse<usize>, u32)> = Vec::new();
        for (s, id) in &self.specials {
            all.extend(text.match_indices(s.as_str()).map(|(i, m)| (i, std::cmp::Reverse(m.len()), *id)));
        }
        all.sort_unstable();
        let mut out = Vec::new();
        let mut end = 0;
        for (start, std::cmp::Reverse(len), id) in all {
            if start >= end {
                out.push((start, start + len, id));
                end = start + len;
            }
        }
        out
    }

    /// `content` with each special token's text replaced by as many [`MASK`] bytes.
    fn mask_specials(&self, content: &str) -> String {
        let mut out = content.to_string();
        for (s, _) in &self.specials {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), &char::from(MASK).to_string().repeat(s.len()));
            }
        }
        out
    }
}
