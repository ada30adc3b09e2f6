//! What every command that runs the model does first: find the model
//! (the flag, or the default model fetched into the cache), load it, place
//! it on its device and build the [`Engine`] over it.
//!
//! Principal items: [`open`], [`Opened`], [`resolve_model`].

use crate::device::{CudaReport, DeviceRequest};
use crate::engine::Engine;
use crate::fetch;
use crate::model;
use anyhow::{Context, Result};
use kernels::dispatch;
use std::path::{Path, PathBuf};

/// Which model a command runs and how it is opened, as given
/// (`--model`, `--device`, `--threads`, `--cache-dir`, `--ctx-size`,
/// `--chat-template`: the flags `generate`, `bench` and `serve` share).
#[derive(Clone, Debug, Default)]
pub struct ModelSettings {
    /// A GGUF file, a Hugging Face checkpoint directory or a known model's
    /// name; `None` is the default model.
    pub model: Option<PathBuf>,
    /// `cpu`, `cuda` or `cuda:N`; `None` chooses.
    pub device: Option<String>,
    /// `None`: the CPUs available to this process.
    pub threads: Option<usize>,
    /// The model cache (`None`: the default one).
    pub cache_dir: Option<PathBuf>,
    /// `--ctx-size`: the most positions a sequence may hold (prompt and
    /// completion together), at most the model's own context length;
    /// `None` keeps the model's.
    pub ctx_size: Option<usize>,
    /// `--chat-template`: a Jinja template file used in place of the model's.
    pub chat_template: Option<PathBuf>,
    /// `--precision`: `int8` or `int16` for the K-quant matrices (`None`:
    /// int8, [`kernels::act8::Precision`]'s default).
    pub precision: Option<String>,
}

/// Largest `--chat-template` file read (templates are a few KiB; the
/// largest common ones are under 64 KiB).
pub const MAX_CHAT_TEMPLATE_BYTES: u64 = 1 << 20;

/// `--ctx-size`: caps the model's context (llama.cpp's `-c`, vLLM's
/// `--max-model-len`); a cap above the model's own length is refused, since
/// positions past it were never trained (a scaled RoPE is the model's own
/// setting, not a flag's).
pub fn apply_ctx_size(loaded: &mut model::Loaded, ctx_size: Option<usize>) -> Result<()> {
    let Some(n) = ctx_size else { return Ok(()) };
    let own = loaded.model.config.context_length;
    if n == 0 || n > own {
        anyhow::bail!("--ctx-size {n}: give 1 to the model's context length, {own} tokens");
    }
    loaded.model.config.context_length = n;
    loaded.info.context_length = n;
    Ok(())
}

/// `--chat-template FILE`: the file's template replaces the model's; it is
/// rendered once here on a one-message chat, so a template that does not
/// compile or render fails at startup, naming the file.
pub fn apply_chat_template(loaded: &mut model::Loaded, file: Option<&Path>) -> Result<()> {
    let Some(file) = file else { return Ok(()) };
    let bytes = crate::limits::read_capped(file, MAX_CHAT_TEMPLATE_BYTES)
        .with_context(|| format!("--chat-template {}", file.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("--chat-template {}: the file is not UTF-8", file.display()))?;
    let name = file.file_name().map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned());
    let tok = &mut loaded.tokenizer;
    tok.chat_template = Some(text);
    // Leaked once per process (a startup flag), so the source stays `Copy`.
    tok.chat_template_from = crate::tokenizer::chat::TemplateSource::Flag(Box::leak(name.into_boxed_str()));
    let probe = [crate::tokenizer::chat::Message { role: "user".into(), content: "hello".into() }];
    tok.render_chat(&probe, true).map_err(|e| anyhow::anyhow!("--chat-template {}: {e}", file.display()))?;
    Ok(())
}

/// A model ready to decode, and what the `startup` event reports about it.
pub struct Opened {
    pub engine: Engine,
    /// The kernel family, and whether `DRAFTWISE_KERNELS` forced it.
    pub selection: dispatch::Selection,
    /// The CUDA device the forward passes run on; `None` on the CPU.
    pub cuda: Option<CudaReport>,
    /// The model's path (the default model's place in the cache when none was given).
    pub path: PathBuf,
}

