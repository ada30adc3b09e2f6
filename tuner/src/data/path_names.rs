//! Paths as a record names them, and back: a record is read on other
//! machines, so raw.jsonl names no absolute path of the machine that made
//! it ([`PathNames`], applied by [`crate::data::writer::RawWriter`] to every line it
//! writes), and `tuner sweep --resume` finds the files again ([`resolve`]).
//!
//! The names (docs/records.md, "Paths in a record"):
//! - a file under the repository (the first folder above the record holding
//!   `policy/draft-block-width.toml` or `.git`; without one, the folder
//!   above the record) is named relative to it: `target/release/runtime`,
//!   `records/<folder>/prompts.jsonl`;
//! - a model outside it by its file name alone (the identity gives its
//!   sha256, which `--resume` checks): `SmolLM2-135M-Instruct.Q4_1.gguf`;
//! - anything else under the home folder as `~/...`, and the rest by its
//!   file name;
//! - inside other values (an arm's arguments and environment), a known
//!   file's absolute path by its name, the repository's by `.` and the home
//!   folder's by `~`.
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::data::raw::{RawLine, SweepHeader};

/// The repository a record lives in, if any: the nearest ancestor of `dir`
/// with `policy/draft-block-width.toml` or `.git`.
pub fn repo_root(dir: &Path) -> Option<PathBuf> {
    let dir = std::fs::canonicalize(dir).ok()?;
    dir.ancestors()
        .find(|a| a.join("policy").join("draft-block-width.toml").is_file() || a.join(".git").exists())
        .map(Path::to_path_buf)
}

/// The folder a record's relative names are relative to.
fn base_of(dir: &Path) -> PathBuf {
    repo_root(dir).unwrap_or_else(|| {
        let d = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        d.parent().map_or(d.clone(), Path::to_path_buf)
    })
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute() && h != Path::new("/"))
}

