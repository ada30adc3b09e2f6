//! Text out of a token stream, one token at a time: [`Detokenizer`] turns
//! tokens into text pieces without splitting a UTF-8 character, and
//! [`StopText`] watches for stop strings, holding back text that might be
//! the start of one. The pieces a stream sends, concatenated, are exactly
//! the text of the finished response.

use crate::tokenizer::{Tokenizer, TokenizerError};

/// Incremental detokenization over a small window: decode the tokens since
/// the last settled point, and emit only what they add beyond the text the
/// window already produced. Byte-level BPE tokens can end mid-character;
/// a piece that would end in U+FFFD waits for the next token.
#[derive(Clone, Debug, Default)]
pub struct Detokenizer {
    /// Start of the window (one settled token of left context).
    prefix: usize,
    /// End of the text already emitted.
    read: usize,
}

impl Detokenizer {
    /// The text `ids` adds since the last call (`ids` only ever grows).
    pub fn next(&mut self, tok: &Tokenizer, ids: &[u32]) -> Result<String, TokenizerError> {
        let before = tok.decode(&ids[self.prefix..self.read])?;
        let after = tok.decode(&ids[self.prefix..])?;
        if after.len() > before.len() && !after.ends_with('\u{FFFD}') && after.starts_with(&before) {
            let piece = after[before.len()..].to_string();
            self.prefix = self.read;
            self.read = ids.len();
            return Ok(piece);
        }
        Ok(String::new())
    }
}

/// The response text as it grows, cut at the first stop string.
#[derive(Clone, Debug, Default)]
pub struct StopText {
    stops: Vec<String>,
    text: String,
    /// Bytes of `text` handed out so far.
    sent: usize,
    stopped: bool,
}

impl StopText {
    pub fn new(stops: Vec<String>) -> Self {
        StopText { stops, ..Default::default() }
    }

    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Adds `piece`; returns the text that is now safe to send (none of it
    /// can turn out to belong to a stop string).
    pub fn push(&mut self, piece: &str) -> String {
        if self.stopped || piece.is_empty() {
            return String::new();
        }
        let from = self.text.len();
        self.text.push_str(piece);
        self.cut_at_stop(from);
        let safe = if self.stopped { self.text.len() } else { self.text.len() - self.held_back() };
        self.take(safe)
    }

    /// The generation ended and `full` is the text of all its tokens: the
    /// rest of the response (everything not sent yet), and the final text.
    /// Normally `full` extends the text seen so far; the pieces were cut
    /// from it, so it does unless the tokenizer's decoding is not
    /// concatenative, in which case `full` wins for the final text.
    pub fn finish(&mut self, full: &str) -> (String, &str) {
        if !self.stopped {
            if full.starts_with(&self.text) {
                let from = self.text.len();
                self.text.push_str(&full[from..]);
                self.cut_at_stop(from);
            } else {
                tracing::warn!("streamed text is not a prefix of the decoded completion; the final text wins");
                self.text = full.to_string();
                self.sent = self.sent.min(self.text.len());
                while !self.text.is_char_boundary(self.sent) {
                    self.sent -= 1;
                }
                self.cut_at_stop(0);
            }
        }
        let rest = self.take(self.text.len());
        (rest, &self.text)
    }

    /// Looks for a stop string that ends after byte `from` and cuts the
    /// text before the earliest one.
    fn cut_at_stop(&mut self, from: usize) {
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        if longest == 0 {
            return;
        }
        let mut start = from.saturating_sub(longest - 1).max(self.sent.min(from));
        while !self.text.is_char_boundary(start) {
            start -= 1;
        }
        let hay = &self.text[start..];
        if let Some(at) = self.stops.iter().filter_map(|s| hay.find(s.as_str())).min() {
            self.text.truncate(start + at);
            self.stopped = true;
        }
    }

    /// Bytes at the end of the text that could begin a stop string.
    fn held_back(&self) -> usize {
        let unsent = &self.text[self.sent..];
        let mut held = 0;
        for s in &self.stops {
            // The longest proper prefix of `s` that ends the unsent text.
            for (i, _) in s.char_indices().skip(1) {
                if i > held && unsent.ends_with(&s[..i]) {
                    held = i;
                }
            }
        }
        held
    }

    fn take(&mut self, upto: usize) -> String {
        let upto = upto.min(self.text.len());
        if upto <= self.sent {
            return String::new();
        }
        let out = self.text[self.sent..upto].to_string();
        self.sent = upto;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` and returns (what was sent, the final text, stopped).
    fn run(stops: &[&str], pieces: &[&str]) -> (String, String, bool) {
        let mut s = StopText::new(stops.iter().map(|s| s.to_string()).collect());
        let mut sent = String::new();
        for p in pieces {
            sent.push_str(&s.push(p));
            if s.stopped() {
                break;
            }
        }
        let full: String = pieces.concat();
        let (rest, text) = s.finish(&full);
        sent.push_str(&rest);
        (sent, text.to_string(), s.stopped())
    }

    #[test]
    fn without_stop_strings_everything_is_sent_at_once() {
        let mut s = StopText::new(vec![]);
        assert_eq!(s.push("ab"), "ab");
        assert_eq!(s.push("c"), "c");
        assert_eq!(s.finish("abc"), (String::new(), "abc"));
    }

    #[test]
    fn a_stop_string_split_across_pieces_is_cut_and_never_sent() {
        let (sent, text, stopped) = run(&["END"], &["hello E", "N", "D and more"]);
        assert_eq!((sent.as_str(), text.as_str(), stopped), ("hello ", "hello ", true));
    }

    #[test]
    fn a_held_back_prefix_that_is_not_a_stop_is_released() {
        let mut s = StopText::new(vec!["END".into()]);
        assert_eq!(s.push("x E"), "x ");
        assert_eq!(s.push("N"), "");
        assert_eq!(s.push("x"), "ENx");
        assert_eq!(s.finish("x ENx").0, "");
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        let (_, text, _) = run(&["c", "ab"], &["xxabc"]);
        assert_eq!(text, "xx");
    }

    #[test]
    fn a_stop_in_the_final_flush_still_cuts() {
        // The last piece was held back by the detokenizer and only arrives in `finish`.
        let mut s = StopText::new(vec!["\n\n".into()]);
        assert_eq!(s.push("a"), "a");
        let (rest, text) = s.finish("a\n\nb");
        assert_eq!((rest.as_str(), text), ("", "a"));
        assert!(s.stopped());
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        let (sent, text, _) = run(&["日本"], &["é", "日", "本語"]);
        assert_eq!((sent.as_str(), text.as_str()), ("é", "é"));
        let (sent, text, stopped) = run(&["🙂x"], &["a🙂", "b"]);
        assert_eq!((sent.as_str(), text.as_str(), stopped), ("a🙂b", "a🙂b", false));
    }
}
