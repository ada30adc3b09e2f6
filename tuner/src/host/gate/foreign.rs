//! Foreign model processes: another draftwise `runtime`, a known inference
//! engine, or a python process with a GGUF or safetensors file open or
//! mapped. Any of these competes for memory bandwidth and cores even when its
//! CPU share looks idle at the instant sampled, so it is a reason to wait.
//!
//! The matcher ([`classify`]) is a pure function of one process entry and its
//! file list, tested on fixture process lists.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::process::ProcessEntry;
use super::verdict::{Check, Source, Status, unknown_reason};
use crate::host::reading::Reading;

/// Executables of known engines (basename or 15-byte `comm`).
/// llama.cpp's tools are all `llama-*` and matched by prefix besides.
const ENGINE_NAMES: &[(&str, &str)] = &[
    ("ollama", "ollama"),
    ("ollama_llama_server", "ollama"),
    ("vllm", "vLLM"),
    ("sglang", "SGLang"),
    ("text-generation-launcher", "text-generation-inference"),
    ("text-generation-server", "text-generation-inference"),
    ("text-generation-router", "text-generation-inference"),
];

/// Legacy llama.cpp binary names: only a match with a `.gguf` argument.
const LEGACY_LLAMA_NAMES: &[&str] = &["main", "server", "llama"];

/// Python modules/scripts of engines that run under a python interpreter.
const PYTHON_ENGINE_MODULES: &[(&str, &str)] =
    &[("vllm", "vLLM"), ("sglang", "SGLang"), ("text_generation_server", "text-generation-inference")];

const MODEL_SUFFIXES: &[&str] = &[".gguf", ".safetensors"];

