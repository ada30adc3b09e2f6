//! The token table both GGUF encoders ([`super::bpe`], [`super::spm`])
//! read: each token's text and type by id, the id of each text, and the
//! special tokens (control, unknown, user-defined) in the order that splits
//! a text at them.

use std::collections::HashMap;

/// GGUF token types (llama.cpp's `llama_token_type`).
pub const TYPE_NORMAL: i32 = 1;
pub const TYPE_UNKNOWN: i32 = 2;
pub const TYPE_CONTROL: i32 = 3;
pub const TYPE_USER_DEFINED: i32 = 4;
pub const TYPE_UNUSED: i32 = 5;
pub const TYPE_BYTE: i32 = 6;

/// Why a token table was refused (each encoder names it in its own terms).
#[derive(Debug, Clone, PartialEq)]
pub enum VocabError {
    /// The token at this id has no text.
    Empty(usize),
    /// The token at this id has the text of an earlier one.
    Duplicate(usize, String),
}

/// A vocabulary's tokens: texts and types by id, ids by text.
#[derive(Debug)]
pub struct Vocab {
    /// Token texts as the file writes them.
    pub(crate) texts: Vec<Box<str>>,
    pub(crate) types: Vec<i32>,
    pub(crate) ids: HashMap<Box<str>, u32>,
    /// Control, unknown and user-defined tokens (text, id, type), longest
    /// text first, equal lengths by id: the order in which they split a
    /// text ([`super::spm::partition`]).
    pub(crate) specials: Vec<(Box<str>, u32, i32)>,
}

impl Vocab {
    /// The table of `texts` with their `types` (the caller checks that the
    /// two are the same length); an empty or repeated text is refused.
    pub fn new(texts: Vec<String>, types: Vec<i32>) -> Result<Vocab, VocabError> {
        debug_assert_eq!(texts.len(), types.len());
        let mut ids = HashMap::with_capacity(texts.len());
        let mut specials = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            if t.is_empty() {
                return Err(VocabError::Empty(i));
            }
            if ids.insert(t.clone().into_boxed_str(), i as u32).is_some() {
                return Err(VocabError::Duplicate(i, t.clone()));
            }
            if matches!(types[i], TYPE_CONTROL | TYPE_UNKNOWN | TYPE_USER_DEFINED) {
                specials.push((t.clone().into_boxed_str(), i as u32, types[i]));
            }
        }
        // Longest first; equal lengths by id, so the order is fixed.
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        Ok(Vocab { texts: texts.into_iter().map(String::into_boxed_str).collect(), types, ids, specials })
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// The text of token `id`, as the file writes it.
    pub fn text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(|t| &**t)
    }

    pub fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    pub fn token_type(&self, id: u32) -> Option<i32> {
        self.types.get(id as usize).copied()
    }

    /// Control, unknown and user-defined tokens: text, id, type.
    pub fn special_tokens(&self) -> impl Iterator<Item = (&str, u32, i32)> {
        self.specials.iter().map(|(t, id, ty)| (&**t, *id, *ty))
    }

    /// Every token's text and type, by id.
    pub fn texts_and_types(&self) -> impl Iterator<Item = (&str, i32)> {
        self.texts.iter().zip(&self.types).map(|(t, &ty)| (&**t, ty))
    }
}
