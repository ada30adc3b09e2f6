//! `tuner profile`: a prompt set's acceptance profile
//! ([`policy::profile`], [`crate::data::profile`]), made in this process:
//! the target (and a draft model) loaded through the runtime's library,
//! every prompt decoded classic and greedy, the drafter asked at every
//! point of the output. Nothing is timed, so any host and any load will do.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use policy::profile::{ModelRef, PROFILE_KIND, PROFILE_SCHEMA, Profile, ProfileHeader, PromptRef};
use policy::{DrafterKind, DrafterSettings};

use crate::data::profile::{LOOKAHEAD_LOOKUP, LOOKAHEAD_MODEL};

/// What `tuner profile` is asked to make.
#[derive(Clone, Debug)]
pub struct ProfileRequest {
    pub target: PathBuf,
    pub drafter: DrafterKind,
    pub settings: DrafterSettings,
    pub drafter_model: Option<PathBuf>,
    /// The prompt set's bytes and its name as an entry writes it.
    pub prompts_text: String,
    pub prompts_name: String,
    pub max_tokens: usize,
    pub threads: usize,
}

/// Makes the profile: loads the target (and a draft model), decodes every
/// prompt classic and greedy, and asks the drafter at every point.
/// `progress` hears each prompt's trace as it is made.
pub fn make(req: &ProfileRequest, progress: &mut dyn FnMut(usize, usize, &policy::profile::Trace)) -> Result<Profile> {
    req.settings.check(req.drafter).map_err(|e| anyhow::anyhow!("{} drafter settings: {e}", req.drafter))?;
    if !(1..=policy::profile::MAX_TRACE_POSITIONS).contains(&req.max_tokens) {
        bail!("--max-tokens {} is not 1..={}", req.max_tokens, policy::profile::MAX_TRACE_POSITIONS);
    }
    let model_sha = crate::host::identity::sha256_file(&req.target).map_err(|e| anyhow::anyhow!("{e}"))?;
    let file_name = |p: &Path| p.file_name().map_or_else(|| "model".to_string(), |n| n.to_string_lossy().into_owned());
    let drafter_model = match &req.drafter_model {
        Some(p) => Some(ModelRef {
            file: file_name(p),
            sha256: crate::host::identity::sha256_file(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        }),
        None => None,
    };
    let loaded = runtime::model::load(&req.target).with_context(|| format!("loading {}", req.target.display()))?;
    let family = kernels::dispatch::KernelFamily::best();
    let engine = runtime::engine::Engine::new(loaded, family, req.threads)?;
    let args = runtime::speculative::setup::SpeculationSettings {
        drafter_model: req.drafter_model.clone(),
        ..Default::default()
    };
    let mut drafter = runtime::speculative::setup::build_drafter_with(req.drafter, &req.settings, &args, &engine)?;
    let draft_cost = drafter.step_cost(&engine.loaded.model);
    let lookahead = match req.drafter {
        DrafterKind::Ngram | DrafterKind::Suffix => LOOKAHEAD_LOOKUP,
        _ => LOOKAHEAD_MODEL,
    };
    let items = runtime::prompts::parse_prompts(&req.prompts_text, Path::new(&req.prompts_name))?;
    let mut traces = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        let ids = it.encode(&engine.loaded.tokenizer)?;
        let t = runtime::profile::trace(&engine, drafter.as_mut(), it, &ids, req.max_tokens, lookahead)?;
        progress(i, items.len(), &t);
        traces.push(t);
    }
    let header = ProfileHeader {
        kind: PROFILE_KIND.into(),
        schema: PROFILE_SCHEMA,
        model: ModelRef { file: file_name(&req.target), sha256: model_sha },
        drafter: req.drafter.as_str().into(),
        drafter_settings: req.settings.clone(),
        drafter_model,
        draft_cost: (draft_cost * 1e6).round() / 1e6,
        prompts: PromptRef {
            name: req.prompts_name.clone(),
            sha256: runtime::events::sha256_hex(req.prompts_text.as_bytes()),
        },
        max_tokens: req.max_tokens,
        lookahead,
        made_by: {
            let b = runtime::build_info::BuildInfo::current();
            format!("runtime {} ({}, {})", b.version, b.git_commit, b.git_dirty.as_str())
        },
    };
    let p = Profile { header, traces };
    // What is written must read back: the same checks a reader runs.
    policy::profile::parse(&p.to_text()).map_err(|e| anyhow::anyhow!("the profile made does not check: {e}"))?;
    Ok(p)
}

/// The request that makes the profile a sweep record's arms decoded: its
/// model (found by file name in the model cache and checked against the
/// record's sha256), drafter, settings, draft model, prompt set (the
/// record's copy, checked against its sha256) and token limit.
pub fn request_for_record(dir: &Path, threads: usize) -> Result<ProfileRequest> {
    let raw = crate::data::raw::read_raw(&dir.join("raw.jsonl"))?;
    let s = crate::analysis::summarize::summarize_with(&raw, false)?;
    let set = &raw.header.settings;
    let cache = runtime::fetch::default_cache_dir()?;
    let in_cache = |p: &Path| -> Result<PathBuf> {
        let name = p.file_name().ok_or_else(|| anyhow::anyhow!("{}: no file name", p.display()))?;
        Ok(cache.join(name))
    };
    let target = in_cache(&set.target)?;
    let Some((_, want_sha)) = &s.model_file else {
        bail!("{}: the record names no sha256 of its target", dir.display());
    };
    let got = crate::host::identity::sha256_file(&target).map_err(|e| anyhow::anyhow!("{e}"))?;
    if &got != want_sha {
        bail!("{}: sha256 {got}, the record measured {want_sha}", target.display());
    }
    let drafter_model = match &set.drafter_model {
        Some(p) => Some(in_cache(p)?),
        None => None,
    };
    let prompts_path = dir.join("prompts.jsonl");
    let prompts_text = runtime::limits::read_prompt_file(&prompts_path)?;
    if runtime::events::sha256_hex(prompts_text.as_bytes()) != set.prompts_sha256 {
        bail!("{}: its sha256 is not the record's prompts_sha256", prompts_path.display());
    }
    let Some(settings) = set.drafter_settings.clone() else {
        bail!("{}: the record is older than recorded drafter settings", dir.display());
    };
    Ok(ProfileRequest {
        target,
        drafter: set.drafter,
        settings,
        drafter_model,
        prompts_text,
        prompts_name: crate::data::profile::entry_prompts_name(&set.prompts_source),
        max_tokens: set.design.max_tokens,
        threads,
    })
}
