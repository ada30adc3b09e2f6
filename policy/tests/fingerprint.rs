//! The verify-path fingerprint: every source file placed, parts hashed, keys staled.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The test that keeps the verify path honest: every source file of the
/// kernels and the runtime is placed on it or off it, once, with a reason;
/// a new file fails here until it is placed.
#[test]
fn every_source_file_is_on_the_verify_path_or_off_it_and_none_is_both() {
    use policy::fingerprint::{OFF_PATH, VERIFY_PATH, covers, source_files};
    let root = workspace();
    let files = source_files(&root).unwrap();
    assert!(files.len() > 40, "{files:?}");
    let mut unplaced = Vec::new();
    for f in &files {
        let on: Vec<&str> = VERIFY_PATH.iter().map(|p| p.path).filter(|p| covers(p, f)).collect();
        let off: Vec<&str> = OFF_PATH.iter().map(|(p, _)| *p).filter(|p| covers(p, f)).collect();
        match (on.len(), off.len()) {
            (1, 0) | (0, 1) => {}
            (0, 0) => unplaced.push(f.clone()),
            _ => panic!("{f} is placed more than once: on {on:?}, off {off:?}"),
        }
    }
    assert!(unplaced.is_empty(), "not placed on the verify path or off it (policy/src/fingerprint.rs): {unplaced:?}");
    // Every listed path exists and says why it is there.
    for p in VERIFY_PATH {
        assert!(files.iter().any(|f| covers(p.path, f)), "{} is listed but has no files", p.path);
        assert!(!p.why.is_empty(), "{}", p.path);
    }
    for (p, why) in OFF_PATH {
        assert!(files.iter().any(|f| covers(p, f)), "{p} is listed but has no files");
        assert!(!why.is_empty(), "{p}");
    }
    // The forward pass, the pool and the speculative loop are on the path.
    for f in [
        "runtime/src/model/forward.rs",
        "runtime/src/pool.rs",
        "runtime/src/speculative/decode.rs",
        "kernels/src/ops/softmax.rs",
    ] {
        assert!(VERIFY_PATH.iter().any(|p| covers(p.path, f)), "{f}");
    }
}

/// A part's hash moves with any byte of its files, ignores CRLF, and a
/// folder part counts added files.
#[test]
fn a_part_hash_moves_with_its_bytes() {
    use policy::fingerprint::part_hash;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("k/src")).unwrap();
    std::fs::write(dir.path().join("k/src/a.rs"), "const ROWS: usize = 4;\n").unwrap();
    let a = part_hash(dir.path(), "k/src/").unwrap();
    std::fs::write(dir.path().join("k/src/a.rs"), "const ROWS: usize = 8;\n").unwrap();
    let b = part_hash(dir.path(), "k/src/").unwrap();
    std::fs::write(dir.path().join("k/src/a.rs"), "const ROWS: usize = 8;\r\n").unwrap();
    let c = part_hash(dir.path(), "k/src/").unwrap();
    assert_ne!(a, b);
    assert_eq!(b, c);
    std::fs::write(dir.path().join("k/src/b.cu"), "__global__ void k() {}\n").unwrap();
    assert_ne!(part_hash(dir.path(), "k/src/").unwrap(), b);
    assert_eq!(part_hash(dir.path(), "k/src/a.rs").unwrap(), part_hash(dir.path(), "k/src/a.rs").unwrap());
    assert_ne!(part_hash(dir.path(), "missing.rs").unwrap(), part_hash(dir.path(), "k/src/a.rs").unwrap());
}

/// Per key: a change to a part moves exactly the keys it applies to.
#[test]
fn a_changed_part_stales_only_the_keys_it_applies_to() {
    use policy::fingerprint::{VERIFY_PATH, combine};
    let index = |path: &str| VERIFY_PATH.iter().position(|p| p.path == path).unwrap();
    let base: Vec<String> = (0..VERIFY_PATH.len()).map(|i| format!("{i:016x}")).collect();
    let key = |hashes: &[String], device: &str, f: &[&str]| {
        let refs: Vec<&str> = hashes.iter().map(String::as_str).collect();
        let f: Vec<String> = f.iter().map(|s| s.to_string()).collect();
        combine(&refs, |p| policy::fingerprint::applies(p, device, Some(&f)))
    };
    let changed = |path: &str| {
        let mut h = base.clone();
        h[index(path)] = "ffffffffffffffff".into();
        h
    };
    let cpu = "cpu:x86_64-avx512vnni";
    let q4_1 = ["q4_1", "q8_0"];
    let k_quants = ["q4_k", "q6_k"];
    // The K-quant kernels: a Q4_1 target stays fresh, a Q4_K one goes stale.
    let h = changed("kernels/src/matvec/x86/interleaved_k.rs");
    assert_eq!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_ne!(key(&h, cpu, &k_quants), key(&base, cpu, &k_quants));
    // The Q4 / Q8 kernels: the other way round.
    let h = changed("kernels/src/matvec/x86/interleaved_q4_q8.rs");
    assert_ne!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_eq!(key(&h, cpu, &k_quants), key(&base, cpu, &k_quants));
    // The Q5 kernels: Q4_1 and K-quant targets stay fresh, a Q5_0 one goes
    // stale.
    let q5_0 = ["q5_0", "q8_0"];
    let h = changed("kernels/src/matvec/x86/interleaved_q5.rs");
    assert_eq!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_eq!(key(&h, cpu, &k_quants), key(&base, cpu, &k_quants));
    assert_ne!(key(&h, cpu, &q5_0), key(&base, cpu, &q5_0));
    // The Q2_K / Q3_K kernels and the 16-bit float ones: only targets with
    // those formats go stale.
    let (q3_k, f16) = (["q3_k", "q6_k"], ["f16"]);
    let h = changed("kernels/src/matvec/x86/q2k_q3k.rs");
    assert_eq!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_eq!(key(&h, cpu, &f16), key(&base, cpu, &f16));
    assert_ne!(key(&h, cpu, &q3_k), key(&base, cpu, &q3_k));
    let h = changed("kernels/src/matvec/x86/half.rs");
    assert_eq!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_eq!(key(&h, cpu, &q3_k), key(&base, cpu, &q3_k));
    assert_ne!(key(&h, cpu, &f16), key(&base, cpu, &f16));
    // The CUDA launcher: CPU keys stay fresh, CUDA keys go stale.
    let h = changed("kernels/src/cuda/");
    assert_eq!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_ne!(key(&h, "cuda:sm_90", &q4_1), key(&base, "cuda:sm_90", &q4_1));
    // The forward pass and the speculative loop: every key.
    for shared in ["runtime/src/model/forward.rs", "runtime/src/speculative/decode.rs", "runtime/src/pool.rs"] {
        let h = changed(shared);
        for (d, f) in [(cpu, &q4_1[..]), (cpu, &k_quants[..]), ("cuda:sm_90", &q4_1[..])] {
            assert_ne!(key(&h, d, f), key(&base, d, f), "{shared} on {d} {f:?}");
        }
    }
    // Unknown formats: every format's parts count.
    let refs: Vec<&str> = base.iter().map(String::as_str).collect();
    let all = combine(&refs, |p| policy::fingerprint::applies(p, cpu, None));
    assert_ne!(all, key(&base, cpu, &q4_1));
}