fn slash(p: &Path) -> String {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// How a record names one path (see the module's rules); `model` names a
/// file outside the repository by its file name even under the home folder.
pub fn name_of(p: &Path, base: &Path, model: bool) -> String {
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if !real.is_absolute() {
        return slash(&real);
    }
    if let Ok(rel) = real.strip_prefix(base) {
        return slash(rel);
    }
    if model {
        return file_name(&real);
    }
    match home().and_then(|h| real.strip_prefix(&h).ok().map(slash)) {
        Some(rel) => format!("~/{rel}"),
        None => file_name(&real),
    }
}

/// Every absolute path a sweep's lines may carry, each with its name.
#[derive(Clone, Debug, Default)]
pub struct PathNames {
    /// `(absolute, name)`, longest absolute first.
    pairs: Vec<(String, String)>,
}

impl PathNames {
    /// Names from `(absolute, name)` pairs (longest absolute first, as every
    /// constructor keeps them).
    pub fn from_pairs(mut pairs: Vec<(String, String)>) -> PathNames {
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        pairs.dedup();
        PathNames { pairs }
    }

    /// The names of a sweep's files, from its settings with real paths.
    pub fn for_sweep(dir: &Path, h: &SweepHeader) -> PathNames {
        let base = base_of(dir);
        let s = &h.settings;
        let mut pairs = Vec::new();
        let mut add = |p: &Path, model: bool| {
            let name = name_of(p, &base, model);
            for form in [p.to_path_buf(), std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())] {
                if form.is_absolute() {
                    pairs.push((form.display().to_string(), name.clone()));
                }
            }
        };
        add(&s.target, true);
        if let Some(m) = &s.drafter_model {
            add(m, true);
        }
        add(&s.prompts, false);
        add(&s.runtime, false);
        if let Some(p) = h.identity.rustc_on_path.path.value.as_ref() {
            add(Path::new(p), false);
        }
        // Any other path under the repository or the home folder (an
        // environment variable's value, say), by its place there.
        pairs.push((base.display().to_string(), ".".into()));
        if let Some(h) = home() {
            pairs.push((h.display().to_string(), "~".into()));
        }
        PathNames::from_pairs(pairs)
    }

    /// The name of `p`: a known path's name, else `p` with a known path
    /// that prefixes it replaced (`/abs/runtime --model /abs/m.gguf` in one
    /// argument), else `p` unchanged.
    pub fn name(&self, p: &str) -> String {
        if let Some((_, n)) = self.pairs.iter().find(|(a, _)| a == p) {
            return n.clone();
        }
        let mut out = p.to_string();
        for (a, n) in &self.pairs {
            if out.contains(a.as_str()) {
                out = out.replace(a.as_str(), n);
            }
        }
        out
    }

    /// Names every string in `v`. A value of the runtime's `startup` event
    /// that is still an absolute path after that names a file the settings
    /// do not know (the CUDA kernel cache's image, under
    /// `DRAFTWISE_CUDA_CACHE`): it is named by its file name.
    fn name_strings(&self, v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => {
                let n = self.name(s);
                *s = if n.starts_with('/') && !n.contains(char::is_whitespace) { file_name(Path::new(&n)) } else { n };
            }
            serde_json::Value::Array(xs) => xs.iter_mut().for_each(|x| self.name_strings(x)),
            serde_json::Value::Object(m) => m.values_mut().for_each(|x| self.name_strings(x)),
            _ => {}
        }
    }

    /// These names and the absolute paths among `env`'s values that exist
    /// here (an arm's environment: `DRAFTWISE_CUDA_CACHE`, say), each named
    /// by the module's rules; for the logs, which carry whatever the
    /// runtime prints.
    pub fn with_env(mut self, dir: &Path, env: &BTreeMap<String, String>) -> PathNames {
        let base = base_of(dir);
        for v in env.values() {
            let p = Path::new(v);
            if p.is_absolute() && p.exists() && !self.pairs.iter().any(|(a, _)| a == v) {
                self.pairs.push((v.clone(), name_of(p, &base, false)));
            }
        }
        PathNames::from_pairs(self.pairs)
    }

    /// A log's text (a line of the runtime's stdout or stderr) as the
    /// record keeps it: every known absolute path that stands whole in it
    /// (not inside a longer name or path) by its name; and in the runtime's
    /// `startup` event, a JSON string that is still an absolute path by its
    /// file name, as [`PathNames::apply`] names that event in raw.jsonl.
    pub fn name_log(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (a, n) in &self.pairs {
            out = replace_whole(&out, a, n);
        }
        if out.starts_with(r#"{"event":"startup""#) { name_absolute_json_strings(&out) } else { out }
    }

    fn path(&self, p: &Path) -> PathBuf {
        PathBuf::from(self.name(&p.display().to_string()))
    }

    /// The line as the record writes it.
    pub fn apply(&self, line: &RawLine) -> RawLine {
        let mut l = line.clone();
        if self.pairs.is_empty() {
            return l;
        }
        match &mut l {
            RawLine::Sweep(h) => {
                let s = &mut h.settings;
                s.target = self.path(&s.target);
                s.drafter_model = s.drafter_model.as_deref().map(|p| self.path(p));
                s.prompts = self.path(&s.prompts);
                s.runtime = self.path(&s.runtime);
                h.identity.runtime.path = self.name(&h.identity.runtime.path);
                for m in &mut h.identity.models {
                    m.path = self.name(&m.path);
                }
                if let Some(p) = h.identity.rustc_on_path.path.value.as_mut() {
                    *p = self.name(p);
                }
            }
            RawLine::ArmStart(a) => {
                for x in a.argv.iter_mut().chain(a.env.values_mut()) {
                    *x = self.name(x);
                }
            }
            RawLine::Cost(c) => {
                for x in &mut c.argv {
                    *x = self.name(x);
                }
            }
            RawLine::Startup(st) => {
                // The runtime's event names files in more than one place
                // (the target's path, the file that declared its
                // quantization): every string in it is named.
                st.startup.target.path = self.path(&st.startup.target.path);
                if let Ok(mut v) = serde_json::to_value(&st.startup) {
                    self.name_strings(&mut v);
                    if let Ok(named) = serde_json::from_value(v) {
                        st.startup = named;
                    }
                }
            }
            _ => {}
        }
        l
    }
}

