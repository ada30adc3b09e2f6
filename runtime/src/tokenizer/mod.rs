//! Tokenizer: from a GGUF file's metadata, byte-level BPE ([`bpe`], with
//! the pre-tokenizer the file names, [`pretok`]) or SentencePiece
//! ([`spm`]); from a Hugging Face `tokenizer.json`, through the
//! `tokenizers` crate; plus the model's chat template ([`chat`]): its own,
//! or the architecture's built-in one when the file carries none.

pub mod bpe;
pub mod chat;
pub mod pretok;
pub mod spm;
pub mod vocab;

use crate::gguf::{GgufError, GgufFile};
use std::path::Path;

/// Most tokens a vocabulary may declare (bounds allocations from a file).
pub const MAX_TOKENS: usize = 1 << 20;

/// Largest `tokenizer.json` read (the largest real ones, 256k-token
/// vocabularies with their merges, are about 35 MB).
pub const MAX_TOKENIZER_JSON_BYTES: u64 = 128 << 20;

/// Largest `tokenizer_config.json` read (it holds the chat template).
pub const MAX_TOKENIZER_CONFIG_BYTES: u64 = 16 << 20;

/// Longest chat template accepted, in bytes (real ones are a few kB; the
/// longest seen, with tool-calling branches, about 20 kB).
pub const MAX_CHAT_TEMPLATE_BYTES: usize = 1 << 20;

/// The instructions one chat-template rendering may run (minijinja's fuel):
/// a few hundred per message for real templates, so this is ample for any
/// request the body limit admits, and stops a template with nested loops in
/// well under a second.
pub const CHAT_TEMPLATE_FUEL: u64 = 5_000_000;

