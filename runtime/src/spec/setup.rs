//! From command-line settings to a ready speculative configuration: the
//! drafter, its width, and the exactness probe's verdict.

use super::DrafterKind;
use super::drafter::{Drafter, ModelDrafter, NgramDrafter, check_compatible};
use super::probe::{PROBE_TEXT, ProbeReport, block_vs_chain};
use crate::cli::SpecArgs;
use crate::generate::Engine;
use crate::policy;
use anyhow::{Context, Result, bail};

/// Environment variable that forfeits exactness like `--allow-inexact`.
pub const ALLOW_INEXACT_ENV: &str = "DRAFTWISE_ALLOW_INEXACT";

/// A drafter, its width, and whether it may run.
pub struct Speculation {
    pub kind: DrafterKind,
    pub drafter: Box<dyn Drafter>,
    /// Drafted tokens per verify; `None` when the policy table says `off`.
    pub block_size: Option<usize>,
    /// Where `block_size` came from (the policy resolution's provenance).
    pub block_size_from: String,
    /// The exactness probe at `block_size`; `None` when off.
    pub probe: Option<ProbeReport>,
    pub allow_inexact: bool,
}

/// `layerskip` layers from `K` (the first K) or a comma-separated list.
pub fn parse_layers(s: &str, n_layers: usize) -> Result<Vec<usize>> {
    let s = s.trim();
    if !s.contains(',') {
        let k: usize = s.parse().with_context(|| format!("--layerskip-layers {s:?}: not a count or a list"))?;
        if k == 0 || k > n_layers {
            bail!("--layerskip-layers {k}: the target has {n_layers} layers; give 1..={n_layers}");
        }
        return Ok((0..k).collect());
    }
    let mut layers = Vec::new();
    for part in s.split(',') {
        let l: usize =
            part.trim().parse().with_context(|| format!("--layerskip-layers: {part:?} is not a layer index"))?;
        if l >= n_layers {
            bail!("--layerskip-layers: layer {l} does not exist (the target has {n_layers})");
        }
        if layers.last().is_some_and(|&p| p >= l) {
            bail!("--layerskip-layers: layers must be increasing ({s})");
        }
        layers.push(l);
    }
    Ok(layers)
}

/// The drafter `args` ask for (`kind_s` is `--drafter`'s value), checked
/// against the target; no width, policy or probe yet.
pub fn build_drafter(kind_s: &str, args: &SpecArgs, engine: &Engine) -> Result<(DrafterKind, Box<dyn Drafter>)> {
    let kind: DrafterKind = kind_s.parse().map_err(anyhow::Error::msg)?;
    let target = &engine.loaded;
    let drafter: Box<dyn Drafter> = match kind {
        DrafterKind::Ngram => {
            if args.ngram_min == 0 || args.ngram_min > args.ngram_max {
                bail!("--ngram-min {} / --ngram-max {}: need 1 <= min <= max", args.ngram_min, args.ngram_max);
            }
            Box::new(NgramDrafter { max_n: args.ngram_max, min_n: args.ngram_min })
        }
        DrafterKind::Layerskip => {
            let n = target.model.config.n_layers;
            let spec = args.layerskip_layers.clone().unwrap_or_else(|| (n / 2).max(1).to_string());
            let layers = parse_layers(&spec, n)?;
            Box::new(ModelDrafter::layerskip(&target.model, &layers).map_err(anyhow::Error::msg)?)
        }
        DrafterKind::DraftModel => {
            let Some(p) = &args.drafter_model else {
                bail!("--drafter draft-model needs --drafter-model PATH (a GGUF file or a Hugging Face directory)")
            };
            let d = crate::model::load(p).with_context(|| format!("loading the draft model {}", p.display()))?;
            check_compatible(target, &d)?;
            Box::new(ModelDrafter::new(DrafterKind::DraftModel, d.model))
        }
        DrafterKind::Dflash | DrafterKind::Mtp => bail!(
            "drafter kind {kind} is recognized but this runtime has no {kind} loader yet: it needs a checkpoint \
             that declares {kind} heads and the loader for them; use ngram, layerskip or draft-model"
        ),
    };
    Ok((kind, drafter))
}

