//! A backslash-continued message before a real import: the line end inside
//! the string must not end it (the old regex stripper did not match across
//! it, flipped the quote parity and erased `use crate::b` as string text).
pub const MESSAGE: &str = "a long refusal, \
    continued on the next line";

use crate::b::Thing;

pub fn f<'a>(x: &'a Thing) -> &'a str {
    /* a block /* nested */ comment */
    let _ = x;
    "a later string"
}
