//! Opening and reading a file the tuner takes as data (raw.jsonl, the
//! ledger, the policy table, a prompt set): only a regular file
//! ([`open_regular`]), and never more than a cap of it ([`read_capped`]).
//!
//! A record's files come from a folder anyone can edit. A symlink to a
//! character device (`/dev/zero`) or a FIFO in their place would hang the
//! open (a FIFO waits for a writer) or the read, or read gigabytes; and
//! `metadata` reports 0 bytes for both, so a cap checked against what the
//! file system reports passes them. Here the type is checked on the open
//! file and the cap on the bytes actually read.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Errors of [`read_capped`] (the caller names the path).
#[derive(Debug, thiserror::Error)]
pub enum BoundedError {
    #[error(transparent)]
    Io(#[from] io::Error),
    /// More than `cap` bytes could be read.
    #[error("more than {cap} bytes")]
    TooBig { cap: u64 },
}

/// What a file type is, in words, for a refusal.
fn kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

fn not_regular(t: std::fs::FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{} (following symlinks), not a regular file: put the file itself here", kind(t)),
    )
}

/// Opens `path` for reading if it is (or a symlink leads to) a regular
/// file; anything else is an `InvalidInput` error saying what it is.
///
/// The type is checked before the open (so a device is never opened) and
/// again on the open file (so a swap between the two is caught). The open
/// does not block: `O_NONBLOCK` makes opening a FIFO return at once instead
/// of waiting for a writer, and reads of a regular file ignore it.
pub fn open_regular(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let t = std::fs::metadata(path)?.file_type();
    if !t.is_file() {
        return Err(not_regular(t));
    }
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        return Err(not_regular(t));
    }
    Ok(f)
}

/// The bytes of the regular file `path` ([`open_regular`]), reading at most
/// `cap` + 1: more than `cap` is [`BoundedError::TooBig`], whatever its
/// metadata says.
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, BoundedError> {
    let f = open_regular(path)?;
    let mut buf = Vec::new();
    f.take(cap.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(BoundedError::TooBig { cap });
    }
    Ok(buf)
}

/// Tests: a FIFO at `path` (no writer ever opens it).
#[cfg(test)]
pub(crate) fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_device_and_a_folder_are_refused_without_blocking_and_a_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let e = open_regular(&fifo).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_capped(&zero, 16).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        assert!(open_regular(dir.path()).unwrap_err().to_string().contains("a directory"));
        let file = dir.path().join("file");
        std::fs::write(&file, b"0123456789").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_capped(&link, 10).unwrap(), b"0123456789");
        assert!(matches!(read_capped(&file, 9), Err(BoundedError::TooBig { cap: 9 })));
    }

    #[test]
    fn the_cap_counts_bytes_read_not_the_size_metadata_reports() {
        // /proc files report a size of 0 and have content: the cap must see it.
        let p = Path::new("/proc/self/status");
        assert_eq!(std::fs::metadata(p).unwrap().len(), 0);
        assert!(matches!(read_capped(p, 8), Err(BoundedError::TooBig { cap: 8 })));
    }
}
