//! SentencePiece tokenization from GGUF metadata (`tokenizer.ggml.model =
//! llama`): the score-ordered pair merging that llama.cpp runs for
//! SentencePiece vocabularies (Llama 2, Mistral, Gemma), so that a prompt
//! gets the ids the model was trained on.
//!
//! The text is first split at special tokens ([`partition`]); each
//! run of plain text has its spaces written as `▁` (U+2581), is split into
//! UTF-8 characters, and adjacent symbols are merged, highest-scoring
//! resulting vocabulary piece first (ties: leftmost), until no adjacent
//! pair forms a piece. A symbol that is no piece (a character outside the
//! vocabulary) is written as its bytes' `<0xXX>` tokens (byte fallback).
//! Decoding reverses it: `▁` becomes a space, byte tokens become bytes.

use super::vocab::{Vocab, VocabError};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// GGUF token types (llama.cpp's `llama_token_type`), defined with the token table.
pub use super::vocab::{TYPE_BYTE, TYPE_CONTROL, TYPE_NORMAL, TYPE_UNKNOWN, TYPE_UNUSED, TYPE_USER_DEFINED};

/// The space marker of SentencePiece vocabularies.
const SPACE: &str = "\u{2581}";

/// Whether special tokens written in a text are read as their tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Specials {
    /// Control tokens (`<start_of_turn>`) in the text become their ids.
    Parse,
    /// Control tokens are read as plain text (message content).
    AsText,
}

/// A SentencePiece vocabulary with its scores and token types.
#[derive(Debug)]
pub struct Spm {
    /// The pieces (their specials split a text first: [`partition`]).
    vocab: Vocab,
    scores: Vec<f32>,
    /// The `<0xXX>` token of each byte, where the vocabulary has one
    /// (boxed: the tokenizer holds an `Spm` beside two pointers).
    bytes: Box<[Option<u32>; 256]>,
    unk: Option<u32>,
    /// Whether a space is written before the text (and after each special
    /// token) before tokenizing (`tokenizer.ggml.add_space_prefix`).
    add_space_prefix: bool,
}

/// Why a vocabulary was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpmError {
    #[error("{pieces} pieces but {scores} scores and {types} token types")]
    Lengths { pieces: usize, scores: usize, types: usize },
    #[error("piece {0} ({1:?}) appears twice")]
    Duplicate(usize, String),
    #[error("piece {0} is empty")]
    Empty(usize),
    #[error("piece {0} has score {1}, not a finite number")]
    Score(usize, f32),
    #[error("byte {0:#04x} has no <0x..> token and is no piece of its own, so it cannot be encoded")]
    NoByte(u8),
}

/// A candidate merge of the adjacent symbols `left` and `right`.
#[derive(Debug)]
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    /// Bytes of the merged text: a bigram whose symbols changed since it
    /// was queued no longer has this length and is dropped.
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// The heap's maximum is the next merge: the highest score, then the
    /// leftmost pair (scores are finite: checked at load).
    fn cmp(&self, o: &Self) -> Ordering {
        self.score.total_cmp(&o.score).then_with(|| o.left.cmp(&self.left))
    }
}

/// A symbol of a merge chain (both encoders'): bytes `start..start + len`
/// of the text, its token where the encoder tracks one (BPE: `None` is no
/// token, written as bytes; SentencePiece looks pieces up by text), and its
/// neighbours.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Symbol {
    pub(crate) start: usize,
    pub(crate) len: usize,
    pub(crate) id: Option<u32>,
    pub(crate) prev: Option<usize>,
    pub(crate) next: Option<usize>,
}

/// Merges symbol `right` into its left neighbour `left`: `left` spans both,
/// `right` is emptied (a queued pair that names it is stale) and unlinked.
pub(crate) fn join(syms: &mut [Symbol], left: usize, right: usize) {
    let r = syms[right];
    syms[left].len += r.len;
    syms[left].next = r.next;
    syms[right].len = 0;
    if let Some(n) = r.next {
        syms[n].prev = Some(left);
    }
}

