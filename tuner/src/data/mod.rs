//! What a sweep writes and reads back: the design and arm plan ([`plan`]),
//! a bounded reader of regular files only ([`bounded`]),
//! `raw.jsonl`'s lines and reader ([`raw`]) and writer ([`writer`]), the
//! names a record gives paths ([`path_names`]), the verify-cost types
//! ([`verify_cost`]), a streamed completion ([`streamed`]) and the
//! committed acceptance profiles ([`profile`]). Types and
//! their checks only: no process runs here and no decision is made.
pub mod bounded;
pub mod path_names;
pub mod plan;
pub mod profile;
pub mod raw;
pub mod streamed;
pub mod verify_cost;
pub mod writer;
