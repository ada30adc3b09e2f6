//! Acceptance profiles on disk (issue 54; the format and the replay are
//! [`policy::profile`], the making [`crate::sweep::profile`]): committed
//! under [`PROFILES_DIR`], found again by what they depend on (the
//! target's and the prompt set's sha256, the drafter and its settings, the
//! token limit).
use std::path::Path;

use anyhow::{Context, Result, bail};
use policy::profile::{MAX_LOOKAHEAD, MAX_PROFILE_BYTES, Profile, ProfileHeader};
use policy::{DrafterKind, DrafterSettings};

/// The committed profiles' folder, relative to the repository root.
pub const PROFILES_DIR: &str = "profiles";
/// Proposals recorded per position: the widest draft a replay may ask for.
/// The lookups cost nothing, so the policy's widest width; a model
/// drafter pays a forward step per token, so the widths sweeps try.
pub const LOOKAHEAD_LOOKUP: usize = MAX_LOOKAHEAD;
pub const LOOKAHEAD_MODEL: usize = 8;
/// Profile files looked through when finding one, at most.
pub const MAX_PROFILE_FILES: usize = 1024;

/// What a profile must match to stand for a measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted {
    pub model_sha256: String,
    pub drafter: DrafterKind,
    pub settings: DrafterSettings,
    pub prompts_sha256: String,
    pub max_tokens: usize,
}

impl Wanted {
    pub fn of(h: &ProfileHeader) -> Option<Wanted> {
        Some(Wanted {
            model_sha256: h.model.sha256.clone(),
            drafter: h.drafter.parse().ok()?,
            settings: h.drafter_settings.clone(),
            prompts_sha256: h.prompts.sha256.clone(),
            max_tokens: h.max_tokens,
        })
    }

    pub fn describe(&self) -> String {
        format!(
            "{} ({}) on the model {}…, prompts {}…, {} tokens a request",
            self.drafter,
            self.settings.describe(),
            &self.model_sha256[..self.model_sha256.len().min(12)],
            &self.prompts_sha256[..self.prompts_sha256.len().min(12)],
            self.max_tokens
        )
    }
}

/// The prompt set as an entry and a profile name it: the repository path
/// the tuner compiled in, or a given file's name (never a path of this
/// machine). `source` is a record's `prompts_source` or a path as given.
pub fn entry_prompts_name(source: &str) -> String {
    let path = source.strip_suffix(" (compiled into the tuner)").unwrap_or(source);
    if Path::new(path).is_absolute() {
        Path::new(path).file_name().map_or_else(|| "prompts".to_string(), |n| n.to_string_lossy().into_owned())
    } else {
        path.to_string()
    }
}

/// The profile's file name: the model's stem, the drafter and its settings,
/// the prompt set's stem and the token limit, e.g.
/// `SmolLM2-135M-Instruct.Q4_1-ngram-3-4-sweep-48.jsonl`.
pub fn file_name(h: &ProfileHeader) -> String {
    let stem = |s: &str| {
        let base = s.rsplit('/').next().unwrap_or(s);
        base.strip_suffix(".gguf").or_else(|| base.strip_suffix(".jsonl")).unwrap_or(base).to_string()
    };
    let s = &h.drafter_settings;
    let mut settings = Vec::new();
    for v in [s.ngram_min, s.ngram_max, s.suffix_min_match, s.suffix_max_match].into_iter().flatten() {
        settings.push(v.to_string());
    }
    if let Some(p) = s.suffix_min_prob {
        settings.push(format!("p{}", p.0));
    }
    if let Some(l) = &s.layers {
        settings.push(format!("l{}", l.len()));
    }
    if let Some(m) = &h.drafter_model {
        settings.push(stem(&m.file));
    }
    let settings = if settings.is_empty() { String::new() } else { format!("-{}", settings.join("-")) };
    let name =
        format!("{}-{}{settings}-{}-{}.jsonl", stem(&h.model.file), h.drafter, stem(&h.prompts.name), h.max_tokens);
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect()
}

/// Reads and checks one profile file (size-capped, regular files only).
pub fn read(path: &Path) -> Result<Profile> {
    let text = crate::data::bounded::read_capped(path, MAX_PROFILE_BYTES as u64)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let text = String::from_utf8(text).map_err(|_| anyhow::anyhow!("{}: not UTF-8", path.display()))?;
    policy::profile::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The committed profile under `root/profiles` that matches `want`, with
/// its path relative to `root`. Profiles that do not read are named in the
/// error when none matches (never skipped silently).
pub fn find(root: &Path, want: &Wanted) -> Result<(String, Profile)> {
    let dir = root.join(PROFILES_DIR);
    let mut names: Vec<String> = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let n = e.file_name().to_string_lossy().into_owned();
        if n.ends_with(".jsonl") {
            names.push(n);
        }
        if names.len() > MAX_PROFILE_FILES {
            bail!("{} holds more than {MAX_PROFILE_FILES} profiles", dir.display());
        }
    }
    names.sort();
    let mut unread = Vec::new();
    for n in names {
        match read(&dir.join(&n)) {
            Ok(p) if Wanted::of(&p.header).as_ref() == Some(want) => return Ok((format!("{PROFILES_DIR}/{n}"), p)),
            Ok(_) => {}
            Err(e) => unread.push(format!("{n}: {e:#}")),
        }
    }
    let also = if unread.is_empty() { String::new() } else { format!(" (unreadable: {})", unread.join("; ")) };
    bail!(
        "no profile under {PROFILES_DIR}/ for {}{also}: make it with `tuner profile` (it decodes; no timing)",
        want.describe()
    )
}

/// sha256 of a profile's bytes as committed (what an entry names).
pub fn sha256_of(path: &Path) -> Result<String> {
    crate::host::identity::sha256_file(path).map_err(|e| anyhow::anyhow!("{e}"))
}
