//! Resolution step 2: a width the drafter checkpoint declares in its own
//! config. Which checkpoint and which field depend on the kind
//! ([`DrafterKind::declaration_source`]):
//!
//! | kind | checkpoint | field |
//! |---|---|---|
//! | `ngram`, `layerskip`, `suffix` | none | — |
//! | `draft-model` | `--drafter-model` | `num_speculative_tokens` (root or `speculative_config`) |
//! | `dflash` | `--drafter-model` | `block_size` (root or `dflash_config`): the block holds the last verified token, so it drafts one token less |
//! | `mtp` | the target | `num_nextn_predict_layers` (root or `text_config`); GGUF `<arch>.nextn_predict_layers` |

use super::quant::read_json_object;
use crate::gguf::GgufFile;
use policy::declared::Declared;
use policy::kind::{DeclarationSource, DrafterKind};
use policy::width::{MAX_WIDTH, Width};
use serde_json::{Map, Value};
use std::path::Path;

/// Reads the declared width for `kind` from the drafter checkpoint or the
/// target, as the kind dictates. Never fails: what is missing is `Absent`.
pub fn read_declared(kind: DrafterKind, drafter_model: Option<&Path>, target: &Path) -> Declared {
    let path = match kind.declaration_source() {
        DeclarationSource::None => return Declared::absent(format!("{kind} has no checkpoint to declare a width")),
        DeclarationSource::DrafterModel => match drafter_model {
            Some(p) => p,
            None => return Declared::absent(format!("no --drafter-model given to read a {kind} declaration from")),
        },
        DeclarationSource::Target => target,
    };
    if path.is_dir() || path.file_name().is_some_and(|n| n == "config.json") {
        let cfg = if path.is_dir() { path.join("config.json") } else { path.to_path_buf() };
        return match read_json_object(&cfg) {
            Ok(m) => from_config(kind, &cfg, &m),
            Err(why) => Declared::absent(why),
        };
    }
    match GgufFile::open(path) {
        Ok(f) => from_gguf(kind, path, &f),
        Err(e) => Declared::absent(format!("{} is unreadable: {e}", path.display())),
    }
}

fn int_at(m: &Map<String, Value>, scopes: &[&str], key: &str) -> Option<(String, i128)> {
    for scope in scopes {
        let obj = if scope.is_empty() { Some(m) } else { m.get(*scope).and_then(Value::as_object) };
        if let Some(v) = obj.and_then(|o| o.get(key)) {
            let field = if scope.is_empty() { key.to_string() } else { format!("{scope}.{key}") };
            return Some((field, v.as_i64().map_or(i128::MIN, i128::from)));
        }
    }
    None
}

fn checked(width: i128, evidence: String) -> Declared {
    match usize::try_from(width).ok().and_then(|w| Width::new(w).ok()) {
        Some(width) => Declared::Width { width, evidence },
        None => Declared::absent(format!("{evidence}: a width of {width} is outside 1..={MAX_WIDTH}, ignored")),
    }
}

/// The declaration in a parsed `config.json`.
pub fn from_config(kind: DrafterKind, path: &Path, m: &Map<String, Value>) -> Declared {
    let (scopes, key): (&[&str], &str) = match kind {
        DrafterKind::Ngram | DrafterKind::Layerskip | DrafterKind::Suffix => {
            return Declared::absent(format!("{kind} has no checkpoint to declare a width"));
        }
        DrafterKind::DraftModel => (&["", "speculative_config"], "num_speculative_tokens"),
        DrafterKind::Dflash => (&["", "dflash_config"], "block_size"),
        DrafterKind::Mtp => (&["", "text_config"], "num_nextn_predict_layers"),
    };
    let Some((field, n)) = int_at(m, scopes, key) else {
        let wheres: Vec<String> =
            scopes.iter().map(|s| if s.is_empty() { key.to_string() } else { format!("{s}.{key}") }).collect();
        return Declared::absent(format!("{} declares no {}", path.display(), wheres.join(" or ")));
    };
    if n == i128::MIN {
        return Declared::absent(format!("{field} in {} is not an integer", path.display()));
    }
    match kind {
        DrafterKind::Dflash => checked(
            n - 1,
            format!(
                "{field} = {n} in {} (a DFlash block is the last verified token plus {} drafts)",
                path.display(),
                n - 1
            ),
        ),
        _ => checked(n, format!("{field} = {n} in {}", path.display())),
    }
}

/// The declaration in GGUF metadata (MTP heads only: llama.cpp writes
/// `<arch>.nextn_predict_layers` for checkpoints that carry them).
pub fn from_gguf(kind: DrafterKind, path: &Path, f: &GgufFile) -> Declared {
    if kind != DrafterKind::Mtp {
        return Declared::absent(format!("GGUF {} declares no {kind} width (no such metadata key)", path.display()));
    }
    let arch = f.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("?");
    let key = format!("{arch}.nextn_predict_layers");
    match f.get(&key).and_then(|v| v.as_int()) {
        Some(n) => checked(n, format!("{key} = {n} in {}", path.display())),
        None => Declared::absent(format!("GGUF {} has no {key}", path.display())),
    }
}
