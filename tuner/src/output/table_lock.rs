//! One writer of the policy table at a time ([`TableLock`]): `tuner
//! propose` reads the table, edits its key's entry and renames the result
//! over it, so two runs at once would each write the table they read and
//! the later rename would drop the earlier run's entry. A run holds the
//! lock from reading the table to the rename.
//!
//! The lock is `flock(2)` on `<table>.lock` beside the table: the kernel
//! releases it when its holder exits, however it exits, so a killed run
//! leaves no stale lock to clear by hand. The holder removes the file when
//! done; a waiter that locked a file already removed (its path now names
//! another file, or none) locks again.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a run waits for another run's write before refusing: a
/// proposal holds the lock for the seconds it takes to pool the key's
/// records and write the table; a minute covers a queue of several.
pub const LOCK_WAIT: Duration = Duration::from_secs(120);

/// Between tries while another run holds the lock.
const RETRY: Duration = Duration::from_millis(20);

/// An exclusive lock on the policy table, released on drop.
#[derive(Debug)]
pub struct TableLock {
    path: PathBuf,
    _file: File,
}

/// The lock file of `table`.
pub fn lock_path(table: &Path) -> PathBuf {
    let mut name = table.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    table.with_file_name(name)
}

impl TableLock {
    /// Takes the lock of `table`, waiting at most `wait` for another
    /// holder; still held then, a `WouldBlock` error saying what to do. The
    /// errors are about the lock file ([`lock_path`]).
    pub fn acquire(table: &Path, wait: Duration) -> std::io::Result<TableLock> {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::io::AsRawFd;
        let path = lock_path(table);
        let start = Instant::now();
        loop {
            let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
            // SAFETY: `file` owns an open descriptor for the whole call.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                // Locked: but a holder that finished may have removed this
                // file after it was opened; the lock counts only if the
                // path still names the file locked.
                let held = file.metadata()?;
                match std::fs::metadata(&path) {
                    Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                        return Ok(TableLock { path, _file: file });
                    }
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(e);
            }
            if start.elapsed() >= wait {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    format!(
                        "another `tuner propose` has held the table's lock for over {} s; wait for it to finish (the \
                         lock goes when its process exits) and run this again",
                        wait.as_secs()
                    ),
                ));
            }
            std::thread::sleep(RETRY);
        }
    }
}

impl Drop for TableLock {
    fn drop(&mut self) {
        // Removed while still locked, so no waiter can lock it and then
        // lose it to this removal (a waiter re-checks the path, above).
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes `text` over `table` through a temporary file of this process's
/// own name beside it and a rename (a reader sees the old table or the
/// new, never part of one). The caller holds the [`TableLock`].
pub fn write_table(_lock: &TableLock, table: &Path, text: &str) -> std::io::Result<()> {
    let mut name = table.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp.{}", std::process::id()));
    let tmp = table.with_file_name(name);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, table).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_and_then_is_refused_with_how_to_proceed() {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("t.toml");
        let first = TableLock::acquire(&table, LOCK_WAIT).unwrap();
        assert!(lock_path(&table).exists());
        let e = TableLock::acquire(&table, Duration::from_millis(100)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
        assert!(e.to_string().contains("run this again"), "{e}");
        drop(first);
        assert!(!lock_path(&table).exists(), "the holder removes the lock file");
        let again = TableLock::acquire(&table, Duration::from_millis(100)).unwrap();
        write_table(&again, &table, "x = 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&table).unwrap(), "x = 1\n");
    }

    #[test]
    fn threads_that_each_read_edit_and_write_under_the_lock_lose_nothing() {
        // 8 writers appending one line each to a file by read, edit, rename:
        // without the lock, writers that read the same text drop each other's line.
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("t.toml");
        std::fs::write(&table, "").unwrap();
        std::thread::scope(|s| {
            for i in 0..8 {
                let table = &table;
                s.spawn(move || {
                    let lock = TableLock::acquire(table, LOCK_WAIT).unwrap();
                    let old = std::fs::read_to_string(table).unwrap();
                    std::thread::sleep(Duration::from_millis(30));
                    write_table(&lock, table, &format!("{old}line {i}\n")).unwrap();
                });
            }
        });
        let text = std::fs::read_to_string(&table).unwrap();
        assert_eq!(text.lines().count(), 8, "{text}");
    }
}
