//! The pre-tokenizers of GGUF byte-level BPE vocabularies: where a text is
//! cut into words before BPE merges run inside each word, so no token
//! crosses a cut. Each is the regular expression its model's tokenizer.json
//! names, written here as a scanner over Unicode general categories (no
//! regex engine), with the semantics llama.cpp gives it (`unicode.cpp`,
//! `llama-vocab.cpp`), which is the reference its GGUF files are tested
//! against.
//!
//! Character classes, as llama.cpp defines them: a letter is general
//! category L (Lu, Ll, Lt, Lm, Lo; not the marks M), a number is category N
//! (Nd, Nl, No), whitespace is the Unicode `White_Space` property (Rust's
//! [`char::is_whitespace`]).
//!
//! The patterns (`\s+(?!\S)` takes a whitespace run but its last character
//! when a non-space follows, so that character starts the next word):
//!
//! - [`Pre::Gpt2`] is `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
//!   ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
//! - [`Pre::Default`] (a file without `tokenizer.ggml.pre`, or `default`) makes
//!   four cuts in turn, each on the words of the one before: runs of
//!   punctuation (category P) and `$+<=>^~|`; GPT-2's pattern; runs of
//!   numbers; groups of three ASCII digits, from the left.
//! - [`Pre::SmolLm`] cuts every number character out alone first, then
//!   GPT-2's pattern runs on the text between them.
//! - [`Pre::Llama3`] is `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
//!   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
//! - [`Pre::Qwen2`] is Llama 3's with `\p{N}` (one digit per word).
//! - [`Pre::Tekken`] (Mistral Nemo and later) is `[^\r\n\p{L}\p{N}]?U*W+|
//!   [^\r\n\p{L}\p{N}]?U+W*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|
//!   \s+(?!\S)|\s+`, where U is a letter other than `a`-`z` and W a letter
//!   other than `A`-`Z`. (The model's own pattern writes U and W with the
//!   case categories and marks; llama.cpp runs this ASCII-case form, so a
//!   non-ASCII letter counts as both cases and marks are no letters.)

use unicode_general_category::{GeneralCategory as G, get_general_category};

/// A pre-tokenizer of GGUF BPE vocabularies (`tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pre {
    Default,
    Gpt2,
    SmolLm,
    Llama3,
    Qwen2,
    Tekken,
}

impl Pre {
    /// The pre-tokenizer a `tokenizer.ggml.pre` value names, by llama.cpp's
    /// names for it; `None` for one this module does not implement.
    pub fn from_gguf_name(name: &str) -> Option<Pre> {
        Some(match name {
            "default" => Pre::Default,
            "gpt2" | "gpt-2" => Pre::Gpt2,
            "smollm" => Pre::SmolLm,
            // Llama 3's own names, and Mistral's Pixtral and Devstral files.
            "llama3" | "llama-v3" | "llama-bpe" | "pixtral" => Pre::Llama3,
            "qwen2" | "deepseek-r1-qwen" => Pre::Qwen2,
            "tekken" => Pre::Tekken,
            _ => return None,
        })
    }

    /// The names [`Pre::from_gguf_name`] accepts, for error messages.
    pub const KNOWN: &'static str = "gpt2, gpt-2, default, smollm, llama3, llama-v3, llama-bpe, pixtral, qwen2, \
                                     deepseek-r1-qwen, tekken";

    /// Whether a word that is itself a vocabulary token is taken whole
    /// before any merge runs (llama.cpp's `ignore_merges`, set for these
    /// vocabularies because their merge lists cannot build every token).
    pub fn ignore_merges(self) -> bool {
        matches!(self, Pre::Llama3 | Pre::Tekken)
    }

    /// Whether prompts start with BOS when the file does not say
    /// (`tokenizer.ggml.add_bos_token` absent), as llama.cpp defaults.
    pub fn default_add_bos(self) -> bool {
        matches!(self, Pre::Llama3 | Pre::Tekken)
    }