/// A byte that can continue a file name or path (so a match ending or
/// starting beside one is part of a longer name).
fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'~')
}

/// `text` with each occurrence of the absolute path `abs` that stands whole
/// (not preceded by a name byte or `/`, not followed by a name byte) replaced
/// by `name`: `/root` names `/root/x` but not `/rootfs` or `/a/root`.
fn replace_whole(text: &str, abs: &str, name: &str) -> String {
    if abs.is_empty() || !text.contains(abs) {
        return text.to_string();
    }
    let (t, a) = (text.as_bytes(), abs.as_bytes());
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut copied = 0;
    while let Some(k) = text[i..].find(abs) {
        let at = i + k;
        let end = at + a.len();
        let before_ok = at == 0 || !(name_byte(t[at - 1]) || t[at - 1] == b'/');
        let after_ok = end == t.len() || !name_byte(t[end]);
        if before_ok && after_ok {
            out.push_str(&text[copied..at]);
            out.push_str(name);
            copied = end;
            i = end;
        } else {
            // `abs` starts with '/', so the next match starts past `at`.
            i = at + 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// Every JSON string literal of `line` whose content is an absolute path
/// (starts with `/`, no whitespace, no escape) replaced by its file name.
fn name_absolute_json_strings(line: &str) -> String {
    let b = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut copied = 0;
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'"' && b[i + 1] == b'/' && (i == 0 || b[i - 1] != b'\\') {
            let start = i + 1;
            let Some(len) = line[start..].find('"') else { break };
            let content = &line[start..start + len];
            if !content.contains(|c: char| c.is_whitespace() || c == '\\') {
                out.push_str(&line[copied..start]);
                out.push_str(&file_name(Path::new(content)));
                copied = start + len;
            }
            i = start + len + 1;
        } else {
            i += 1;
        }
    }
    out.push_str(&line[copied..]);
    out
}

/// A header read from raw.jsonl with its files found again on this machine,
/// for `--resume`: the prompt set is the record's copy; the runtime and
/// models are found relative to the repository, a model named by its file
/// name also in the runtime's model cache, and each model's sha256 must be
/// the identity's.
pub fn resolve(dir: &Path, h: &SweepHeader) -> Result<SweepHeader> {
    let base = base_of(dir);
    let mut out = h.clone();
    let s = &mut out.settings;
    if s.prompts.is_relative() {
        s.prompts = std::fs::canonicalize(dir.join("prompts.jsonl"))
            .with_context(|| format!("{}: the record's prompt copy is missing", dir.display()))?;
    }
    if s.runtime.is_relative() {
        let here = base.join(&s.runtime);
        s.runtime = if here.is_file() {
            here
        } else {
            crate::host::identity::default_runtime_path().map_err(anyhow::Error::msg)?
        };
    }
    let mut models: Vec<&mut PathBuf> = vec![&mut s.target];
    if let Some(m) = s.drafter_model.as_mut() {
        models.push(m);
    }
    for (i, p) in models.into_iter().enumerate() {
        if p.is_absolute() {
            continue;
        }
        let named = p.display().to_string();
        let mut tried = vec![base.join(&*p)];
        if p.components().count() == 1
            && let Ok(cache) = runtime::fetch::default_cache_dir()
        {
            tried.push(cache.join(&*p));
        }
        let Some(found) = tried.iter().find(|c| c.exists()).cloned() else {
            let list: Vec<String> = tried.iter().map(|c| c.display().to_string()).collect();
            bail!(
                "the record's model {named} is not at {}; put it there (the identity gives its sha256)",
                list.join(" or ")
            );
        };
        if let Some(want) = h.identity.models.get(i).and_then(|m| m.sha256.value.as_ref())
            && found.is_file()
        {
            let got = crate::host::identity::sha256_file(&found).map_err(|e| anyhow::anyhow!("{e}"))?;
            if &got != want {
                bail!(
                    "{} has sha256 {got}, but the record's model {named} has {want}: it is another file",
                    found.display()
                );
            }
        }
        *p = found;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_relative_to_the_repository_or_file_names() {
        let repo = tempfile::tempdir().unwrap();
        let root = repo.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("policy")).unwrap();
        std::fs::write(root.join("policy/draft-block-width.toml"), "").unwrap();
        let rec = root.join("records/2026-12-03-x");
        std::fs::create_dir_all(&rec).unwrap();
        std::fs::create_dir_all(root.join("target/release")).unwrap();
        std::fs::write(root.join("target/release/runtime"), "").unwrap();
        assert_eq!(repo_root(&rec).as_deref(), Some(root.as_path()));
        let base = base_of(&rec);
        assert_eq!(name_of(&root.join("target/release/runtime"), &base, false), "target/release/runtime");
        assert_eq!(name_of(&rec.join("prompts.jsonl"), &base, false), "records/2026-12-03-x/prompts.jsonl");
        let outside = tempfile::tempdir().unwrap();
        let m = outside.path().join("m.gguf");
        std::fs::write(&m, "x").unwrap();
        assert_eq!(name_of(&m, &base, true), "m.gguf");
        let n = PathNames { pairs: vec![(m.display().to_string(), "m.gguf".into())] };
        assert_eq!(n.name(&m.display().to_string()), "m.gguf");
        assert_eq!(n.name(&format!("--model={}", m.display())), "--model=m.gguf");
        assert_eq!(n.name("--threads"), "--threads");
        // The first GPU records (2026-12-04) named the kernel cache's image
        // by its absolute path in every startup line: a file the settings do
        // not know is named by its file name there.
        let mut v = serde_json::json!({"cuda": {"kernel_cache": "/tmp/dc/kc/c30b-sm_90.cubin", "name": "NVIDIA H200"},
                                       "target": {"path": m.display().to_string()}});
        n.name_strings(&mut v);
        assert_eq!(v["cuda"]["kernel_cache"], "c30b-sm_90.cubin");
        assert_eq!(v["cuda"]["name"], "NVIDIA H200");
        assert_eq!(v["target"]["path"], "m.gguf");
    }

    #[test]
    fn a_log_names_whole_paths_only_and_a_startup_line_every_absolute_string() {
        let n = PathNames::from_pairs(vec![
            ("/home/u/.cache/draftwise/m.gguf".into(), "m.gguf".into()),
            ("/home/u/repo".into(), ".".into()),
            ("/home/u".into(), "~".into()),
        ]);
        // The longest known path first; the home folder for the rest of it.
        assert_eq!(
            n.name_log("INFO runtime::open: loading model=/home/u/.cache/draftwise/m.gguf\n"),
            "INFO runtime::open: loading model=m.gguf\n"
        );
        assert_eq!(n.name_log("wrote /home/u/repo/records/x/p.jsonl"), "wrote ./records/x/p.jsonl");
        assert_eq!(n.name_log("cache /home/u/.cache/other.bin"), "cache ~/.cache/other.bin");
        // Not inside a longer name or path.
        assert_eq!(n.name_log("/home/user2/x /srv/home/u/y /home/u"), "/home/user2/x /srv/home/u/y ~");
        assert_eq!(n.name_log("8.1 tok/s, no path"), "8.1 tok/s, no path");
        // The startup event: a string still absolute after the known names
        // (a file the settings do not know) by its file name, as raw.jsonl
        // names it; an escaped quote or a space leaves a string alone.
        let line = r#"{"event":"startup","target":{"path":"/home/u/.cache/draftwise/m.gguf"},"cuda":{"kernel_cache":"/tmp/dc/kc/a-sm_90.cubin","note":"/x y"}}"#;
        assert_eq!(
            n.name_log(line),
            r#"{"event":"startup","target":{"path":"m.gguf"},"cuda":{"kernel_cache":"a-sm_90.cubin","note":"/x y"}}"#
        );
        // Other events keep their strings (a completion's text is evidence).
        let c = r#"{"event":"completion","text":"see /etc/hosts"}"#;
        assert_eq!(n.name_log(c), c);
        assert_eq!(name_absolute_json_strings(r#"{"a":"x \"/not/this\" y"}"#), r#"{"a":"x \"/not/this\" y"}"#);
    }

    /// Where a machine keeps the files a sweep runs (`/root/.cache/...`,
    /// `/home/<user>/...`, a scratch `/tmp/...`): a log naming a path under
    /// one names the machine that made it.
    const MACHINE_ROOTS: &[&str] =
        &["/root/", "/home/", "/tmp/", "/work/", "/Users/", "/mnt/", "/srv/", "/var/", "/opt/"];

    /// The machine paths in `text` (up to `max`), each as its first 80 bytes.
    fn machine_paths(text: &str, max: usize) -> Vec<String> {
        let b = text.as_bytes();
        let mut found = Vec::new();
        for root in MACHINE_ROOTS {
            let mut i = 0;
            while let Some(k) = text[i..].find(root) {
                let at = i + k;
                if at == 0 || !(name_byte(b[at - 1]) || b[at - 1] == b'/') {
                    let end = (at + 80).min(text.len());
                    let end = (end..=text.len()).find(|&e| text.is_char_boundary(e)).unwrap_or(text.len());
                    found.push(text[at..end].to_string());
                    if found.len() >= max {
                        return found;
                    }
                }
                i = at + 1;
            }
        }
        found
    }

    #[test]
    fn committed_logs_name_no_path_of_the_machine_that_made_them() {
        assert_eq!(machine_paths("loading model=/root/.cache/draftwise/m.gguf", 5).len(), 1);
        assert!(machine_paths("8.1 tok/s; a/tmp/b; ./records/x", 5).is_empty());
        let records = Path::new(env!("CARGO_MANIFEST_DIR")).join("../records");
        let mut logs = 0;
        let mut bad = Vec::new();
        for rec in std::fs::read_dir(&records).unwrap().flatten() {
            let Ok(files) = std::fs::read_dir(rec.path().join("logs")) else { continue };
            for f in files.flatten() {
                let bytes = std::fs::read(f.path()).unwrap();
                logs += 1;
                // A completion's text is the model's (code can name /tmp).
                let text = String::from_utf8_lossy(&bytes);
                for line in text.lines().filter(|l| !l.starts_with(r#"{"event":"completion""#)) {
                    for p in machine_paths(line, 1) {
                        bad.push(format!("{}: {p}", f.path().strip_prefix(&records).unwrap_or(&f.path()).display()));
                    }
                }
            }
        }
        assert!(logs > 0, "no committed logs under {}", records.display());
        bad.truncate(10);
        assert!(bad.is_empty(), "logs naming a machine path (scripts/name-log-paths.py):\n{}", bad.join("\n"));
    }

    #[test]
    fn an_arms_environment_adds_the_paths_it_names() {
        let d = tempfile::tempdir().unwrap();
        let kc = d.path().canonicalize().unwrap().join("kc");
        std::fs::create_dir_all(&kc).unwrap();
        let env: BTreeMap<String, String> = [
            ("DRAFTWISE_CUDA_CACHE".to_string(), kc.display().to_string()),
            ("LANG".to_string(), "C.UTF-8".to_string()),
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ]
        .into();
        let n = PathNames::default().with_env(d.path(), &env);
        let text = format!("{}/c30b-sm_90.cubin", kc.display());
        let named = n.name_log(&text);
        assert!(!named.contains(&d.path().canonicalize().unwrap().display().to_string()), "{named}");
        assert!(named.ends_with("kc/c30b-sm_90.cubin") || named == "c30b-sm_90.cubin", "{named}");
        // PATH is a list, not a path here: left as it is.
        assert_eq!(n.name_log("/usr/bin:/bin"), "/usr/bin:/bin");
    }
}
