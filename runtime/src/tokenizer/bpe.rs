//! Byte-level BPE from GGUF metadata (`tokenizer.ggml.model = gpt2`): the
//! vocabulary, its ranked merges and its pre-tokenizer ([`super::pretok`]),
//! run as llama.cpp runs them, so a prompt gets the ids the model was
//! trained on.
//!
//! A text is split at special tokens first ([`super::spm::partition`]);
//! each run of plain text is cut into words by the pre-tokenizer; each
//! word's bytes are spelled as GPT-2's byte characters (every byte one
//! printable character, [`byte_char`]), and adjacent symbols merge, the
//! lowest-ranked merge first (ties: leftmost), until no merge applies. With
//! `ignore_merges` a word that is itself a token is taken whole. A symbol
//! that is no token is written as its bytes' tokens; a byte with no token
//! is dropped (llama.cpp does the same).

use super::pretok::Pre;
use super::vocab::{TYPE_CONTROL, TYPE_UNKNOWN, TYPE_USER_DEFINED, Vocab, VocabError};
use super::spm::{Fragment, Specials, Symbol, join, partition};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// Why a vocabulary was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BpeError {
    #[error("{tokens} tokens but {types} token types")]
    Lengths { tokens: usize, types: usize },
    #[error("token {0} ({1:?}) appears twice")]
    Duplicate(usize, String),
    #[error("token {0} is empty")]
    Empty(usize),
    #[error("merge {0} ({1:?}) is not two tokens separated by a space")]
    Merge(usize, String),
}

