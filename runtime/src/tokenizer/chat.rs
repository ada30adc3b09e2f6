//! Chat prompts rendered from the model's own Jinja template (GGUF
//! `tokenizer.chat_template` or tokenizer_config.json's `chat_template`)
//! with minijinja: the prompt text is whatever the model's authors wrote,
//! never a hand-written imitation.

use super::{Tokenizer, TokenizerError};
use serde::{Deserialize, Serialize};

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Tokenizer {
    /// Renders `messages` with the model's chat template, ending with the
    /// assistant's turn opener when `add_generation_prompt` is set.
    pub fn render_chat(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, TokenizerError> {
        let src = self.chat_template.as_deref().ok_or_else(|| {
            TokenizerError::Template(
                "the model has no chat template; pass a plain prompt instead of --chat/messages".into(),
            )
        })?;
        let mut env = minijinja::Environment::new();
        // Hugging Face renders chat templates with these two settings
        // (transformers' `_compile_jinja_template`); templates are written for them.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(true);
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
}