/// Texts of control tokens that end a turn in common chat formats; like
/// llama.cpp, generation stops at any of them besides the declared EOS.
const END_OF_GENERATION_TEXTS: &[&str] = &["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"];

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("tokenizer model {0:?} is not supported (byte-level BPE \"gpt2\" and SentencePiece \"llama\" are)")]
    UnsupportedModel(String),
    #[error("pre-tokenizer {0:?} (tokenizer.ggml.pre) is not supported (known: {known})", known = pretok::Pre::KNOWN)]
    UnsupportedPre(String),
    #[error("tokenizer metadata: {0}")]
    Invalid(String),
    #[error("tokenizer: {0}")]
    Library(String),
    #[error("{path}: {problem}")]
    File { path: String, problem: String },
    #[error("chat template: {0}")]
    Template(String),
    #[error("SentencePiece vocabulary: {0}")]
    Spm(#[from] spm::SpmError),
    #[error("BPE vocabulary: {0}")]
    Bpe(#[from] bpe::BpeError),
}

fn lib(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Library(e.to_string())
}

/// The tokenizer proper.
enum Inner {
    /// Byte-level BPE (`tokenizers`), and the same with special tokens
    /// read as plain text: chat message content is encoded with that one,
    /// so a message cannot write the template's control tokens
    /// (`chat::Tokenizer::encode_chat`).
    Hf {
        tok: Box<tokenizers::Tokenizer>,
        text_only: Box<tokenizers::Tokenizer>,
    },
    Spm(spm::Spm),
    Bpe(bpe::Bpe),
}

/// A tokenizer with the special tokens and chat template of its model.
pub struct Tokenizer {
    inner: Inner,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Tokens that end generation (EOS and the turn-end control tokens).
    pub end_of_generation: Vec<u32>,
    /// Whether prompts start with BOS (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// Jinja source of the chat template, if there is one: the model's
    /// own, or its architecture's built-in one ([`chat::builtin`]).
    pub chat_template: Option<String>,
    /// Where the chat template came from, for the startup event.
    pub chat_template_from: chat::TemplateSource,
    /// Where the tokenizer came from, for the startup event.
    pub source: String,
    /// The longest text any token stands for, in bytes; `None` when a
    /// normalizer could shrink the text first. Then no token sequence of a
    /// text of `b` bytes is shorter than `b / longest` tokens, which bounds
    /// a prompt's length before it is tokenized.
    pub longest_token_bytes: Option<usize>,
    /// Every special (control) token: its text and id.
    specials: Vec<(String, u32)>,
    /// Whether a text may be encoded piece by piece, split where the
    /// pre-tokenizer always splits ([`safe_split`]); true for the GGUF
    /// byte-level BPE ([`bpe`]), when no special token contains whitespace.
    chunkable: bool,
}

/// Bytes of text per piece when a prompt is encoded piece by piece: the
/// tokenizer's working memory is bounded by a piece, and an over-long
/// prompt is refused as soon as its pieces pass the context.
pub const ENCODE_PIECE_BYTES: usize = 16 * 1024;

/// The parts of a [`Tokenizer`] derived from its inner tokenizer.
struct Derived {
    longest_token_bytes: Option<usize>,
    text_only: Box<tokenizers::Tokenizer>,
    specials: Vec<(String, u32)>,
    chunkable: bool,
}

fn derive(inner: &tokenizers::Tokenizer) -> Derived {
    let added = inner.get_added_tokens_decoder();
    let mut specials: Vec<(String, u32)> = added
        .iter()
        .filter(|(_, t)| t.special && !t.content.is_empty())
        .map(|(&id, t)| (t.content.clone(), id))
        .collect();
    specials.sort_by_key(|s| s.1);
    let mut text_only = inner.clone();
    text_only.set_encode_special_tokens(true);
    Derived {
        longest_token_bytes: longest_token_bytes(inner),
        text_only: Box::new(text_only),
        specials,
        chunkable: false,
    }
}

/// Whether byte `p` of `text` is a place where every pre-tokenizer of
/// [`pretok`] always splits: a single space between two non-whitespace
/// characters. No pattern of theirs runs from a non-whitespace character
/// across a space (the only optional leading character, Llama 3's and
/// Tekken's `[^\r\n\p{L}\p{N}]?` before letters, is followed by a letter),
/// none looks behind, and at the space the next word (` word`, ` 1`, ` .`)
/// starts whatever preceded it; so encoding the two sides apart gives the
/// tokens of the whole.
pub fn safe_split(text: &str, p: usize) -> bool {
    if p == 0 || p + 1 >= text.len() || text.as_bytes()[p] != b' ' {
        return false;
    }
    let before = text[..p].chars().next_back();
    let after = text[p + 1..].chars().next();
    matches!((before, after), (Some(b), Some(a)) if !b.is_whitespace() && !a.is_whitespace())
}

/// The end of the piece starting at `from`: the first safe split at or past
/// `from + target` bytes, else the end of the text.
fn piece_end(text: &str, from: usize, target: usize) -> usize {
    let mut p = from.saturating_add(target);
    while p < text.len() {
        if safe_split(text, p) {
            return p;
        }
        p += 1;
    }
    text.len()
}
/// The most bytes of text one token of `inner` stands for; `None` with a
/// normalizer (it could shrink the text before tokenizing). The token
/// text's UTF-8 length, which is at least the bytes it stands for in the
/// formats this runtime loads (a byte-level token spells each byte as one
/// character of one or two bytes).
fn longest_token_bytes(inner: &tokenizers::Tokenizer) -> Option<usize> {
    if inner.get_normalizer().is_some() {
        return None;
    }
    inner.get_vocab(true).keys().map(String::len).max().filter(|&n| n > 0)
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("source", &self.source).field("vocab", &self.vocab_size()).finish()
    }
}

