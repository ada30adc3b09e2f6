//! Text from a file or a folder name made safe to print on a terminal
//! ([`printable`]): the ledger, record folder names and raw rows are edited
//! by anyone, and a name holding ESC, BEL or CR would otherwise drive the
//! reviewer's terminal (recolour, retitle, overwrite the line above) or
//! forge a line of the tool's own output.

use std::borrow::Cow;

/// Characters a terminal acts on or that reorder what is shown: every
/// control character (C0 with LF, CR and TAB; DEL; C1) and the Unicode
/// bidirectional marks and overrides (Unicode TR 9: LRM, RLM, ALM, the
/// embeddings, overrides and isolates), which make text read differently
/// from its bytes.
fn acts_on_a_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `s` with each character a terminal acts on written as a Rust escape
/// (`\n`, `\u{1b}`), and every backslash doubled, so the printed text
/// reads back unambiguously; borrowed when nothing needs it.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| acts_on_a_terminal(c) || c == '\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if acts_on_a_terminal(c) {
            out.extend(c.escape_default());
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_bell_newline_and_bidi_overrides_are_written_as_escapes() {
        let s = printable("2026-12-02-x\u{1b}]0;pwned\u{7}\r\nledger: ok\u{202E}gnp.exe\\n");
        assert_eq!(s, "2026-12-02-x\\u{1b}]0;pwned\\u{7}\\r\\nledger: ok\\u{202e}gnp.exe\\\\n");
        assert!(!s.chars().any(acts_on_a_terminal));
        // Plain text (non-ASCII letters included) is not copied.
        assert!(matches!(printable("records/2026-12-02-café"), Cow::Borrowed(_)));
        // A backslash alone is doubled too: `a\n` never reads as an escaped newline.
        assert_eq!(printable("a\\n"), "a\\\\n");
    }
}
