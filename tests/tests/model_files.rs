//! The real `runtime` binary against crafted model files that are cheap to
//! write and were once costly to load: each is refused with a message
//! naming the file, quickly and with peak memory in proportion to what the
//! runtime keeps, not to what the file declares.
//!
//! The peak resident memory read here is the largest of every child this
//! test binary has waited for (`getrusage(RUSAGE_CHILDREN)`), and Linux
//! counts a child's memory from before its `exec` too (this test process's
//! own, up to ~150 MB while the tests write their files in parallel). So
//! the bound, [`PEAK_RSS_BOUND_KIB`], sits between that and what loading
//! each file cost before it was refused early (512 MB to ~1 GB).

use draftwise_tests::bin;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// What every child may peak at (see the module's note).
const PEAK_RSS_BOUND_KIB: u64 = 300 * 1024;

/// Peak resident memory of the waited-for children, in KiB.
fn children_peak_rss_kib() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    assert_eq!(rc, 0);
    u.ru_maxrss as u64
}

/// A copy of the tiny Qwen 2 checkpoint (Hugging Face form) to alter.
fn tiny_checkpoint() -> tempfile::TempDir {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/data/tiny/qwen2-hf");
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    dir
}

/// Runs `runtime generate` on `model`, which must be refused (exit 1)
/// within 20 s with a message holding each of `says`, at a peak resident
/// memory under [`PEAK_RSS_BOUND_KIB`].
fn assert_refused_cheaply(model: &Path, says: &[&str]) {
    let t0 = Instant::now();
    let out = Command::new(bin("runtime"))
        .args(["generate", "--max-tokens", "1", "--prompt", "hi", "--model"])
        .arg(model)
        .env("DRAFTWISE_LOG", "warn")
        .output()
        .unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for s in says {
        assert!(err.contains(s), "missing {s:?}: {err}");
    }
    assert!(took < Duration::from_secs(20), "{took:?}");
    let peak = children_peak_rss_kib();
    eprintln!("{}: refused in {took:?}, peak RSS {peak} KiB (any child of this binary)", model.display());
    assert!(peak < PEAK_RSS_BOUND_KIB, "peak RSS {peak} KiB");
}

#[test]
fn a_tokenizer_json_with_a_vocabulary_past_the_bound_is_refused_before_it_is_built() {
    use std::io::Write;
    // A tokenizer.json of 2 M vocabulary entries (44 MB): built by the
    // tokenizers crate before the vocabulary check, a 120 MB one took 25 s
    // and 2.63 GB.
    let dir = tiny_checkpoint();
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.path().join("tokenizer.json")).unwrap());
    write!(f, "{{\"version\":\"1.0\",\"added_tokens\":[],\"model\":{{\"type\":\"BPE\",\"vocab\":{{").unwrap();
    for i in 0..(2u32 << 20) {
        write!(f, "{}\"tok{i:09}\":{i}", if i == 0 { "" } else { "," }).unwrap();
    }
    write!(f, "}},\"merges\":[]}}}}").unwrap();
    f.flush().unwrap();
    drop(f);
    assert_refused_cheaply(dir.path(), &["tokenizer.json", "more than the 1048576 this runtime loads"]);
}

#[test]
fn a_safetensors_header_of_many_zero_size_tensors_is_refused_before_it_is_parsed() {
    use std::io::Write;
    // A model.safetensors whose header names 400,000 zero-size tensors
    // (20 MB): parsed whole, a header takes about 1.2 KiB per tensor (1.36 M
    // of them took 1.69 GB).
    let dir = tiny_checkpoint();
    let mut header = String::from("{");
    for i in 0..400_000 {
        header.push_str(&format!(
            "{}\"t{i}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
            if i == 0 { "" } else { "," }
        ));
    }
    header.push('}');
    let mut f = std::fs::File::create(dir.path().join("model.safetensors")).unwrap();
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    drop((f, header));
    assert_refused_cheaply(dir.path(), &["model.safetensors", "names 400000 tensors, more than the 65536"]);
}

#[test]
fn a_gguf_of_large_metadata_arrays_nobody_reads_is_refused_before_it_is_parsed() {
    use std::io::Write;
    // A GGUF whose metadata is one array of 16 M F32s (64 MB, sparse on
    // disk): the reader keeps 32 bytes per element, 512 MB, for the life
    // of the model (a 203 MB file of such arrays held 1.78 GB in `serve`).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arrays.gguf");
    let mut f = std::fs::File::create(&path).unwrap();
    let n: u64 = 16 << 20;
    let string = |s: &str| [(s.len() as u64).to_le_bytes().to_vec(), s.as_bytes().to_vec()].concat();
    let mut head = b"GGUF".to_vec();
    head.extend(3u32.to_le_bytes()); // version
    head.extend(0u64.to_le_bytes()); // tensors
    head.extend(2u64.to_le_bytes()); // key-value pairs
    head.extend(string("general.architecture"));
    head.extend(8u32.to_le_bytes()); // STRING
    head.extend(string("llama"));
    head.extend(string("x.unused.scores"));
    head.extend(9u32.to_le_bytes()); // ARRAY
    head.extend(6u32.to_le_bytes()); // of F32
    head.extend(n.to_le_bytes());
    f.write_all(&head).unwrap();
    f.set_len(head.len() as u64 + 4 * n).unwrap();
    drop(f);
    assert_refused_cheaply(&path, &["arrays.gguf", "x.unused.scores", "more than 65536"]);
}

#[test]
fn a_sharded_checkpoint_is_loaded_holding_one_shards_header_at_a_time() {
    use std::io::Write;
    // Four shards, each a header of 48 MB (a __metadata__ of 4,000 entries,
    // under the precheck's bound, with 12 kB values) and one tensor: held
    // together, the parsed headers peaked at about 4 x 2 x 48 MB; one at a
    // time, at one header's parse. The checkpoint's own tensors are absent,
    // so the load is refused after the headers, naming the first missing.
    let dir = tiny_checkpoint();
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let value = "v".repeat(12_000);
    let mut weight_map = serde_json::Map::new();
    for i in 0..4 {
        let name = format!("s{i}.safetensors");
        let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"");
        for j in 0..4_000 {
            header.push_str(&format!(",\"k{j}\":\"{value}\""));
        }
        header.push_str(&format!("}},\"t{i}\":{{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}}}"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.path().join(&name)).unwrap());
        f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
        f.write_all(header.as_bytes()).unwrap();
        f.write_all(&[0; 4]).unwrap();
        f.flush().unwrap();
        weight_map.insert(format!("t{i}"), name.into());
    }
    let index = serde_json::json!({ "weight_map": weight_map }).to_string();
    std::fs::write(dir.path().join("model.safetensors.index.json"), index).unwrap();
    assert_refused_cheaply(dir.path(), &["model.layers.0", "is missing"]);
}