/// The model path: the flag (a path, or a known model's name: its cached
/// file, fetched if needed), or the default model (fetched if needed).
pub fn resolve_model(model: Option<&Path>, cache_dir: Option<&Path>) -> Result<PathBuf> {
    match model {
        Some(p) => Ok(fetch::resolve_model_arg(p, cache_dir)?),
        None => Ok(fetch::ensure_default_model(cache_dir)?),
    }
}

/// `--precision` as given: int8 (the default) or int16; the error names both.
pub fn parse_precision(s: Option<&str>) -> Result<kernels::act8::Precision> {
    s.map_or(Ok(Default::default()), |p| {
        kernels::act8::Precision::parse(p).map_err(|e| anyhow::anyhow!("--precision: {e}"))
    })
}

/// Loads, places and builds the engine. The kernel family and the device
/// are checked before the model is read, so a bad override fails at once.
/// Head dimensions the CPU attention kernels take: `kernels::attn::attend`
/// works in whole groups of sixteen dimensions and asserts it.
const CPU_ATTENTION_HEAD_DIM_MULTIPLE: usize = 16;

/// Refuses, before any forward pass, a model whose head dimension the CPU
/// attention kernels cannot take (they would panic on it).
pub fn check_cpu_attention(cfg: &crate::model::config::ModelConfig) -> Result<()> {
    let hd = cfg.head_dim;
    if hd == 0 || !hd.is_multiple_of(CPU_ATTENTION_HEAD_DIM_MULTIPLE) {
        anyhow::bail!(
            "head dimension {hd} is not a multiple of {CPU_ATTENTION_HEAD_DIM_MULTIPLE}: the CPU attention \
             kernels run whole groups of {CPU_ATTENTION_HEAD_DIM_MULTIPLE} dimensions (every supported \
             family's models have 64, 128 or 256)"
        );
    }
    Ok(())
}

/// Opens the model `s` names on `threads` worker threads (already resolved
/// from `s.threads`, so a bad count fails before anything loads).
pub fn open(s: &ModelSettings, threads: usize) -> Result<Opened> {
    let selection = dispatch::selected()?;
    let precision = parse_precision(s.precision.as_deref())?;
    let device = DeviceRequest::parse(s.device.as_deref())?;
    let path = resolve_model(s.model.as_deref(), s.cache_dir.as_deref())?;
    tracing::info!(model = %path.display(), "loading");
    // Files whose declared contents would cost memory out of proportion
    // to what the runtime keeps are refused before they are parsed
    // (crate::precheck).
    if path.is_dir() { crate::precheck::hf_dir(&path) } else { crate::precheck::gguf(&path) }
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("loading {}", path.display()))?;
    let mut loaded = model::load(&path).with_context(|| format!("loading {}", path.display()))?;
    loaded.model.set_precision(precision);
    apply_ctx_size(&mut loaded, s.ctx_size)?;
    apply_chat_template(&mut loaded, s.chat_template.as_deref())?;
    let cuda = crate::device::place(&mut loaded, device)?;
    if cuda.is_none() {
        check_cpu_attention(&loaded.model.config).with_context(|| format!("loading {}", path.display()))?;
    }
    let engine = Engine::new(loaded, selection.family, threads)?;
    Ok(Opened { engine, selection, cuda, path })
}

#[cfg(test)]
mod attention_shape_tests {
    #[test]
    fn a_head_dimension_the_cpu_attention_cannot_take_is_refused_naming_it() {
        let mut cfg = crate::model::config::tests::smollm2();
        assert!(super::check_cpu_attention(&cfg).is_ok(), "head dimension {}", cfg.head_dim);
        for hd in [0, 8, 24, 40] {
            cfg.head_dim = hd;
            let e = super::check_cpu_attention(&cfg).unwrap_err().to_string();
            assert!(e.contains(&format!("head dimension {hd} is not a multiple of 16")), "{e}");
        }
    }
}