impl Spm {
    /// A vocabulary from its pieces, scores and token types (all the same
    /// length), the unknown token, and the space-prefix setting.
    pub fn new(
        pieces: Vec<String>,
        scores: Vec<f32>,
        types: Vec<i32>,
        unk: Option<u32>,
        add_space_prefix: bool,
    ) -> Result<Spm, SpmError> {
        if scores.len() != pieces.len() || types.len() != pieces.len() {
            return Err(SpmError::Lengths { pieces: pieces.len(), scores: scores.len(), types: types.len() });
        }
        if let Some(i) = scores.iter().position(|s| !s.is_finite()) {
            return Err(SpmError::Score(i, scores[i]));
        }
        let vocab = Vocab::new(pieces, types).map_err(|e| match e {
            VocabError::Empty(i) => SpmError::Empty(i),
            VocabError::Duplicate(i, p) => SpmError::Duplicate(i, p),
        })?;
        let mut bytes = Box::new([None; 256]);
        for (i, (p, ty)) in vocab.texts_and_types().enumerate() {
            if let (TYPE_BYTE, Some(b)) = (ty, parse_byte_piece(p)) {
                bytes[b as usize] = Some(i as u32);
            }
        }
        let spm = Spm { vocab, scores, bytes, unk, add_space_prefix };
        for b in 0..=255u8 {
            if spm.byte_token(b).is_none() {
                return Err(SpmError::NoByte(b));
            }
        }
        Ok(spm)
    }

    /// The pieces (texts, types, ids, special tokens).
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// The longest text one token stands for, in bytes (a byte token: one;
    /// a piece: its text with `▁` as one space).
    pub fn longest_token_bytes(&self) -> usize {
        self.vocab.texts_and_types().map(|(p, t)| if t == TYPE_BYTE { 1 } else { p.len() }).max().unwrap_or(1)
    }

    /// The token of byte `b`: its `<0xXX>` token, else a piece that is
    /// that one byte.
    fn byte_token(&self, b: u8) -> Option<u32> {
        self.bytes[b as usize].or_else(|| {
            let s = [b];
            std::str::from_utf8(&s).ok().and_then(|s| self.vocab.id(s))
        })
    }

    /// The ids of `text`, without BOS.
    pub fn encode(&self, text: &str, specials: Specials) -> Vec<u32> {
        let mut out = Vec::new();
        // An empty text has no fragment to write the space prefix before
        // (llama.cpp gives no tokens).
        if text.is_empty() {
            return out;
        }
        let mut prev_special = true;
        for frag in partition(text, &self.vocab.specials, specials) {
            match frag {
                Fragment::Text(t) => {
                    let mut s = String::with_capacity(t.len() + 3);
                    if self.add_space_prefix && prev_special {
                        s.push(' ');
                    }
                    s.push_str(t);
                    self.encode_text(&s.replace(' ', SPACE), &mut out);
                    prev_special = false;
                }
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
            }
        }
        out
    }

    /// Merges the characters of `text` (spaces already written as `▁`)
    /// and appends the resulting tokens.
    fn encode_text(&self, text: &str, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let mut syms: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            let len = c.len_utf8();
            let next = (start + len < text.len()).then_some(i + 1);
            syms.push(Symbol { start, len, id: None, prev: i.checked_sub(1), next });
        }
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<Bigram>, syms: &[Symbol], left: Option<usize>, right: Option<usize>| {
            let (Some(l), Some(r)) = (left, right) else { return };
            let (a, b) = (syms[l], syms[r]);
            let merged = &text[a.start..b.start + b.len];
            if let Some(&id) = self.vocab.ids.get(merged) {
                heap.push(Bigram { left: l, right: r, score: self.scores[id as usize], len: merged.len() });
            }
        };
        for i in 1..syms.len() {
            push(&mut heap, &syms, Some(i - 1), Some(i));
        }
        while let Some(bg) = heap.pop() {
            let (l, r) = (syms[bg.left], syms[bg.right]);
            if l.len == 0 || r.len == 0 || l.len + r.len != bg.len || l.next != Some(bg.right) {
                continue;
            }
            join(&mut syms, bg.left, bg.right);
            push(&mut heap, &syms, l.prev, Some(bg.left));
            push(&mut heap, &syms, Some(bg.left), r.next);
        }
        let mut at = Some(0);
        while let Some(i) = at {
            let s = syms[i];
            let piece = &text[s.start..s.start + s.len];
            match self.vocab.ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        // Every byte has a token (checked at load); the
                        // unknown token is the last resort of a vocabulary
                        // built without that check.
                        if let Some(id) = self.byte_token(b).or(self.unk) {
                            out.push(id);
                        }
                    }
                }
            }
            at = s.next;
        }
    }

    /// The bytes `id` stands for: a piece with `▁` as a space, a byte
    /// token as its byte, special tokens verbatim.
    pub fn token_bytes(&self, id: u32, out: &mut Vec<u8>) {
        let Some(p) = self.vocab.text(id) else { return };
        match self.vocab.types[id as usize] {
            TYPE_BYTE => match parse_byte_piece(p) {
                Some(b) => out.push(b),
                None => out.extend_from_slice(p.as_bytes()),
            },
            TYPE_NORMAL | TYPE_UNUSED => out.extend_from_slice(p.replace(SPACE, " ").as_bytes()),
            _ => out.extend_from_slice(p.as_bytes()),
        }
    }

    /// The text of `ids`; bytes that do not form UTF-8 are replaced
    /// (U+FFFD), as a stream of byte tokens can end mid-character.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            self.token_bytes(id, &mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Splits `text` at special tokens' texts (`specials`: text, id, token
