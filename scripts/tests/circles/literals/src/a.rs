//! A char literal quote, a raw string holding a quote and an escaped quote
//! before a real import.
pub const QUOTE: char = '"';
pub const RAW: &str = r#"a raw string with " a quote"#;
pub const ESCAPED: &str = "an \"escaped\" quote and a brace {";

use crate::b::Thing;

pub fn f<'a>(x: &'a Thing) -> &'a Thing {
    /* a block /* nested " */ comment */
    x
}
pub const MESSAGE: &str = "m";
