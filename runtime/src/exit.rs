//! How a command's failure reaches the user: its error printed as one
//! line with each cause once, and the exit status of a runtime error.

/// The exit status of a runtime error (clap's usage errors exit 2).
pub const EXIT_RUNTIME_ERROR: u8 = 1;

/// `e` and its causes joined with `: `, each message once: a cause whose
/// text the message before it already contains (an error that prints its
/// source and also returns it as `source()`) is left out.
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !last.is_empty() && last.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        last = text;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_chain_prints_each_message_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        #[derive(Debug, thiserror::Error)]
        #[error("{0}")]
        struct Wraps(#[source] std::io::Error);
        let e = anyhow::Error::new(Wraps(io)).context("reading x.json");
        assert_eq!(error_chain(&e), "reading x.json: No such file or directory (os error 2)");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_chain(&e), "outer: inner");
    }
}