/// type; longest first): each special token splits every plain-text
/// fragment left at each of its occurrences, left to right (llama.cpp's
/// `tokenizer_st_partition`). Control and unknown tokens are matched only
/// under [`Specials::Parse`]; user-defined tokens always (they are plain
/// text the vocabulary keeps whole, such as runs of newlines).
pub(crate) fn partition<'t>(text: &'t str, specials: &[(Box<str>, u32, i32)], mode: Specials) -> Vec<Fragment<'t>> {
    let mut frags = vec![Fragment::Text(text)];
    for (s, id, ty) in specials {
        if mode == Specials::AsText && *ty != TYPE_USER_DEFINED {
            continue;
        }
        if !frags.iter().any(|f| matches!(f, Fragment::Text(t) if t.contains(&**s))) {
            continue;
        }
        let mut next = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            let Fragment::Text(t) = f else {
                next.push(f);
                continue;
            };
            let mut at = 0;
            for (i, m) in t.match_indices(&**s) {
                if i > at {
                    next.push(Fragment::Text(&t[at..i]));
                }
                next.push(Fragment::Token(*id));
                at = i + m.len();
            }
            if at < t.len() {
                next.push(Fragment::Text(&t[at..]));
            }
        }
        frags = next;
    }
    frags
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

/// The byte of a `<0xXX>` piece.
fn parse_byte_piece(p: &str) -> Option<u8> {
    let hex = p.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small vocabulary: the 256 byte tokens, control tokens, a newline
    /// run, and pieces whose scores decide the merge order.
    fn vocab(add_space_prefix: bool) -> Spm {
        let mut pieces = vec!["<pad>".to_string(), "<eos>".into(), "<bos>".into(), "<unk>".into(), "<turn>".into()];
        let mut types = vec![TYPE_CONTROL, TYPE_CONTROL, TYPE_CONTROL, TYPE_UNKNOWN, TYPE_CONTROL];
        let mut scores = vec![0.0; 5];
        for b in 0..=255u8 {
            pieces.push(format!("<0x{b:02X}>"));
            types.push(TYPE_BYTE);
            scores.push(0.0);
        }
        for (p, s) in [
            ("\n\n", -1000.0),
            ("a", -1.0),
            ("b", -2.0),
            ("c", -3.0),
            ("▁", -4.0),
            ("ab", -5.0),
            ("bc", -6.0),
            ("abc", -7.0),
            ("▁a", -8.0),
            ("é", -9.0),
        ] {
            pieces.push(p.into());
            types.push(if p == "\n\n" { TYPE_USER_DEFINED } else { TYPE_NORMAL });
            scores.push(s);
        }
        Spm::new(pieces, scores, types, Some(3), add_space_prefix).unwrap()
    }

    fn pieces(v: &Spm, ids: &[u32]) -> Vec<String> {
        ids.iter().map(|&i| v.vocab().text(i).unwrap().to_string()).collect()
    }

    #[test]
    fn the_highest_scoring_merge_goes_first() {
        let v = vocab(false);
        // "abc": "ab" (-5) beats "bc" (-6); then "ab"+"c" = "abc" (-7).
        assert_eq!(pieces(&v, &v.encode("abc", Specials::Parse)), ["abc"]);
        // "bca": "bc", then "a" stays.
        assert_eq!(pieces(&v, &v.encode("bca", Specials::Parse)), ["bc", "a"]);
        // A space is ▁ and merges with what follows when that is a piece...
        assert_eq!(pieces(&v, &v.encode("a a", Specials::Parse)), ["a", "▁a"]);
        // ... unless a higher-scoring pair takes the character first.
        assert_eq!(pieces(&v, &v.encode("a ab", Specials::Parse)), ["a", "▁", "ab"]);
    }

    #[test]
    fn ties_merge_the_leftmost_pair_first() {
        let v = vocab(false);
        // "aaa" has no "aa" piece: no merges at all.
        assert_eq!(pieces(&v, &v.encode("aaa", Specials::Parse)), ["a", "a", "a"]);
        // "abab": both "ab" pairs have the same score; left first, then right.
        assert_eq!(pieces(&v, &v.encode("abab", Specials::Parse)), ["ab", "ab"]);
    }

    #[test]
    fn characters_outside_the_vocabulary_fall_back_to_their_bytes() {
        let v = vocab(false);
        let ids = v.encode("a€", Specials::Parse);
        assert_eq!(pieces(&v, &ids), ["a", "<0xE2>", "<0x82>", "<0xAC>"]);
        assert_eq!(v.decode(&ids), "a€");
        // A piece that is a multi-byte character is used whole.
        assert_eq!(pieces(&v, &v.encode("é", Specials::Parse)), ["é"]);
    }

    #[test]
    fn control_tokens_split_only_when_parsed_and_user_defined_always() {
        let v = vocab(false);
        assert_eq!(pieces(&v, &v.encode("a<turn>b", Specials::Parse)), ["a", "<turn>", "b"]);
        let as_text = v.encode("a<turn>b", Specials::AsText);
        assert!(!as_text.contains(&4), "{:?}", pieces(&v, &as_text));
        assert_eq!(v.decode(&as_text), "a<turn>b");
        assert_eq!(pieces(&v, &v.encode("a\n\n\nb", Specials::AsText)), ["a", "\n\n", "<0x0A>", "b"]);
    }

    #[test]
    fn the_space_prefix_is_written_before_text_and_after_special_tokens() {
        let v = vocab(true);
        assert_eq!(pieces(&v, &v.encode("a", Specials::Parse)), ["▁a"]);
        assert_eq!(pieces(&v, &v.encode("<turn>a", Specials::Parse)), ["<turn>", "▁a"]);
        let v = vocab(false);
        assert_eq!(pieces(&v, &v.encode("<turn>a", Specials::Parse)), ["<turn>", "a"]);
    }

    #[test]
    fn decoding_writes_spaces_and_reassembles_bytes() {
        let v = vocab(false);
        let ids = v.encode(" a  b\tc", Specials::Parse);
        assert_eq!(v.decode(&ids), " a  b\tc");
        assert_eq!(v.decode(&[]), "");
        assert_eq!(v.encode("", Specials::Parse), Vec::<u32>::new());
    }

    #[test]
    fn malformed_vocabularies_are_refused_by_name() {
        let e = Spm::new(vec!["a".into()], vec![], vec![1], None, false).unwrap_err();
        assert!(matches!(e, SpmError::Lengths { .. }), "{e}");
        let e = Spm::new(vec!["a".into(), "a".into()], vec![0.0; 2], vec![1; 2], None, false).unwrap_err();
        assert!(matches!(e, SpmError::Duplicate(1, _)), "{e}");
        let e = Spm::new(vec!["a".into()], vec![f32::NAN], vec![1], None, false).unwrap_err();
        assert!(matches!(e, SpmError::Score(0, _)), "{e}");
        let e = Spm::new(vec!["a".into()], vec![0.0], vec![1], None, false).unwrap_err();
        assert!(matches!(e, SpmError::NoByte(0)), "{e}");
        let e = Spm::new(vec!["".into()], vec![0.0], vec![1], None, false).unwrap_err();
        assert!(matches!(e, SpmError::Empty(0)), "{e}");
    }

    #[test]
    fn a_long_text_of_one_character_encodes_in_linear_steps() {
        let v = vocab(false);
        let text = "ab".repeat(50_000);
        let t0 = std::time::Instant::now();
        assert_eq!(v.encode(&text, Specials::Parse).len(), 50_000);
        assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    }
}
