//! Imports written only inside strings and comments are not edges.
pub const HELP: &str = "see use crate::b::Thing; \
    and crate::b::g for more";
pub const RAW: &str = r##"crate::b::Thing "# still inside"##;
// use crate::b::Thing;
/* crate::b::g() */
pub struct Here;
