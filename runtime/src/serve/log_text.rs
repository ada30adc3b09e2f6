//! Client text as a log line may carry it ([`log_text`], [`field_list`]):
//! escaped, so a field name holding a newline cannot forge a line of the
//! access log or an escape sequence drive the operator's terminal, and
//! bounded, so one request cannot write a line of hundreds of kilobytes
//! (60,000 unknown keys did).

/// Longest piece of client text one log field shows, in characters
/// (before escaping); longer text is cut and marked.
pub const MAX_LOGGED_CHARS: usize = 64;

/// Most unknown field names one request's warning line names; the rest
/// are counted.
pub const MAX_LOGGED_FIELDS: usize = 16;

/// `s` with control characters, quotes, backslashes and invisible Unicode
/// escaped as Rust writes them (`\n`, `\u{1b}`, `\u{202e}`), cut after
/// `max_chars` characters with `…` and the length it had.
pub fn log_text(s: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for (n, c) in s.chars().enumerate() {
        if n == max_chars {
            out.push_str(&format!("…({} chars)", s.chars().count()));
            return out;
        }
        out.extend(c.escape_debug());
    }
    out
}

/// Field names for one log line: at most [`MAX_LOGGED_FIELDS`], each
/// through [`log_text`], and how many more there were.
pub fn field_list(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(MAX_LOGGED_FIELDS).map(|n| log_text(n, MAX_LOGGED_CHARS)).collect();
    let mut out = shown.join(", ");
    if names.len() > MAX_LOGGED_FIELDS {
        out.push_str(&format!(" and {} more", names.len() - MAX_LOGGED_FIELDS));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_name_with_a_newline_cannot_forge_a_log_line_and_sixty_thousand_are_counted_not_listed() {
        let forged = "x\n2026-12-07T00:00:00Z  INFO draftwise::access: request client=10.0.0.1 status=200\u{1b}[2J";
        let line = field_list(&[forged.to_string()]);
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line}");
        assert!(line.starts_with("x\\n2026-12-07"), "{line}");
        let many: Vec<String> = (0..60_000).map(|i| format!("k{i}")).collect();
        let line = field_list(&many);
        assert!(line.len() < 1024, "{} bytes", line.len());
        assert!(line.ends_with(" and 59984 more"), "{line}");
        let long = "a".repeat(100_000);
        let line = field_list(&[long]);
        assert!(line.len() < 100 && line.ends_with("…(100000 chars)"), "{line}");
    }
}
