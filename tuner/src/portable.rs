//! Paths as a record names them, and back: a record is read on other
//! machines, so raw.jsonl names no absolute path of the machine that made
//! it ([`PathNames`], applied by [`crate::raw::RawWriter`] to every line it
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
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::raw::{RawLine, SweepHeader};

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
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        pairs.dedup();
        PathNames { pairs }
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
        s.runtime =
            if here.is_file() { here } else { crate::identity::default_runtime_path().map_err(anyhow::Error::msg)? };
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
            let got = crate::identity::sha256_file(&found).map_err(|e| anyhow::anyhow!("{e}"))?;
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
}
