//! Build identity: the commit, dirty flag and compiler baked into the binary,
//! so that `startup` events and records say exactly what was measured.
use std::process::Command;

fn cmd(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
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
}