/// The chat template of a Hugging Face checkpoint in `dir`: the file
/// `chat_template.jinja` when there is one (transformers writes the template
/// there since 4.43, and reads it first), else tokenizer_config.json's
/// `chat_template`, either a string or a list of `{name, template}` of
/// which the one named "default" is used (as transformers does when no
/// name is asked for).
fn hf_chat_template(dir: &Path, cfg: &serde_json::Value, cfg_path: &Path) -> Result<Option<String>, TokenizerError> {
    let jinja = dir.join("chat_template.jinja");
    match crate::limits::read_capped(&jinja, MAX_CHAT_TEMPLATE_BYTES as u64) {
        Ok(bytes) => {
            return String::from_utf8(bytes).map(Some).map_err(|e| TokenizerError::File {
                path: jinja.display().to_string(),
                problem: format!("not UTF-8: {e}"),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(TokenizerError::File { path: jinja.display().to_string(), problem: e.to_string() }),
    }
    let bad = |problem: String| TokenizerError::File { path: cfg_path.display().to_string(), problem };
    match cfg.get("chat_template") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(serde_json::Value::Array(list)) => {
            let mut names = Vec::new();
            for (i, entry) in list.iter().enumerate() {
                let name = entry.get("name").and_then(|v| v.as_str());
                let template = entry.get("template").and_then(|v| v.as_str());
                let (Some(name), Some(template)) = (name, template) else {
                    return Err(bad(format!(
                        "chat_template[{i}] is not an object with string \"name\" and \"template\""
                    )));
                };
                if name == "default" {
                    return Ok(Some(template.to_string()));
                }
                names.push(name);
            }
            Err(bad(format!(
                "chat_template is a list of named templates without one named \"default\" (it has {names:?}); \
                 add a chat_template.jinja beside it to choose one"
            )))
        }
        Some(other) => Err(bad(format!("chat_template is neither a string nor a list of named templates: {other}"))),
    }
}

/// A GGUF key's value, `None` where the file does not have the key.
fn absent_as_none<T>(r: Result<T, GgufError>) -> Result<Option<T>, TokenizerError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(GgufError::MissingKey { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A token id under `key` (a vocabulary of `n`), where the file has one.
fn vocab_id(f: &GgufFile, key: &str, n: usize) -> Result<Option<u32>, TokenizerError> {
    match absent_as_none(f.get_u32(key))? {
        Some(v) if v as usize >= n => Err(TokenizerError::Invalid(format!("{key} = {v} is outside the vocabulary"))),
        v => Ok(v),
    }
}

/// What both GGUF tokenizers read beside their vocabulary (of `n` tokens).
struct GgufSettings {
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    add_bos: bool,
    chat_template: Option<String>,
}

impl GgufSettings {
    /// `tokenizer.ggml.add_bos_token` is `default_add_bos` where absent.
    fn read(f: &GgufFile, n: usize, default_add_bos: bool) -> Result<Self, TokenizerError> {
        Ok(GgufSettings {
            bos: vocab_id(f, "tokenizer.ggml.bos_token_id", n)?,
            eos: vocab_id(f, "tokenizer.ggml.eos_token_id", n)?,
            eot: vocab_id(f, "tokenizer.ggml.eot_token_id", n)?,
            add_bos: absent_as_none(f.get_bool("tokenizer.ggml.add_bos_token"))?.unwrap_or(default_add_bos),
            chat_template: absent_as_none(f.get_str("tokenizer.chat_template"))?.map(str::to_string),
        })
    }
}

/// The control tokens among a vocabulary's special tokens (text, id, by
/// id), and the ids that end a generation: `eos`, `eot`, then every control
/// token named in [`END_OF_GENERATION_TEXTS`].
fn control_tokens<'a>(
    special_tokens: impl Iterator<Item = (&'a str, u32, i32)>,
    eos: Option<u32>,
    eot: Option<u32>,
) -> (Vec<(String, u32)>, Vec<u32>) {
    let mut end_of_generation: Vec<u32> = eos.into_iter().chain(eot).collect();
    let mut specials = Vec::new();
    for (text, id, ty) in special_tokens {
        if ty == spm::TYPE_CONTROL {
            specials.push((text.to_string(), id));
            if END_OF_GENERATION_TEXTS.contains(&text) && !end_of_generation.contains(&id) {
                end_of_generation.push(id);
            }
        }
    }
    specials.sort_by_key(|s| s.1);
    (specials, end_of_generation)
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes (`tokenizer.ggml.*`).
    pub fn from_gguf(f: &GgufFile) -> Result<Self, TokenizerError> {
        let model = f.get_str("tokenizer.ggml.model")?;
        if model == "llama" {
            return Self::spm_from_gguf(f);
        }
        if model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(model.to_string()));
        }
        let pre_name = absent_as_none(f.get_str("tokenizer.ggml.pre"))?.unwrap_or("default");
        let pre = pretok::Pre::from_gguf_name(pre_name)
            .ok_or_else(|| TokenizerError::UnsupportedPre(pre_name.to_string()))?;
        let tokens = f.get_str_array("tokenizer.ggml.tokens")?;
        if tokens.is_empty() || tokens.len() > MAX_TOKENS {
            return Err(TokenizerError::Invalid(format!("{} tokens (allowed 1..={MAX_TOKENS})", tokens.len())));
        }
        let types = match f.get_i32_array("tokenizer.ggml.token_type") {
            Ok(t) if t.len() == tokens.len() => t,
            Ok(t) => {
                return Err(TokenizerError::Invalid(format!(
                    "tokenizer.ggml.token_type has {} entries for {} tokens",
                    t.len(),
                    tokens.len()
                )));
            }
            Err(GgufError::MissingKey { .. }) => vec![1; tokens.len()],
            Err(e) => return Err(e.into()),
        };
        let merges = f.get_str_array("tokenizer.ggml.merges")?;
        let settings = GgufSettings::read(f, tokens.len(), pre.default_add_bos())?;
        let texts: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
        drop(tokens);
        let b = bpe::Bpe::new(texts, types, &merges, pre)?;
        drop(merges);
        if b.skipped_merges > 0 {
            tracing::debug!(skipped = b.skipped_merges, "BPE merges whose sides or result are no tokens were skipped");
        }
        let chunkable = b.vocab().special_tokens().all(|(text, _, _)| !text.chars().any(char::is_whitespace));
        Ok(Self::from_gguf_parts(Inner::Bpe(b), settings, chunkable, format!("gguf ({model}, pre {pre_name})")))
    }

    /// Builds a SentencePiece tokenizer (`tokenizer.ggml.model = llama`)
    /// from the file's pieces, scores and token types.
    fn spm_from_gguf(f: &GgufFile) -> Result<Self, TokenizerError> {
        let tokens = f.get_str_array("tokenizer.ggml.tokens")?;
        if tokens.is_empty() || tokens.len() > MAX_TOKENS {
            return Err(TokenizerError::Invalid(format!("{} tokens (allowed 1..={MAX_TOKENS})", tokens.len())));
        }
        let scores = f.get_f32_array("tokenizer.ggml.scores")?;
        let types = match f.get_i32_array("tokenizer.ggml.token_type") {
            Ok(t) => t,
            Err(GgufError::MissingKey { .. }) => vec![spm::TYPE_NORMAL; tokens.len()],
            Err(e) => return Err(e.into()),
        };
        let unk = vocab_id(f, "tokenizer.ggml.unknown_token_id", tokens.len())?;
        // SentencePiece's own default is a space before the text (Llama 2,
        // Mistral); Gemma's files say `false`.
        let add_space_prefix = absent_as_none(f.get_bool("tokenizer.ggml.add_space_prefix"))?.unwrap_or(true);
        let settings = GgufSettings::read(f, tokens.len(), true)?;
        let pieces: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
        drop(tokens);
        let s = spm::Spm::new(pieces, scores, types, unk, add_space_prefix)?;
        let source = format!("gguf (llama: SentencePiece, space prefix {add_space_prefix})");
        Ok(Self::from_gguf_parts(Inner::Spm(s), settings, false, source))
    }

    /// A GGUF file's tokenizer from its encoder (BPE or SentencePiece) and
    /// the settings beside it; `chunkable`: whether a text may be encoded
    /// piece by piece (the field of that name).
    fn from_gguf_parts(inner: Inner, g: GgufSettings, chunkable: bool, source: String) -> Self {
        let (vocab, longest) = match &inner {
            Inner::Bpe(b) => (b.vocab(), b.longest_token_bytes()),
            Inner::Spm(s) => (s.vocab(), s.longest_token_bytes()),
            Inner::Hf { .. } => unreachable!("a GGUF tokenizer is BPE or SentencePiece"),
        };
        let (specials, end_of_generation) = control_tokens(vocab.special_tokens(), g.eos, g.eot);
        Tokenizer {
            longest_token_bytes: Some(longest),
            specials,
            chunkable,
            inner,
            bos: g.bos,
            eos: g.eos,
            end_of_generation,
            add_bos: g.add_bos,
            chat_template_from: chat::TemplateSource::of_file(g.chat_template.is_some()),
            chat_template: g.chat_template,
            source,
        }
    }

    /// Loads `tokenizer.json` (and, when present, `tokenizer_config.json`
    /// for the chat template, BOS/EOS and `add_bos_token`) from `dir`.
    pub fn from_hf_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let path = dir.join("tokenizer.json");
        let file_error = |path: &Path, e: &dyn std::fmt::Display| TokenizerError::File {
            path: path.display().to_string(),
            problem: e.to_string(),
        };
        let bytes = crate::limits::read_capped(&path, MAX_TOKENIZER_JSON_BYTES).map_err(|e| file_error(&path, &e))?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| file_error(&path, &e))?;
        drop(bytes);
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: serde_json::Value = match crate::limits::read_capped(&cfg_path, MAX_TOKENIZER_CONFIG_BYTES) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| TokenizerError::File { path: cfg_path.display().to_string(), problem: e.to_string() })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Value::Null,
            Err(e) => {
                return Err(TokenizerError::File { path: cfg_path.display().to_string(), problem: e.to_string() });
            }
        };
        // `bos_token` is a string or an AddedToken object with `content`.
        let token_text = |key: &str| -> Option<String> {
            let v = cfg.get(key)?;
            v.as_str().or_else(|| v.get("content")?.as_str()).map(str::to_string)
        };
        let bos = token_text("bos_token").and_then(|t| inner.token_to_id(&t));
        let eos = token_text("eos_token").and_then(|t| inner.token_to_id(&t));
        let mut end_of_generation: Vec<u32> = eos.into_iter().collect();
        for t in END_OF_GENERATION_TEXTS {
            if let Some(id) = inner.token_to_id(t)
                && !end_of_generation.contains(&id)
            {
                end_of_generation.push(id);
            }
        }
        let d = derive(&inner);
        let chat_template = hf_chat_template(dir, &cfg, &cfg_path)?;
        Ok(Tokenizer {
            longest_token_bytes: d.longest_token_bytes,
            specials: d.specials,
            chunkable: d.chunkable,
            inner: Inner::Hf { tok: Box::new(inner), text_only: d.text_only },
            bos,
            eos,
            end_of_generation,
            add_bos: cfg.get("add_bos_token").and_then(|v| v.as_bool()).unwrap_or(false),
            chat_template_from: chat::TemplateSource::of_file(chat_template.is_some()),
            chat_template,
            source: format!("{}", path.display()),
        })
    }

    /// Number of token ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        match &self.inner {
            Inner::Hf { tok, .. } => tok.get_vocab_size(true),
            Inner::Spm(s) => s.vocab().len(),
            Inner::Bpe(b) => b.vocab().len(),
        }
    }

    /// Token ids of `text`. Special tokens written in the text (e.g.
    /// `<|im_start|>`) become their single ids. No BOS is added here.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.encode_with(text, spm::Specials::Parse)
    }

    /// Token ids of `text` with special tokens' texts read as plain text
    /// (how chat message content is encoded). No BOS.
    pub fn encode_as_text(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.encode_with(text, spm::Specials::AsText)
    }

    /// Token ids of `text`, special tokens' texts read as their tokens or
    /// as plain text.
    fn encode_with(&self, text: &str, specials: spm::Specials) -> Result<Vec<u32>, TokenizerError> {
        match (&self.inner, specials) {
            (Inner::Hf { tok, .. }, spm::Specials::Parse) => {
                Ok(tok.encode(text, false).map_err(lib)?.get_ids().to_vec())
            }
            (Inner::Hf { text_only, .. }, spm::Specials::AsText) => {
                Ok(text_only.encode(text, false).map_err(lib)?.get_ids().to_vec())
            }
            (Inner::Spm(s), _) => Ok(s.encode(text, specials)),
            (Inner::Bpe(b), _) => Ok(b.encode(text, specials)),
        }
    }

    /// `encode`, with BOS first when the model asks for it.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::new();
        if self.add_bos
            && let Some(b) = self.bos
        {
            ids.push(b);
        }
        ids.extend(self.encode(text)?);
        Ok(ids)
    }

    /// [`Tokenizer::encode_prompt`], piece by piece ([`ENCODE_PIECE_BYTES`]
    /// at a time, split where the pre-tokenizer splits anyway, so the ids
    /// are the same), stopping once there are more than `limit` ids: a
    /// result longer than `limit` is a prefix, and says the text has at
    /// least that many tokens.
    pub fn encode_prompt_bounded(&self, text: &str, limit: usize) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::new();
        if self.add_bos
            && let Some(b) = self.bos
        {
            ids.push(b);
        }
        self.encode_pieces(spm::Specials::Parse, text, limit, ENCODE_PIECE_BYTES, &mut ids)?;
        Ok(ids)
    }

    /// Appends the ids of `text` (special tokens' texts read as `specials`
    /// says) to `out`, piece by piece when this tokenizer allows it, until
    /// `out` holds more than `limit`.
    fn encode_pieces(
        &self,
        specials: spm::Specials,
        text: &str,
        limit: usize,
        piece_bytes: usize,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        let piece_bytes = if self.chunkable { piece_bytes.max(1) } else { usize::MAX };
        let mut from = 0;
        while from < text.len() && out.len() <= limit {
            let to = piece_end(text, from, piece_bytes);
            out.extend(self.encode_with(&text[from..to], specials)?);
            from = to;
        }
        Ok(())
    }

    /// [`Tokenizer::encode_pieces`] with a given piece size (tests pin the
    /// equality with the one-piece encoding at small sizes).
    pub fn encode_in_pieces(&self, text: &str, piece_bytes: usize) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::new();
        self.encode_pieces(spm::Specials::Parse, text, usize::MAX, piece_bytes, &mut ids)?;
        Ok(ids)
    }

    /// The text of `ids`, special tokens included verbatim.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        match &self.inner {
            Inner::Hf { tok, .. } => tok.decode(ids, false).map_err(lib),
            Inner::Spm(s) => Ok(s.decode(ids)),
            Inner::Bpe(b) => Ok(b.decode(ids)),
        }
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        match &self.inner {
            Inner::Hf { tok, .. } => tok.token_to_id(token),
            Inner::Spm(s) => s.vocab().id(token),
            Inner::Bpe(b) => b.vocab().id(token),
        }
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        match &self.inner {
            Inner::Hf { tok, .. } => tok.id_to_token(id),
            Inner::Spm(s) => s.vocab().text(id).map(str::to_string),
            Inner::Bpe(b) => b.vocab().text(id).map(str::to_string),
        }
    }

    /// Every special (control) token: its text and id.
    pub fn special_tokens(&self) -> &[(String, u32)] {
        &self.specials
    }

    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.end_of_generation.contains(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::chat::Message;
    use std::time::{Duration, Instant};

    /// A minimal Hugging Face tokenizer directory with `template` as its chat template.
    fn hf_dir(template: &str) -> tempfile::TempDir {
        hf_dir_with(serde_json::json!(template))
    }

    /// The same, with `chat_template` in tokenizer_config.json set to `template`.
    fn hf_dir_with(template: serde_json::Value) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let added = vec![serde_json::json!({"id": 2, "content": "<|im_end|>", "single_word": false, "lstrip": false,
                                            "rstrip": false, "normalized": false, "special": true})];
        let tokenizer = crate::test_models::byte_level_tokenizer_json(added, serde_json::json!({"a": 0, "b": 1}));
        std::fs::write(dir.path().join("tokenizer.json"), tokenizer.to_string()).unwrap();
        let cfg = serde_json::json!({"eos_token": "<|im_end|>", "chat_template": template});
        std::fs::write(dir.path().join("tokenizer_config.json"), cfg.to_string()).unwrap();
        dir
    }

    /// `turns` (role, content) rendered by `template` through a tokenizer directory.
    fn render(template: &str, turns: &[(&str, &str)], add_generation_prompt: bool) -> String {
        let tok = Tokenizer::from_hf_dir(hf_dir(template).path()).unwrap();
        let msgs: Vec<Message> =
            turns.iter().map(|(role, content)| Message { role: (*role).into(), content: (*content).into() }).collect();
        tok.render_chat(&msgs, add_generation_prompt).unwrap()
    }

    /// A Qwen-style template calling Python string and dict methods.
    const QWEN_STYLE: &str = r#"{%- if messages[0]['role'] == 'system' -%}
{{- '<|im_start|>system\n' + messages[0]['content'].strip() + '<|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>system\nYou are helpful.<|im_end|>\n' -}}
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'user' and m.content.startswith('<tool_response>') -%}
{{- '<|im_start|>tool\n' + m.content.replace('<tool_response>', '').rstrip() + '<|im_end|>\n' -}}
{%- elif m.role != 'system' -%}
{{- '<|im_start|>' + m.role + '\n' + m.content.split('</think>')[-1].lstrip('\n') + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- for k, v in {'lang': 'EN'}.items() -%}{{- k.upper() + '=' + v.lower() -}}{%- endfor -%}
{%- if messages[-1].content.endswith('  ') -%}{{- '[trailing]' -}}{%- endif -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"#;

    /// A DeepSeek-style template: systems joined first, reasoning cut from
    /// assistant turns with `.split('</think>')`.
    const DEEPSEEK_STYLE: &str = r#"{{- bos_token -}}
{%- set ns = namespace(system='') -%}
{%- for m in messages if m['role'] == 'system' -%}{%- set ns.system = ns.system + m['content'] -%}{%- endfor -%}
{{- ns.system -}}
{%- for m in messages -%}
{%- if m['role'] == 'user' -%}{{- '<｜User｜>' + m['content'] -}}
{%- elif m['role'] == 'assistant' -%}
{%- set c = m['content'] -%}
{%- if '</think>' in c -%}{%- set c = c.split('</think>')[-1].strip() -%}{%- endif -%}
{{- '<｜Assistant｜>' + c + '<｜end▁of▁sentence｜>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<｜Assistant｜><think>\n' -}}{%- endif -%}"#;

    #[test]
    fn a_qwen_style_template_with_python_string_methods_renders() {
        let turns = [
            ("system", "  Be brief. \n"),
            ("user", "hi"),
            ("assistant", "<think>hmm</think>\n\nHello!"),
            ("user", "<tool_response>42  "),
        ];
        assert_eq!(
            render(QWEN_STYLE, &turns, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n\
             <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n\
             LANG=en[trailing]<|im_start|>assistant\n"
        );
        assert_eq!(
            render(QWEN_STYLE, &[("user", "hi")], false),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\nLANG=en"
        );
    }

    #[test]
    fn a_deepseek_style_template_cuts_reasoning_with_split() {
        let turns = [("system", "S."), ("user", "2+2?"), ("assistant", "<think>add</think> 4 "), ("user", "and 3+3?")];
        assert_eq!(
            render(DEEPSEEK_STYLE, &turns, true),
            "S.<｜User｜>2+2?<｜Assistant｜>4<｜end▁of▁sentence｜><｜User｜>and 3+3?<｜Assistant｜><think>\n"
        );
    }

    #[test]
    fn chat_template_jinja_beside_the_checkpoint_is_used_first() {
        let dir = hf_dir("from the config");
        std::fs::write(dir.path().join("chat_template.jinja"), "from the file: {{ messages[0].content.upper() }}")
            .unwrap();
        let tok = Tokenizer::from_hf_dir(dir.path()).unwrap();
        assert_eq!(tok.render_chat(&hi(), true).unwrap(), "from the file: AB");
        std::fs::remove_file(dir.path().join("chat_template.jinja")).unwrap();
        let tok = Tokenizer::from_hf_dir(dir.path()).unwrap();
        assert_eq!(tok.render_chat(&hi(), true).unwrap(), "from the config");
    }

    #[test]
    fn a_list_of_named_templates_uses_the_default_one() {
        let list = serde_json::json!([
            {"name": "tool_use", "template": "tools"},
            {"name": "default", "template": "default: {{ messages[0]['content'] }}"}
        ]);
        let tok = Tokenizer::from_hf_dir(hf_dir_with(list).path()).unwrap();
        assert_eq!(tok.render_chat(&hi(), true).unwrap(), "default: ab");
        // Without a default, or malformed, it is refused naming the field.
        let list = serde_json::json!([{"name": "tool_use", "template": "tools"}]);
        let e = Tokenizer::from_hf_dir(hf_dir_with(list).path()).unwrap_err().to_string();
        assert!(e.contains("tokenizer_config.json") && e.contains("\"default\"") && e.contains("tool_use"), "{e}");
        let e = Tokenizer::from_hf_dir(hf_dir_with(serde_json::json!([{"name": "default"}])).path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("chat_template[0]"), "{e}");
        let e = Tokenizer::from_hf_dir(hf_dir_with(serde_json::json!(7)).path()).unwrap_err().to_string();
        assert!(e.contains("chat_template is neither"), "{e}");
    }

    fn hi() -> Vec<Message> {
        vec![Message { role: "user".into(), content: "ab".into() }]
    }

    #[test]
    fn a_tokenizer_json_without_end_is_refused_at_the_cap_naming_the_file() {
        let dir = hf_dir("{{ messages[0]['content'] }}");
        let zero = std::path::Path::new("/dev/zero");
        if !zero.exists() {
            return;
        }
        let p = dir.path().join("tokenizer.json");
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(zero, &p).unwrap();
        let t0 = Instant::now();
        let e = Tokenizer::from_hf_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("tokenizer.json") && e.contains(&MAX_TOKENIZER_JSON_BYTES.to_string()), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10));
        // The config too.
        let dir = hf_dir("x");
        let p = dir.path().join("tokenizer_config.json");
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(zero, &p).unwrap();
        let e = Tokenizer::from_hf_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("tokenizer_config.json"), "{e}");
    }

    #[test]
    fn a_chat_template_with_nested_loops_runs_out_of_fuel_quickly() {
        let dir = hf_dir("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}");
        let tok = Tokenizer::from_hf_dir(dir.path()).unwrap();
        let t0 = Instant::now();
        let e = tok.render_chat(&hi(), true).unwrap_err().to_string();
        assert!(e.contains("fuel"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        // An ordinary template renders.
        let dir = hf_dir("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{% endfor %}");
        assert_eq!(Tokenizer::from_hf_dir(dir.path()).unwrap().render_chat(&hi(), true).unwrap(), "user: ab");
    }

    #[test]
    fn an_oversized_chat_template_is_refused() {
        let dir = hf_dir(&"x".repeat(MAX_CHAT_TEMPLATE_BYTES + 1));
        let e = Tokenizer::from_hf_dir(dir.path()).unwrap().render_chat(&hi(), true).unwrap_err().to_string();
        assert!(e.contains(&MAX_CHAT_TEMPLATE_BYTES.to_string()), "{e}");
    }
}