impl Speculation {
    /// `None` when no drafter was asked for.
    pub fn from_args(args: &SpecArgs, engine: &Engine) -> Result<Option<Self>> {
        let Some(kind_s) = &args.drafter else {
            if args.draft_block_size.is_some() || args.drafter_model.is_some() || args.layerskip_layers.is_some() {
                bail!("--draft-block-size, --drafter-model and --layerskip-layers need --drafter");
            }
            return Ok(None);
        };
        let (kind, drafter) = build_drafter(kind_s, args, engine)?;
        let target = &engine.loaded;
        let declared = policy::read_declared(kind, args.drafter_model.as_deref(), &target.info.path);
        let env = policy::env_override()?;
        let device_class = engine.loaded.model.device_class(engine.family);
        let resolution = policy::resolve(&policy::ResolveInput {
            drafter: kind,
            declared: &declared,
            device_class: &device_class,
            target_quant: &target.info.quant,
            flag: args.draft_block_size.as_deref(),
            env: env.as_deref(),
        })?;
        let Some(block_size) = resolution.block_size else {
            // The measured policy says this drafter loses to classic decoding here.
            tracing::warn!("{}; decoding classically", resolution.summary());
            return Ok(Some(Speculation::off(kind, drafter, resolution.block_size_from)));
        };
        let block_size_from = resolution.block_size_from;
        let allow_inexact = args.allow_inexact || std::env::var(ALLOW_INEXACT_ENV).is_ok_and(|v| v == "1");
        let probe_ids = target.tokenizer.encode(PROBE_TEXT).unwrap_or_default();
        let probe = engine
            .install(|| block_vs_chain(&target.model, engine.family, engine.threads, &probe_ids, block_size))
            .context("running the block-vs-chain probe")?;
        if !probe.passed {
            if allow_inexact {
                tracing::warn!(
                    "EXACTNESS FORFEITED: the width-{block_size} verify block differs from the one-token chain \
                     ({} of {} bytes, first at row {:?}); speculating anyway because of --allow-inexact",
                    probe.differing_bytes,
                    probe.compared_bytes,
                    probe.first_differing_row
                );
            } else {
                tracing::warn!(
                    "speculation declined: the width-{block_size} verify block differs from the chain; decoding classically"
                );
            }
        }
        Ok(Some(Speculation {
            kind,
            drafter,
            block_size: Some(block_size),
            block_size_from,
            probe: Some(probe),
            allow_inexact,
        }))
    }

    /// A drafter the policy turned off: requests decode classically.
    fn off(kind: DrafterKind, drafter: Box<dyn Drafter>, block_size_from: String) -> Self {
        Speculation { kind, drafter, block_size: None, block_size_from, probe: None, allow_inexact: false }
    }

    /// The width to speculate at, when requests speculate at all.
    pub fn active_width(&self) -> Option<usize> {
        self.block_size.filter(|_| self.declined_reason().is_none())
    }

    /// Why requests run classic decoding although a drafter was asked for
    /// and the policy did not turn it off: a failed exactness probe.
    pub fn declined_reason(&self) -> Option<String> {
        let p = self.probe.as_ref()?;
        (!p.passed && !self.allow_inexact).then(|| {
            format!(
                "block-vs-chain probe failed at width {}: {} of {} logit bytes differ, first at block row {}; \
                 pass --allow-inexact to speculate anyway",
                p.width,
                p.differing_bytes,
                p.compared_bytes,
                p.first_differing_row.map_or("-".into(), |r| r.to_string())
            )
        })
    }

    /// One line for humans, on stderr.
    pub fn summary(&self) -> String {
        let probe = match &self.probe {
            None => String::new(),
            Some(p) if p.passed => ", exactness probe passed".into(),
            Some(_) => ", exactness probe FAILED".into(),
        };
        format!(
            "speculative: drafter {}, block_size {} ({}){probe}{}",
            self.kind,
            self.block_size.map_or("off".into(), |n| n.to_string()),
            self.block_size_from,
            if self.allow_inexact { ", exactness forfeited (--allow-inexact)" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_parse_as_a_count_or_an_increasing_list() {
        assert_eq!(parse_layers("3", 30).unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_layers("0, 2,7", 30).unwrap(), vec![0, 2, 7]);
        assert!(parse_layers("0", 30).is_err());
        assert!(parse_layers("31", 30).is_err());
        assert!(parse_layers("2,1", 30).is_err());
        assert!(parse_layers("1,x", 30).is_err());
    }
}
