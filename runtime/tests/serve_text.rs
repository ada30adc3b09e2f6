//! Streamed detokenization on the default model's real tokenizer: the
//! pieces of a token stream, concatenated, are exactly the decoded text,
//! and no piece ends inside a UTF-8 character, even for text whose
//! characters span several byte-level tokens.

mod common;

use runtime::serve::text::{Detokenizer, StopText};

const TEXTS: &[&str] = &[
    "Plain ASCII, with punctuation: done.",
    "Le café « Chez Zoë » — ouvert à 7 h.",
    "日本の首都は東京です。",
    "emoji 🙂🚀 and mixed 🇫🇷 flags 👩‍💻 end",
    "code:\n\tfn main() { println!(\"hi\"); }\n",
];

/// Feeds `ids` one at a time; returns the pieces and the final text.
fn stream(ids: &[u32], stops: &[&str]) -> (Vec<String>, String, bool) {
    let tok = &common::model().tokenizer;
    let mut detok = Detokenizer::default();
    let mut text = StopText::new(stops.iter().map(|s| s.to_string()).collect());
    let mut pieces = Vec::new();
    for n in 1..=ids.len() {
        let piece = detok.next(tok, &ids[..n]).unwrap();
        pieces.push(text.push(&piece));
        if text.stopped() {
            break;
        }
    }
    let full = tok.decode(ids).unwrap();
    let (rest, final_text) = text.finish(&full);
    let final_text = final_text.to_string();
    pieces.push(rest);
    (pieces, final_text, text.stopped())
}

#[test]
fn streamed_pieces_concatenate_to_the_decoded_text() {
    let tok = &common::model().tokenizer;
    let mut split_chars = 0;
    for t in TEXTS {
        let ids = tok.encode(t).unwrap();
        // Some token of these texts must end mid-character, or this test
        // would not exercise holding pieces back.
        split_chars += (1..ids.len()).filter(|&n| tok.decode(&ids[..n]).unwrap().ends_with('\u{FFFD}')).count();
        let (pieces, final_text, stopped) = stream(&ids, &[]);
        assert!(!stopped);
        assert_eq!(pieces.concat(), tok.decode(&ids).unwrap(), "{t:?}");
        assert_eq!(final_text, *t);
        for p in &pieces {
            assert!(!p.contains('\u{FFFD}'), "{t:?}: piece {p:?} splits a character");
        }
    }
    assert!(split_chars > 0, "no text split a character across tokens");
}

#[test]
fn a_stop_string_made_of_multibyte_characters_cuts_the_stream() {
    let tok = &common::model().tokenizer;
    let t = "日本の首都は東京です。";
    let ids = tok.encode(t).unwrap();
    let (pieces, final_text, stopped) = stream(&ids, &["東京"]);
    assert!(stopped);
    assert_eq!(final_text, "日本の首都は");
    assert_eq!(pieces.concat(), "日本の首都は");
}
