//! Build identity: the commit, dirty flag and compiler baked into the binary,
//! so that `startup` events and records say exactly what was measured.
//!
//! Also the policy: the verify-path fingerprint (a hash per part of the
//! verify path, `policy::fingerprint`) and the draft-width table
//! `policy/draft-block-width.toml`, compiled with the `policy` crate's table
//! compiler (the one the library and `tuner propose` use). A table that does
//! not compile fails the build with a message naming the file, the entry and
//! the problem.
use policy::{fingerprint, table};
use std::path::{Path, PathBuf};
use std::process::Command;

fn cmd(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Stops the build with `msg` (shown as a warning line and on stderr).
fn fail(msg: &str) -> ! {
    for line in msg.lines() {
        println!("cargo:warning={line}");
    }
    eprintln!("error: {msg}");
    std::process::exit(1);
}

fn rerun_if_changed(p: &Path) {
    println!("cargo:rerun-if-changed={}", p.display());
}

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = cmd(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into());
    let commit = cmd("git", &["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = match cmd("git", &["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) => (!s.is_empty()).to_string(),
        None => "unknown".into(),
    };
    println!("cargo:rustc-env=DRAFTWISE_RUSTC_VERSION={rustc_version}");
    println!("cargo:rustc-env=DRAFTWISE_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=DRAFTWISE_GIT_DIRTY={dirty}");
    println!("cargo:rustc-env=DRAFTWISE_BUILD_PROFILE={}", std::env::var("PROFILE").unwrap_or_default());
    // Rebuild the identity when HEAD moves or the index changes.
    for p in ["../.git/HEAD", "../.git/index"] {
        if std::path::Path::new(p).exists() {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");

    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest.parent().expect("runtime/ sits in the workspace root").to_path_buf();

    // The verify-path fingerprint: each part hashed here, combined by the
    // library per key. A folder given to rerun-if-changed is scanned
    // recursively, so added and removed files count too.
    let mut hashes = Vec::with_capacity(fingerprint::VERIFY_PATH.len());
    for p in fingerprint::VERIFY_PATH {
        let full = root.join(p.path.trim_end_matches('/'));
        if full.exists() {
            rerun_if_changed(&full);
        }
        let h = fingerprint::part_hash(&root, p.path)
            .unwrap_or_else(|e| fail(&format!("verify-path fingerprint, hashing {}: {e}", p.path)));
        hashes.push(h);
    }
    let refs: Vec<&str> = hashes.iter().map(String::as_str).collect();
    let fp = fingerprint::combine(&refs, |_| true);
    println!("cargo:rustc-env=DRAFTWISE_KERNEL_FINGERPRINT={fp}");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let listing: Vec<String> = hashes.iter().map(|h| format!("{h:?}")).collect();
    std::fs::write(out.join("verify_path_hashes.rs"), format!("[{}]\n", listing.join(", ")))
        .unwrap_or_else(|e| fail(&format!("writing the part hashes to {}: {e}", out.display())));

    // The policy table. Its records must exist, so records/ is watched too.
    let policy_dir = root.join("policy");
    let table_path = root.join("policy/draft-block-width.toml");
    rerun_if_changed(&policy_dir);
    let records = root.join("records");
    if records.exists() {
        rerun_if_changed(&records);
    }
    let file = "policy/draft-block-width.toml";
    let text = std::fs::read_to_string(&table_path)
        .unwrap_or_else(|e| fail(&format!("{file}: cannot read {}: {e}", table_path.display())));
    let compiled =
        table::compile(file, &text, table::RecordCheck::Under(&root)).unwrap_or_else(|e| fail(&e.to_string()));
    // Stale entries: a warning for each of this host's class; the other
    // classes' only counted, in the build script's log (`cargo build -vv`),
    // since no build here runs them (`runtime policy explain` names each).
    let host = policy::HostClass::this_host();
    let with_fps = compiled.entries.iter().map(|e| {
        (e, fingerprint::combine(&refs, |p| fingerprint::applies(p, e.key.device.as_str(), Some(&e.weight_formats))))
    });
    let report = table::stale_report(file, with_fps, host.as_ref().map_err(String::as_str));
    for w in &report.warnings {
        println!("cargo:warning={w}");
    }
    if let Some(q) = &report.quiet {
        eprintln!("{q}");
    }
    std::fs::write(out.join("draft-block-width.toml"), &text)
        .unwrap_or_else(|e| fail(&format!("writing the validated table to {}: {e}", out.display())));
}
