//! The kernel fingerprint: a hash over what decides the cost of a verify
//! block, so a policy entry measured with other kernels is recognized as
//! stale instead of being trusted.
//!
//! What is hashed: every file under `kernels/src/` (the SIMD and scalar
//! kernels, and the multi-row dispatch table that lives beside them in
//! `kernels/src/matvec/`) and every file under `kernels/cuda/` when that
//! directory exists, in sorted path order, each as its relative path, a NUL,
//! its length and its bytes (CRLF read as LF, so a Windows checkout hashes
//! like a Unix one). What is not: the compiler, target-cpu flags and the
//! runtime's own code (the record states the toolchain; the runtime's
//! decode loop does not change what a verify block costs).
//!
//! `build.rs` computes it (this file depends on std and sha2 only) and the
//! library exposes it as `policy::KERNEL_FINGERPRINT`.

use sha2::{Digest, Sha256};
use std::io;
use std::path::{Path, PathBuf};

/// The subdirectories of the kernels crate that are hashed.
pub const HASHED_DIRS: [&str; 2] = ["src", "cuda"];

/// Files under `dir` (recursively), as paths relative to `base` with `/`.
fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let ty = entry.file_type()?;
        if ty.is_dir() {
            walk(base, &path, out)?;
        } else if ty.is_file() {
            let rel = path.strip_prefix(base).unwrap_or(&path);
            let rel: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            out.push((rel.join("/"), path));
        }
    }
    Ok(())
}

/// The files the fingerprint covers, sorted by relative path.
pub fn hashed_files(kernels_dir: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut files = Vec::new();
    for d in HASHED_DIRS {
        let dir = kernels_dir.join(d);
        if dir.is_dir() {
            walk(kernels_dir, &dir, &mut files)?;
        }
    }
    files.sort();
    Ok(files)
}

/// The fingerprint of the kernels crate at `kernels_dir`: the first 16 hex
/// digits of the sha256 described in the module docs.
pub fn kernel_fingerprint(kernels_dir: &Path) -> io::Result<String> {
    let files = hashed_files(kernels_dir)?;
    if files.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no kernel sources under {}", kernels_dir.join("src").display()),
        ));
    }
    let mut h = Sha256::new();
    for (rel, path) in &files {
        let bytes = std::fs::read(path)?;
        let bytes = crlf_to_lf(&bytes);
        h.update(rel.as_bytes());
        h.update([0u8]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    let digest = h.finalize();
    Ok(digest.iter().take(8).map(|b| format!("{b:02x}")).collect())
}

fn crlf_to_lf(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    for (i, &c) in b.iter().enumerate() {
        if c == b'\r' && b.get(i + 1) == Some(&b'\n') {
            continue;
        }
        out.push(c);
    }
    out
}
