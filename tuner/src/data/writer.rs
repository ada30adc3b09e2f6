//! [`RawWriter`]: raw.jsonl appended one line at a time, each written
//! whole (flushed and synced) and under the record's path names
//! ([`crate::data::path_names`]), and [`drop_partial_tail`] for a resumed
//! sweep. Apart from the format ([`crate::data::raw`]) so the names and the
//! lines they rename do not import each other.
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::data::path_names::PathNames;
use crate::data::raw::{RawError, RawLine};

/// Appends lines to raw.jsonl, flushing and syncing the data after each one,
/// so an interruption leaves every written line whole.
pub struct RawWriter {
    path: PathBuf,
    file: std::fs::File,
    /// The names every line's paths are written under (none: as they are).
    names: PathNames,
}

impl RawWriter {
    /// Opens for appending (creating it if needed).
    pub fn open(path: &Path) -> Result<Self, RawError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| RawError::Io { path: path.to_path_buf(), source })?;
        Ok(RawWriter { path: path.to_path_buf(), file, names: Default::default() })
    }

    /// Writes every later line's paths under `names` (no absolute path of
    /// this machine in the record: [`crate::data::path_names`]).
    pub fn with_names(mut self, names: PathNames) -> Self {
        self.names = names;
        self
    }

    pub fn write(&mut self, line: &RawLine) -> Result<(), RawError> {
        let io = |source| RawError::Io { path: self.path.clone(), source };
        let line = self.names.apply(line);
        let mut s = serde_json::to_string(&line).map_err(|e| io(std::io::Error::other(e)))?;
        s.push('\n');
        self.file.write_all(s.as_bytes()).map_err(io)?;
        self.file.flush().map_err(io)?;
        self.file.sync_data().map_err(io)
    }
}

/// Cuts a partial last line (no newline) off the end of the file, so
/// appending starts on a fresh line. Returns the bytes removed.
pub fn drop_partial_tail(path: &Path) -> Result<usize, RawError> {
    let io = |source| RawError::Io { path: path.to_path_buf(), source };
    let bytes = crate::data::bounded::read_capped(path, crate::data::raw::MAX_RAW_BYTES).map_err(|e| match e {
        crate::data::bounded::BoundedError::Io(e) => io(e),
        crate::data::bounded::BoundedError::TooBig { .. } => RawError::TooBig { path: path.to_path_buf() },
    })?;
    if bytes.is_empty() || bytes.last() == Some(&b'\n') {
        return Ok(0);
    }
    let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let f = std::fs::OpenOptions::new().write(true).open(path).map_err(io)?;
    f.set_len(keep as u64).map_err(io)?;
    Ok(bytes.len() - keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_a_partial_tail_keeps_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("raw.jsonl");
        std::fs::write(&p, "a\nb\n{\"kind\":\"req").unwrap();
        assert_eq!(drop_partial_tail(&p).unwrap(), 12);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a\nb\n");
        assert_eq!(drop_partial_tail(&p).unwrap(), 0);
    }
}