#[derive(Clone, Debug)]
pub struct ForeignInput {
    /// The process list, or why it could not be read.
    pub processes: Result<Vec<ProcessEntry>, String>,
    /// Open and mapped files of the processes [`needs_file_scan`] picked.
    pub files: BTreeMap<u32, Result<Vec<String>, String>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForeignProcess {
    pub pid: u32,
    pub name: String,
    pub exe: Option<String>,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnreadableFiles {
    pub pid: u32,
    pub name: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForeignReading {
    pub n_processes: usize,
    /// Python processes whose open and mapped files were inspected.
    pub n_files_scanned: usize,
    pub found: Vec<ForeignProcess>,
    /// Python processes whose files could not be listed (e.g. permission
    /// denied on `/proc/PID/fd` when not root): each could hold a model.
    pub files_unreadable: Vec<UnreadableFiles>,
}

/// What the matcher concluded about one process.
#[derive(Clone, Debug, PartialEq)]
pub enum Match {
    Foreign(String),
    /// Might be a model process, but its files could not be read.
    Unreadable(String),
    No,
}

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// The names a process goes by: `comm`, the executable's and argv[0]'s basenames.
fn names(p: &ProcessEntry) -> Vec<&str> {
    let mut v = vec![p.name.as_str()];
    v.extend(p.exe.as_deref().map(|e| basename(e.trim_end_matches(" (deleted)"))));
    v.extend(p.cmdline.first().map(|a| basename(a)));
    v
}

/// `comm` is the executable name cut to 15 bytes (TASK_COMM_LEN - 1).
fn name_is(name: &str, wanted: &str) -> bool {
    name == wanted || (name.len() == 15 && wanted.len() > 15 && wanted.starts_with(name))
}

fn is_python(p: &ProcessEntry) -> bool {
    names(p).iter().any(|n| n.starts_with("python") || n.starts_with("pypy"))
}

fn is_model_path(s: &str) -> bool {
    let s = s.trim_end_matches(" (deleted)").to_ascii_lowercase();
    MODEL_SUFFIXES.iter().any(|suf| s.ends_with(suf))
}

/// Whether the live collector should list this process's open and mapped
/// files (only python: reading every process's fds would be slow and would
/// flag editors and file managers).
pub fn needs_file_scan(p: &ProcessEntry) -> bool {
    is_python(p)
}

/// Classifies one process. `files` is its open/mapped file list when it was
/// scanned (see [`needs_file_scan`]).
pub fn classify(p: &ProcessEntry, files: Option<&Result<Vec<String>, String>>) -> Match {
    let names = names(p);
    for n in &names {
        if n.starts_with("llama-") {
            return Match::Foreign(format!("llama.cpp binary `{n}`"));
        }
        if let Some((_, engine)) = ENGINE_NAMES.iter().find(|(w, _)| name_is(n, w)) {
            return Match::Foreign(format!("{engine} (`{n}`)"));
        }
        if name_is(n, "runtime") {
            return Match::Foreign(format!("another draftwise runtime (`{n}`) not started by this tuner"));
        }
    }
    let gguf_arg = p.cmdline.iter().skip(1).find(|a| a.to_ascii_lowercase().ends_with(".gguf"));
    if let Some(arg) = gguf_arg
        && names.iter().any(|n| LEGACY_LLAMA_NAMES.contains(n))
    {
        return Match::Foreign(format!("llama.cpp `{}` with model {arg}", p.name));
    }
    if !is_python(p) {
        return Match::No;
    }
    for a in p.cmdline.iter().skip(1) {
        let b = basename(a);
        if let Some((m, engine)) =
            PYTHON_ENGINE_MODULES.iter().find(|(m, _)| b == *m || b.starts_with(&format!("{m}.")))
        {
            return Match::Foreign(format!("{engine} under python (argument `{a}` names `{m}`)"));
        }
    }
    if let Some(arg) = p.cmdline.iter().skip(1).find(|a| is_model_path(a)) {
        return Match::Foreign(format!("python with a model file argument {arg}"));
    }
    match files {
        Some(Ok(files)) => match files.iter().find(|f| is_model_path(f)) {
            Some(f) => Match::Foreign(format!("python with model file {f} open or mapped")),
            None => Match::No,
        },
        Some(Err(why)) => Match::Unreadable(why.clone()),
        None => Match::Unreadable("its open files were not inspected".into()),
    }
}

pub fn evaluate(input: &ForeignInput, excluded: &BTreeSet<u32>) -> Check<ForeignReading> {
    let procs = match &input.processes {
        Ok(p) => p,
        Err(why) => return Check::unknown(Source::Foreign, why.clone()),
    };
    let mut found = Vec::new();
    let mut files_unreadable = Vec::new();
    for p in procs.iter().filter(|p| !excluded.contains(&p.pid)) {
        match classify(p, input.files.get(&p.pid)) {
            Match::Foreign(why) => {
                found.push(ForeignProcess { pid: p.pid, name: p.name.clone(), exe: p.exe.clone(), why })
            }
            Match::Unreadable(reason) => {
                files_unreadable.push(UnreadableFiles { pid: p.pid, name: p.name.clone(), reason })
            }
            Match::No => {}
        }
    }
    let mut reasons: Vec<String> = found
        .iter()
        .map(|f| {
            format!("foreign: pid {} ({}) is a model process: {}; stop it or wait for it to exit", f.pid, f.name, f.why)
        })
        .collect();
    let status = if !reasons.is_empty() {
        Status::Wait
    } else if !files_unreadable.is_empty() {
        Status::Unknown
    } else {
        Status::Pass
    };
    if !files_unreadable.is_empty() {
        let list: Vec<String> =
            files_unreadable.iter().map(|u| format!("pid {} ({}): {}", u.pid, u.name, u.reason)).collect();
        reasons.push(unknown_reason(
            Source::Foreign,
            &format!("cannot list open files of python processes [{}] (run as root?)", list.join("; ")),
        ));
    }
    let reading = ForeignReading {
        n_processes: procs.len(),
        n_files_scanned: input.files.values().filter(|f| f.is_ok()).count(),
        found,
        files_unreadable,
    };
    Check { status, reasons, reading: Reading::ok(reading) }
}

#[cfg(test)]
mod tests {
    use super::super::process::entry;
    use super::*;

    fn with_exe(mut e: ProcessEntry, exe: &str) -> ProcessEntry {
        e.exe = Some(exe.to_string());
        e
    }

    fn is_foreign(m: Match) -> bool {
        matches!(m, Match::Foreign(_))
    }

    /// (process, its file list if scanned, whether it is a model process).
    type Case = (ProcessEntry, Option<Result<Vec<String>, String>>, bool);

    /// A host's process list: what each entry must classify as.
    fn fixture_list() -> Vec<Case> {
        vec![
            (
                with_exe(
                    entry(100, 1, "llama-server", &["./llama-server", "-m", "q.gguf"], 0.0),
                    "/opt/llama.cpp/build/bin/llama-server",
                ),
                None,
                true,
            ),
            (entry(101, 1, "llama-speculati", &["llama-speculative-simple"], 0.0), None, true),
            (entry(102, 1, "main", &["./main", "-m", "/m/llama-7b.Q4_0.gguf"], 0.0), None, true),
            (entry(103, 1, "main", &["./main", "--port", "80"], 0.0), None, false),
            (
                with_exe(entry(104, 1, "ollama", &["/usr/local/bin/ollama", "serve"], 0.0), "/usr/local/bin/ollama"),
                None,
                true,
            ),
            (
                entry(105, 1, "python3", &["python3", "-m", "vllm.entrypoints.openai.api_server"], 0.0),
                Some(Ok(vec![])),
                true,
            ),
            (
                entry(106, 1, "python3", &["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "x"], 0.0),
                Some(Ok(vec![])),
                true,
            ),
            (entry(107, 1, "python3.11", &["python3.11", "-m", "sglang.launch_server"], 0.0), Some(Ok(vec![])), true),
            (entry(108, 1, "text-generation", &["text-generation-launcher", "--model-id", "x"], 0.0), None, true),
            (
                entry(109, 1, "python", &["python", "train.py"], 0.0),
                Some(Ok(vec!["/data/w/model-00001-of-00002.safetensors".into()])),
                true,
            ),
            (
                entry(110, 1, "python", &["python", "notebook.py"], 0.0),
                Some(Ok(vec!["/usr/lib/libc.so.6".into(), "/tmp/notes.txt".into()])),
                false,
            ),
            (
                with_exe(
                    entry(111, 1, "runtime", &["runtime", "serve"], 0.0),
                    "/home/u/draftwise/target/release/runtime",
                ),
                None,
                true,
            ),
            (entry(112, 1, "bash", &["bash", "-c", "echo NV_ERR_NO_MEMORY model.gguf"], 0.0), None, false),
            (entry(113, 1, "vim", &["vim", "notes-about-llama-server.txt"], 0.0), None, false),
            (entry(114, 1, "cat", &["cat", "w.safetensors"], 0.0), None, false),
            (entry(115, 1, "python3", &["python3", "convert.py", "out.GGUF"], 0.0), Some(Ok(vec![])), true),
        ]
    }

    #[test]
    fn the_matcher_flags_engines_runtimes_and_python_with_models_and_nothing_else() {
        for (p, files, want) in fixture_list() {
            let m = classify(&p, files.as_ref());
            assert_eq!(is_foreign(m.clone()), want, "pid {} {:?} {:?} -> {m:?}", p.pid, p.name, p.cmdline);
        }
    }

    #[test]
    fn a_python_process_with_unreadable_files_is_unknown_and_others_are_still_checked() {
        let procs = vec![
            entry(200, 1, "python3", &["python3", "app.py"], 0.0),
            entry(201, 1, "python3", &["python3", "ok.py"], 0.0),
        ];
        let files = BTreeMap::from([
            (200, Err("/proc/200/fd: Permission denied (os error 13)".to_string())),
            (201, Ok(vec!["/tmp/x".to_string()])),
        ]);
        let input = ForeignInput { processes: Ok(procs), files };
        let c = evaluate(&input, &BTreeSet::new());
        assert_eq!(c.status, Status::Unknown);
        let r = c.reading.value.unwrap();
        assert_eq!(r.files_unreadable.len(), 1);
        assert_eq!(r.files_unreadable[0].pid, 200);
        assert_eq!(r.n_files_scanned, 1);
        assert!(c.reasons[0].contains("--accept-unknown foreign"));
    }

    #[test]
    fn an_unreadable_process_list_is_unknown() {
        let input = ForeignInput { processes: Err("sysinfo: /proc unreadable".into()), files: BTreeMap::new() };
        let c = evaluate(&input, &BTreeSet::new());
        assert_eq!(c.status, Status::Unknown);
    }

    #[test]
    fn our_own_runtime_child_is_not_foreign_but_another_one_is() {
        let procs = vec![
            entry(300, 1, "tuner", &["tuner", "sweep"], 0.0),
            entry(301, 300, "runtime", &["runtime", "--json"], 0.0),
            entry(302, 1, "runtime", &["runtime", "serve"], 0.0),
        ];
        let excluded = super::super::process::descendants_of(&procs, &[300]);
        let c = evaluate(&ForeignInput { processes: Ok(procs), files: BTreeMap::new() }, &excluded);
        assert_eq!(c.status, Status::Wait);
        let found = c.reading.value.unwrap().found;
        assert_eq!(found.iter().map(|f| f.pid).collect::<Vec<_>>(), vec![302]);
    }
}