    /// The words of `text`, as byte ranges that tile it in order.
    pub fn split(self, text: &str) -> Vec<std::ops::Range<usize>> {
        let mut offs: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        let cs: Vec<Class> = text.chars().map(Class::of).collect();
        offs.push(text.len());
        let mut ends = Vec::new();
        let n = cs.len();
        match self {
            Pre::Default => default(&cs, &mut ends),
            Pre::Gpt2 => gpt2(&cs, 0, n, &mut ends),
            Pre::SmolLm => {
                let mut lo = 0;
                for i in 0..n {
                    if cs[i].number {
                        gpt2(&cs, lo, i, &mut ends);
                        ends.push(i + 1);
                        lo = i + 1;
                    }
                }
                gpt2(&cs, lo, n, &mut ends);
            }
            Pre::Llama3 => llama3(&cs, 0, n, 3, &mut ends),
            Pre::Qwen2 => llama3(&cs, 0, n, 1, &mut ends),
            Pre::Tekken => tekken(&cs, 0, n, &mut ends),
        }
        let mut out = Vec::with_capacity(ends.len());
        let mut start = 0;
        for e in ends {
            if e > start {
                out.push(offs[start]..offs[e]);
                start = e;
            }
        }
        out
    }
}

/// What the patterns ask of one character.
#[derive(Clone, Copy, Debug)]
struct Class {
    c: char,
    letter: bool,
    number: bool,
    space: bool,
}

impl Class {
    fn of(c: char) -> Class {
        let (letter, number) = if c.is_ascii() {
            (c.is_ascii_alphabetic(), c.is_ascii_digit())
        } else {
            let g = get_general_category(c);
            (
                matches!(
                    g,
                    G::UppercaseLetter | G::LowercaseLetter | G::TitlecaseLetter | G::ModifierLetter | G::OtherLetter
                ),
                matches!(g, G::DecimalNumber | G::LetterNumber | G::OtherNumber),
            )
        };
        Class { c, letter, number, space: c.is_whitespace() }
    }

    /// `[^\s\p{L}\p{N}]`: punctuation, symbols, marks, controls, anything else.
    fn other(self) -> bool {
        !(self.space || self.letter || self.number)
    }

    fn newline(self) -> bool {
        self.c == '\r' || self.c == '\n'
    }
}

/// The character classes of `cs[lo..hi]`, `None` outside it (the patterns
/// see each segment as a whole text).
struct Seg<'a> {
    cs: &'a [Class],
    lo: usize,
    hi: usize,
}

impl Seg<'_> {
    fn at(&self, i: usize) -> Option<Class> {
        (i >= self.lo && i < self.hi).then(|| self.cs[i])
    }
    fn is(&self, i: usize, f: impl Fn(Class) -> bool) -> bool {
        self.at(i).is_some_and(f)
    }
    /// The first index from `i` where `f` fails.
    fn run(&self, mut i: usize, f: impl Fn(Class) -> bool + Copy) -> usize {
        while self.is(i, f) {
            i += 1;
        }
        i
    }
    /// `'s|'t|'re|'ve|'m|'ll|'d` at `i` (ASCII case folded when
    /// `fold`): the index after it.
    fn contraction(&self, i: usize, fold: bool) -> Option<usize> {
        let ch = |k: usize| self.at(k).map(|c| if fold { c.c.to_ascii_lowercase() } else { c.c }).unwrap_or('\0');
        if ch(i) != '\'' {
            return None;
        }
        match (ch(i + 1), ch(i + 2)) {
            ('s' | 't' | 'm' | 'd', _) => Some(i + 2),
            ('r', 'e') | ('v', 'e') | ('l', 'l') => Some(i + 3),
            _ => None,
        }
    }
    /// The whitespace alternatives shared by the Llama 3 family:
    /// `\s*[\r\n]+|\s+(?!\S)|\s+` at `i`, the index after the match.
    fn spaces_newline_first(&self, i: usize) -> Option<usize> {
        let end = self.run(i, |c| c.space);
        if end == i {
            return None;
        }
        // `\s*[\r\n]+`: through the run's last line break.
        if let Some(k) = (i..end).rev().find(|&k| self.cs[k].newline()) {
            return Some(k + 1);
        }
        Some(self.spaces_tail(i, end))
    }
    /// `\s+(?!\S)|\s+` for the whitespace run `i..end`: all of it but the
    /// last character when more than one and a non-space follows.
    fn spaces_tail(&self, i: usize, end: usize) -> usize {
        if end - i > 1 && end < self.hi { end - 1 } else { end }
    }
}