/// The character GPT-2's byte-level encoding writes for each byte: the
/// printable Latin-1 bytes (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) stand for
/// themselves, the other 68 for U+0100 onwards in byte order.
const BYTE_CHARS: [char; 256] = {
    let mut t = ['\0'; 256];
    let mut n = 0u32;
    let mut b = 0usize;
    while b < 256 {
        let printable = matches!(b as u8, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
        t[b] = if printable {
            b as u8 as char
        } else {
            n += 1;
            match char::from_u32(0x100 + n - 1) {
                Some(c) => c,
                None => '\u{fffd}',
            }
        };
        b += 1;
    }
    t
};

/// The byte character of byte `b` ([`BYTE_CHARS`]).
pub fn byte_char(b: u8) -> char {
    BYTE_CHARS[b as usize]
}

/// A byte-level BPE vocabulary with its merges and pre-tokenizer.
#[derive(Debug)]
pub struct Bpe {
    /// Token texts as the file writes them (byte characters for normal
    /// tokens, plain text for control and user-defined ones); their
    /// specials split a text first.
    vocab: Vocab,
    /// (left, right) -> (rank, merged token).
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// The token of each byte's byte character, where there is one.
    byte_ids: Box<[Option<u32>; 256]>,
    /// Byte character -> byte, for decoding.
    char_bytes: HashMap<char, u8>,
    pre: Pre,
    ignore_merges: bool,
    /// Merges skipped at load because a side or the result is no token.
    pub skipped_merges: usize,
}

/// A candidate merge of the adjacent symbols `left` and `right`.
#[derive(Debug, PartialEq, Eq)]
struct Bigram {
    rank: u32,
    left: usize,
    right: usize,
    /// The tokens of both sides when queued: a side that changed since
    /// makes the bigram stale.
    ids: (u32, u32),
}

impl Ord for Bigram {
    /// The heap's maximum is the next merge: the lowest rank, then the
    /// leftmost pair.
    fn cmp(&self, o: &Self) -> Ordering {
        o.rank.cmp(&self.rank).then_with(|| o.left.cmp(&self.left))
    }
}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Bpe {
    /// A vocabulary from its tokens, token types (same length), merges
    /// (`"left right"`, best first) and pre-tokenizer.
    pub fn new(tokens: Vec<String>, types: Vec<i32>, merges: &[&str], pre: Pre) -> Result<Bpe, BpeError> {
        if types.len() != tokens.len() {
            return Err(BpeError::Lengths { tokens: tokens.len(), types: types.len() });
        }
        let vocab = Vocab::new(tokens, types).map_err(|e| match e {
            VocabError::Empty(i) => BpeError::Empty(i),
            VocabError::Duplicate(i, t) => BpeError::Duplicate(i, t),
        })?;
        let ids = &vocab.ids;
        let mut byte_ids = Box::new([None; 256]);
        let mut char_bytes = HashMap::with_capacity(256);
        for b in 0..=255u8 {
            let c = byte_char(b);
            char_bytes.insert(c, b);
            byte_ids[b as usize] = ids.get(c.encode_utf8(&mut [0; 4]) as &str).copied();
        }
        let mut table = HashMap::with_capacity(merges.len());
        let mut skipped_merges = 0;
        for (rank, m) in merges.iter().enumerate() {
            // The first space after the first character separates the two
            // sides (llama.cpp: a left side may start with a space).
            let cut = m.char_indices().skip(1).find(|&(_, c)| c == ' ').map(|(i, _)| i);
            let Some(cut) = cut.filter(|&i| i + 1 < m.len()) else {
                return Err(BpeError::Merge(rank, m.to_string()));
            };
            let (a, b) = (&m[..cut], &m[cut + 1..]);
            let merged = format!("{a}{b}");
            match (ids.get(a), ids.get(b), ids.get(merged.as_str())) {
                (Some(&l), Some(&r), Some(&to)) => {
                    // The first of two equal merges ranks.
                    table.entry((l, r)).or_insert((rank as u32, to));
                }
                _ => skipped_merges += 1,
            }
        }
        Ok(Bpe {
            vocab,
            merges: table,
            byte_ids,
            char_bytes,
            pre,
            ignore_merges: pre.ignore_merges(),
            skipped_merges,
        })
    }

    /// The tokens (texts, types, ids, special tokens).
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    pub fn pre(&self) -> Pre {
        self.pre
    }

    /// The most bytes of text one token stands for, as [`Bpe::token_bytes`]
    /// writes it (a normal token: one byte per byte character, any other
    /// character as its UTF-8; a special one: its text).
    pub fn longest_token_bytes(&self) -> usize {
        let bytes = |t: &str, ty: i32| {
            if matches!(ty, TYPE_CONTROL | TYPE_USER_DEFINED | TYPE_UNKNOWN) {
                t.len()
            } else {
                t.chars().map(|c| if self.char_bytes.contains_key(&c) { 1 } else { c.len_utf8() }).sum()
            }
        };
        self.vocab.texts_and_types().map(|(t, ty)| bytes(t, ty)).max().unwrap_or(1)
    }

    /// The ids of `text`, without BOS.
    pub fn encode(&self, text: &str, specials: Specials) -> Vec<u32> {
        let mut out = Vec::new();
        let mut word = String::new();
        for frag in partition(text, &self.vocab.specials, specials) {
            match frag {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(t) => {
                    for r in self.pre.split(t) {
                        word.clear();
                        word.extend(t[r].bytes().map(byte_char));
                        self.encode_word(&word, &mut out);
                    }
                }
            }
        }
        out
    }

    /// Merges one word (in byte characters) and appends its tokens.
    fn encode_word(&self, word: &str, out: &mut Vec<u32>) {
        if self.ignore_merges
            && let Some(id) = self.vocab.id(word)
        {
            out.push(id);
            return;
        }
        let mut syms: Vec<Symbol> = Vec::with_capacity(word.len());
        for (i, (start, c)) in word.char_indices().enumerate() {
            let len = c.len_utf8();
            let id = self.vocab.ids.get(&word[start..start + len]).copied();
            syms.push(Symbol {
                start,
                len,
                id,
                prev: i.checked_sub(1),
                next: (start + len < word.len()).then_some(i + 1),
            });
        }
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<Bigram>, syms: &[Symbol], left: Option<usize>, right: Option<usize>| {
            let (Some(l), Some(r)) = (left, right) else { return };
            let (Some(a), Some(b)) = (syms[l].id, syms[r].id) else { return };
            if let Some(&(rank, _)) = self.merges.get(&(a, b)) {
                heap.push(Bigram { rank, left: l, right: r, ids: (a, b) });
            }
        };
        for i in 1..syms.len() {
            push(&mut heap, &syms, Some(i - 1), Some(i));
        }
        while let Some(bg) = heap.pop() {
            let (l, r) = (syms[bg.left], syms[bg.right]);
            if l.len == 0 || r.len == 0 || l.next != Some(bg.right) || (l.id, r.id) != (Some(bg.ids.0), Some(bg.ids.1))
            {
                continue;
            }
            let merged = self.merges.get(&bg.ids).map(|m| m.1);
            join(&mut syms, bg.left, bg.right);
            syms[bg.left].id = merged;
            push(&mut heap, &syms, l.prev, Some(bg.left));
            push(&mut heap, &syms, Some(bg.left), r.next);
        }
        let mut at = (!syms.is_empty()).then_some(0);
        while let Some(i) = at {
            let s = syms[i];
            match s.id {
                Some(id) => out.push(id),
                None => {
                    for c in word[s.start..s.start + s.len].chars() {
                        if let Some(id) = self.char_bytes.get(&c).and_then(|&b| self.byte_ids[b as usize]) {
                            out.push(id);
                        }
                    }
                }
            }
            at = s.next;
        }
    }

    /// The bytes `id` stands for: a normal token's byte characters as
    /// bytes, control and user-defined tokens verbatim.
    pub fn token_bytes(&self, id: u32, out: &mut Vec<u8>) {
        let Some(t) = self.vocab.text(id) else { return };
        if matches!(self.vocab.types[id as usize], TYPE_CONTROL | TYPE_USER_DEFINED | TYPE_UNKNOWN) {
            out.extend_from_slice(t.as_bytes());
            return;
        }
        for c in t.chars() {
            match self.char_bytes.get(&c) {
                Some(&b) => out.push(b),
                None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
    }

    /// The text of `ids`; bytes that do not form UTF-8 are replaced
    /// (U+FFFD), as a token can end mid-character.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            self.token_bytes(id, &mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 256 byte characters, a control token, and merges building
    /// "hello", " world" and "lo".
    fn vocab(pre: Pre) -> Bpe {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
        let mut types = vec![1; 256];
        for t in ["he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld", "lo", "<|end|>"] {
            tokens.push(t.into());
            types.push(if t == "<|end|>" { TYPE_CONTROL } else { 1 });
        }
        let merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "l o"];
        Bpe::new(tokens, types, &merges, pre).unwrap()
    }

    fn texts(v: &Bpe, ids: &[u32]) -> Vec<String> {
        ids.iter().map(|&i| v.vocab().text(i).unwrap().to_string()).collect()
    }

    #[test]
    fn byte_characters_are_gpt2s() {
        assert_eq!(byte_char(b'a'), 'a');
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(byte_char(0), '\u{100}');
        assert_eq!(byte_char(0xad), '\u{143}');
        let all: std::collections::HashSet<char> = (0..=255u8).map(byte_char).collect();
        assert_eq!(all.len(), 256);
    }

    #[test]
    fn the_lowest_ranked_merge_goes_first() {
        let v = vocab(Pre::Gpt2);
        assert_eq!(texts(&v, &v.encode("hello world", Specials::Parse)), ["hello", "Ġworld"]);
        // "l l" (rank 1) beats "l o" (rank 9): "hel" + "lo" never forms.
        assert_eq!(texts(&v, &v.encode("hello", Specials::Parse)), ["hello"]);
        assert_eq!(texts(&v, &v.encode("llo", Specials::Parse)), ["ll", "o"]);
    }

    #[test]
    fn control_tokens_split_only_when_parsed() {
        let v = vocab(Pre::Gpt2);
        let ids = v.encode("hello<|end|>", Specials::Parse);
        assert_eq!(texts(&v, &ids), ["hello", "<|end|>"]);
        let ids = v.encode("hello<|end|>", Specials::AsText);
        assert!(ids.len() > 2);
        assert_eq!(v.decode(&ids), "hello<|end|>");
    }

    #[test]
    fn decoding_reverses_the_byte_characters() {
        let v = vocab(Pre::Llama3);
        for t in ["hello world", " \n\t x", "naïve 日本 🙂", ""] {
            assert_eq!(v.decode(&v.encode(t, Specials::Parse)), t);
        }
    }

    #[test]
    fn the_longest_token_counts_the_bytes_it_decodes_to() {
        let v = vocab(Pre::Gpt2);
        // "Ġworld" is six bytes of text; "<|end|>" seven.
        assert_eq!(v.longest_token_bytes(), 7);
        // A character outside the byte table decodes as its UTF-8.
        let v = Bpe::new(vec!["日本".into()], vec![1], &[], Pre::Gpt2).unwrap();
        assert_eq!(v.longest_token_bytes(), 6);
        assert_eq!(v.decode(&[0]).len(), 6);
    }

    #[test]
    fn a_malformed_merge_is_refused_by_index() {
        let e = Bpe::new(vec!["a".into()], vec![1], &["ab"], Pre::Gpt2).unwrap_err();
        assert_eq!(e, BpeError::Merge(0, "ab".into()));
        let e = Bpe::new(vec!["a".into(), "a".into()], vec![1, 1], &[], Pre::Gpt2).unwrap_err();
        assert!(matches!(e, BpeError::Duplicate(1, _)), "{e}");
        let e = Bpe::new(vec!["a".into()], vec![], &[], Pre::Gpt2).unwrap_err();
        assert!(matches!(e, BpeError::Lengths { .. }), "{e}");
        // A merge whose sides are no tokens is skipped, not refused.
        let v = Bpe::new(vec!["a".into()], vec![1], &["x y"], Pre::Gpt2).unwrap();
        assert_eq!(v.skipped_merges, 1);
    }

    #[test]
    fn a_long_word_merges_in_few_steps() {
        let v = vocab(Pre::Gpt2);
        let text = "he".repeat(100_000);
        let t0 = std::time::Instant::now();
        assert_eq!(v.encode(&text, Specials::Parse).len(), 100_000);
        assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    }
}
