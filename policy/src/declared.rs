//! Resolution step 2's finding: a width the drafter checkpoint declares in
//! its own config (the runtime reads the checkpoint; which file and field
//! depend on the kind, `DrafterKind::declaration_source`).

use crate::width::Width;
use serde::Serialize;

/// What step 2 found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Declared {
    /// The checkpoint declares this width; `evidence` names file and field.
    Width { width: Width, evidence: String },
    /// Nothing declared, and why (no checkpoint for this kind, none given,
    /// no such field, unreadable config, out of range).
    Absent { why: String },
}

impl Declared {
    pub fn absent(why: impl Into<String>) -> Self {
        Declared::Absent { why: why.into() }
    }
}