/// GPT-2's pattern over `cs[lo..hi]`, pushing word ends.
fn gpt2(cs: &[Class], lo: usize, hi: usize, ends: &mut Vec<usize>) {
    let s = Seg { cs, lo, hi };
    let mut pos = lo;
    while pos < hi {
        let c = cs[pos];
        pos = if let Some(e) = s.contraction(pos, false) {
            e
        } else {
            // ` ?X+` for letters, numbers, others: a space joins the run after it.
            let first = if c.c == ' ' { pos + 1 } else { pos };
            let run = |f: fn(Class) -> bool| s.is(first, f).then(|| s.run(first, f));
            if let Some(e) = run(|c| c.letter).or_else(|| run(|c| c.number)).or_else(|| run(Class::other)) {
                e
            } else {
                let end = s.run(pos, |c| c.space);
                if end > pos { s.spaces_tail(pos, end) } else { pos + 1 }
            }
        };
        ends.push(pos);
    }
}

/// llama.cpp's default BPE pre-tokenizer over all of `cs`, pushing word ends.
fn default(cs: &[Class], ends: &mut Vec<usize>) {
    // 1. Runs of punctuation and `$+<=>^~|`, and the text between them.
    let punct = |c: Class| matches!(c.c, '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|') || is_punctuation(c.c);
    let mut cuts = Vec::new();
    let mut i = 0;
    while i < cs.len() {
        let p = punct(cs[i]);
        while i < cs.len() && punct(cs[i]) == p {
            i += 1;
        }
        cuts.push(i);
    }
    // 2. GPT-2's pattern on each.
    let mut words = Vec::new();
    let mut lo = 0;
    for hi in cuts {
        gpt2(cs, lo, hi, &mut words);
        lo = hi;
    }
    // 3. Runs of numbers cut out of each word; 4. then three ASCII digits
    // at a time, leftmost first.
    let mut lo = 0;
    for hi in words {
        let mut i = lo;
        while i < hi {
            let num = cs[i].number;
            let start = i;
            while i < hi && cs[i].number == num {
                i += 1;
            }
            let mut j = start;
            let mut piece_start = start;
            while j + 3 <= i {
                if cs[j..j + 3].iter().all(|c| c.c.is_ascii_digit()) {
                    if j > piece_start {
                        ends.push(j);
                    }
                    ends.push(j + 3);
                    j += 3;
                    piece_start = j;
                } else {
                    j += 1;
                }
            }
            ends.push(i);
        }
        lo = hi;
    }
}

/// General category P (any punctuation).
fn is_punctuation(c: char) -> bool {
    matches!(
        get_general_category(c),
        G::ConnectorPunctuation
            | G::DashPunctuation
            | G::OpenPunctuation
            | G::ClosePunctuation
            | G::InitialPunctuation
            | G::FinalPunctuation
            | G::OtherPunctuation
    )
}

/// Llama 3's pattern (numbers in groups of up to `digits`) over
/// `cs[lo..hi]`, pushing word ends.
fn llama3(cs: &[Class], lo: usize, hi: usize, digits: usize, ends: &mut Vec<usize>) {
    let s = Seg { cs, lo, hi };
    let mut pos = lo;
    while pos < hi {
        let c = cs[pos];
        if let Some(e) = s.contraction(pos, true) {
            pos = e;
        } else if !c.newline() && !c.number && (c.letter || s.is(pos + 1, |c| c.letter)) {
            // `[^\r\n\p{L}\p{N}]?\p{L}+`
            pos = s.run(pos + 1, |c| c.letter);
        } else if c.number {
            // `\p{N}{1,digits}`, repeatedly.
            let end = s.run(pos, |c| c.number);
            while end - pos > digits {
                pos += digits;
                ends.push(pos);
            }
            pos = end;
        } else if let Some(e) = other_run(&s, pos, |c| c.newline()) {
            pos = e;
        } else if let Some(e) = s.spaces_newline_first(pos) {
            pos = e;
        } else {
            pos += 1;
        }
        ends.push(pos);
    }
}

/// ` ?[^\s\p{L}\p{N}]+T*` at `pos`, where `tail` says which characters T
/// are: the index after the match.
fn other_run(s: &Seg<'_>, pos: usize, tail: fn(Class) -> bool) -> Option<usize> {
    let first = if s.cs[pos].c == ' ' { pos + 1 } else { pos };
    if !s.is(first, Class::other) {
        return None;
    }
    let end = s.run(first, Class::other);
    Some(s.run(end, tail))
}

/// Tekken's pattern over `cs[lo..hi]`, pushing word ends.
fn tekken(cs: &[Class], lo: usize, hi: usize, ends: &mut Vec<usize>) {
    let s = Seg { cs, lo, hi };
    let upper = |c: Class| c.letter && !c.c.is_ascii_lowercase();
    let lower = |c: Class| c.letter && !c.c.is_ascii_uppercase();
    let mut pos = lo;
    while pos < hi {
        let c = cs[pos];
        // The two letter alternatives, after an optional leading character
        // that is no line break, letter or number.
        let start = if c.letter {
            Some(pos)
        } else if !c.newline() && !c.number {
            Some(pos + 1)
        } else {
            None
        };
        let word = start.and_then(|st| {
            let j = s.run(st, upper);
            if s.is(j, lower) {
                // `U*W+`: the upper run, then the lower run after it.
                Some(s.run(j, lower))
            } else if let Some(k) = (st..j).rev().find(|&k| lower(cs[k])) {
                // `U*W+` backtracking: the upper run gives its last letter
                // that is also lower (a non-ASCII one) to `W+`.
                Some(k + 1)
            } else if j > st {
                // `U+W*` with no lower letter after.
                Some(j)
            } else {
                None
            }
        });
        pos = if let Some(e) = word {
            e
        } else if c.number {
            pos + 1
        } else if let Some(e) = other_run(&s, pos, |c| c.newline() || c.c == '/') {
            e
        } else if let Some(e) = s.spaces_newline_first(pos) {
            e
        } else {
            pos + 1
        };
        ends.push(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: Pre, text: &str) -> Vec<&str> {
        pre.split(text).into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn gpt2_joins_a_space_to_the_run_after_it_and_leaves_one_before_a_word() {
        assert_eq!(words(Pre::Gpt2, "Hello world's  12 !!"), ["Hello", " world", "'s", " ", " 12", " !!"]);
        assert_eq!(words(Pre::Gpt2, "a\n\n b  "), ["a", "\n\n", " b", "  "]);
    }

    #[test]
    fn default_cuts_punctuation_runs_and_three_digit_groups() {
        assert_eq!(words(Pre::Default, "It's 12345!"), ["It", "'", "s", " ", "123", "45", "!"]);
        assert_eq!(words(Pre::Default, "a+=b `x`"), ["a", "+=", "b", " `", "x", "`"]);
    }

    #[test]
    fn smollm_cuts_every_digit_alone() {
        assert_eq!(words(Pre::SmolLm, "x 123  4"), ["x", " ", "1", "2", "3", "  ", "4"]);
    }

    #[test]
    fn llama3_groups_digits_by_three_and_folds_contraction_case() {
        assert_eq!(words(Pre::Llama3, "1234567 I'LL it's"), ["123", "456", "7", " I", "'LL", " it", "'s"]);
        assert_eq!(words(Pre::Llama3, "x  \n\n  y"), ["x", "  \n\n", " ", " y"]);
        assert_eq!(words(Pre::Llama3, "...\n\nok"), ["...\n\n", "ok"]);
        assert_eq!(words(Pre::Llama3, "(abc) é"), ["(abc", ")", " é"]);
    }

    #[test]
    fn qwen2_cuts_every_digit_alone() {
        assert_eq!(words(Pre::Qwen2, "a 2024!"), ["a", " ", "2", "0", "2", "4", "!"]);
    }

    #[test]
    fn tekken_splits_words_at_case_changes() {
        assert_eq!(words(Pre::Tekken, "HelloWorld HTTPServer"), ["Hello", "World", " HTTPServer"]);
        assert_eq!(words(Pre::Tekken, "ABC DEF"), ["ABC", " DEF"]);
        assert_eq!(words(Pre::Tekken, "aBc"), ["a", "Bc"]);
        // A non-ASCII letter is both cases.
        assert_eq!(words(Pre::Tekken, "éA"), ["é", "A"]);
        assert_eq!(words(Pre::Tekken, "a/b//\nc 12"), ["a", "/b", "//\n", "c", " ", "1", "2"]);
    }

    #[test]
    fn every_split_tiles_the_text() {
        let text = "It's 2024 — naïve 日本語 🙂\r\n\t x  \u{3000}y'S ";
        for pre in [Pre::Default, Pre::Gpt2, Pre::SmolLm, Pre::Llama3, Pre::Qwen2, Pre::Tekken] {
            assert_eq!(words(pre, text).concat(), text, "{pre:?}");
            assert!(words(pre, "").is_empty());
        }
    }

    #[test]
    fn unknown_names_are_not_taken_for_known_ones() {
        assert_eq!(Pre::from_gguf_name("llama-bpe"), Some(Pre::Llama3));
        assert_eq!(Pre::from_gguf_name("tekken"), Some(Pre::Tekken));
        assert_eq!(Pre::from_gguf_name("deepseek-v3"), None);
    }
}
