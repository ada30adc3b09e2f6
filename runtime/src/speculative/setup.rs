//! From the operator's speculative settings ([`SpeculationSettings`]) to a ready
//! configuration: the drafter, its width, and the exactness probe's verdict.

use super::DrafterKind;
use super::drafter::{
    DEFAULT_NGRAM_MAX, DEFAULT_NGRAM_MIN, DEFAULT_SUFFIX_MAX_MATCH, DEFAULT_SUFFIX_MIN_MATCH, DEFAULT_SUFFIX_MIN_PROB,
    Drafter, ModelDrafter, NgramDrafter, SuffixDrafter, check_compatible,
};
use super::probe::{PROBE_TEXT, ProbeReport, block_vs_chain};
use super::schedule::Schedule;
use crate::checkpoint::read_declared;
use crate::engine::Engine;
use crate::policy::{compiled_resolver, host_class_here, verify_fingerprint};
use anyhow::{Context, Result, bail};
use policy::DrafterSettings;
use policy::adaptive::CostModel;
use policy::kind::{MAX_NGRAM, MAX_SUFFIX_MATCH, Probability};
use std::path::PathBuf;

/// Environment variable that forfeits exactness like `--allow-inexact`.
pub const ALLOW_INEXACT_ENV: &str = "DRAFTWISE_ALLOW_INEXACT";

/// What the operator asked of speculation, as given (`runtime generate`
/// and `runtime serve` take them from the `--drafter` family of flags);
/// every field unset is the policy's to decide.
#[derive(Clone, Debug, Default)]
pub struct SpeculationSettings {
    /// A drafter kind, or `none` for classic decoding.
    pub drafter: Option<String>,
    /// Tokens drafted per verify step, as given (parsed by the resolution).
    pub draft_width: Option<String>,
    /// The draft checkpoint for the `draft-model` kind.
    pub drafter_model: Option<PathBuf>,
    /// `layerskip` layers: a count K or a list like `0,1,2,7`.
    pub layerskip_layers: Option<String>,
    pub ngram_max: Option<usize>,
    pub ngram_min: Option<usize>,
    /// `suffix`: shortest match that drafts.
    pub suffix_min_match: Option<usize>,
    /// `suffix`: longest match looked for.
    pub suffix_max_match: Option<usize>,
    /// `suffix`: the agreement below which a draft stops, in (0, 1].
    pub suffix_min_prob: Option<f64>,
    /// Speculate even if the block-vs-chain probe fails.
    pub allow_inexact: bool,
    /// `--policy FILE`: a draft-width table read at startup in place of the
    /// compiled one (to try an entry before a rebuild).
    pub policy: Option<PathBuf>,
    /// `--adaptive on|off`: choose each round's draft length (up to the
    /// width) per request, or fix it; unset: the measured entry's choice.
    pub adaptive: Option<bool>,
    /// `--cost-curve CONTEXT=R1,R2,...`, each as given: the verify pass's
    /// cost the adaptive length weighs, in place of the entry's.
    pub cost_curves: Vec<String>,
}

/// A `--policy` table, read and checked as `build.rs` checks the compiled
/// one: the same compiler, and every cited record folder must exist under
/// the repository root (the table file's `policy/` folder's parent, else
/// the current directory).
pub fn load_policy_file(path: &std::path::Path) -> Result<policy::table::Table> {
    let bytes = crate::limits::read_capped(path, policy::table::MAX_TABLE_BYTES as u64)
        .with_context(|| format!("--policy {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("--policy {}: not UTF-8", path.display()))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let root = if dir.file_name().is_some_and(|n| n == "policy") {
        dir.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new(".")).to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
    };
    let name = path.display().to_string();
    policy::table::compile(&name, &text, policy::table::RecordCheck::Under(&root))
        .map_err(|e| anyhow::anyhow!("--policy: {e} (record folders are looked for under {})", root.display()))
}

/// A drafter, its width, and whether it may run.
pub struct Speculation {
    pub kind: DrafterKind,
    pub drafter: Box<dyn Drafter>,
    /// The settings the drafter runs with (the measured entry's when the
    /// table decided).
    pub settings: DrafterSettings,
    /// Drafted tokens per verify; `None` when the policy table says `off`.
    pub width: Option<policy::Width>,
    /// Where `width` came from (the policy resolution's provenance).
    pub width_from: String,
    /// The exactness probe at `width`; `None` when off.
    pub probe: Option<ProbeReport>,
    /// Why the probe could not run (speculation is then declined).
    pub probe_error: Option<String>,
    pub allow_inexact: bool,
    /// The verify pass's cost when the draft length adapts per round
    /// (up to `width`); `None`: every round drafts up to `width`.
    pub cost: Option<CostModel>,
    /// Why the draft length adapts or not, in words (the `startup` event's
    /// `adaptive_from`).
    pub adaptive_from: String,
    /// What a server's sequences draft when several share a pass: the
    /// policy's buckets for this key (`policy::Resolution::ladder`); empty
    /// when `width` holds at every concurrency.
    pub ladder: Vec<policy::Bucket>,
}

/// How a process decodes: the speculation it runs, if any, and the
/// resolution that decided it (for classic decoding too: why).
pub struct Decoding {
    pub speculation: Option<Speculation>,
    pub resolution: policy::Resolution,
}

impl Decoding {
    /// One line for humans, on stderr.
    pub fn summary(&self) -> String {
        match &self.speculation {
            Some(s) => s.summary(),
            None => self.resolution.summary(),
        }
    }

    /// `flag`, `policy` or `none`: who chose the drafter (the `startup`
    /// event's `drafter_from`).
    pub fn drafter_from(&self) -> &'static str {
        match (&self.speculation, self.resolution.by_policy()) {
            (_, true) => "policy",
            (Some(_), false) => "flag",
            (None, false) => "none",
        }
    }
}

/// `layerskip` layers from `K` (the first K) or a comma-separated list
/// (`5,` is the list of layer 5 alone).
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
    // A trailing comma makes a one-layer list (`5,`) distinct from a count.
    for part in s.strip_suffix(',').unwrap_or(s).split(',') {
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

/// `--ngram-min` / `--ngram-max`, when given, within 1..=[`MAX_NGRAM`].
pub fn bound_ngram_flags(min: Option<usize>, max: Option<usize>) -> Result<()> {
    for (flag, v) in [("--ngram-min", min), ("--ngram-max", max)] {
        if let Some(n) = v
            && !(1..=MAX_NGRAM).contains(&n)
        {
            bail!("{flag} {n}: give 1..={MAX_NGRAM}");
        }
    }
    Ok(())
}

/// `--suffix-min-match` / `--suffix-max-match` within
/// 1..=[`MAX_SUFFIX_MATCH`] and `--suffix-min-prob` in (0, 1], when given.
pub fn bound_suffix_flags(min_match: Option<usize>, max_match: Option<usize>, min_prob: Option<f64>) -> Result<()> {
    for (flag, v) in [("--suffix-min-match", min_match), ("--suffix-max-match", max_match)] {
        if let Some(n) = v
            && !(1..=MAX_SUFFIX_MATCH).contains(&n)
        {
            bail!("{flag} {n}: give 1..={MAX_SUFFIX_MATCH}");
        }
    }
    // Written so that NaN fails too.
    if let Some(p) = min_prob
        && !(p > 0.0 && p <= 1.0)
    {
        bail!("--suffix-min-prob {p}: give a probability in (0, 1]");
    }
    Ok(())
}

/// The drafter settings `args` give for `kind` (fields not given stay
/// unset), each bounded.
pub fn requested_settings(kind: DrafterKind, args: &SpeculationSettings, n_layers: usize) -> Result<DrafterSettings> {
    let mut s = DrafterSettings::default();
    match kind {
        DrafterKind::Ngram => {
            bound_ngram_flags(args.ngram_min, args.ngram_max)?;
            s.ngram_min = args.ngram_min;
            s.ngram_max = args.ngram_max;
        }
        DrafterKind::Layerskip => {
            if let Some(spec) = &args.layerskip_layers {
                s.layers = Some(parse_layers(spec, n_layers)?);
            }
        }
        DrafterKind::Suffix => {
            bound_suffix_flags(args.suffix_min_match, args.suffix_max_match, args.suffix_min_prob)?;
            s.suffix_min_match = args.suffix_min_match;
            s.suffix_max_match = args.suffix_max_match;
            s.suffix_min_prob = args.suffix_min_prob.map(Probability);
        }
        DrafterKind::DraftModel | DrafterKind::Dflash | DrafterKind::Mtp => {}
    }
    if kind != DrafterKind::Suffix
        && (args.suffix_min_match.is_some() || args.suffix_max_match.is_some() || args.suffix_min_prob.is_some())
    {
        bail!(
            "--suffix-min-match, --suffix-max-match and --suffix-min-prob are settings of --drafter suffix, not of {kind}"
        );
    }
    if kind != DrafterKind::Ngram && (args.ngram_min.is_some() || args.ngram_max.is_some()) {
        bail!("--ngram-min and --ngram-max are settings of --drafter ngram, not of {kind}");
    }
    if kind != DrafterKind::Layerskip && args.layerskip_layers.is_some() {
        bail!("--layerskip-layers is a setting of --drafter layerskip, not of {kind}");
    }
    // Only the kinds that load a checkpoint of their own read it.
    let takes_a_model = matches!(kind, DrafterKind::DraftModel | DrafterKind::Dflash | DrafterKind::Mtp);
    if !takes_a_model && let Some(p) = &args.drafter_model {
        bail!(
            "--drafter-model {} is the checkpoint of --drafter draft-model; {kind} drafts from the target itself and \
             would ignore it",
            p.display()
        );
    }
    Ok(s)
}

/// The settings a kind runs with when neither the operator nor a measured
/// entry gives them: ngram 3..=4 ([`DEFAULT_NGRAM_MIN`], [`DEFAULT_NGRAM_MAX`]),
/// layerskip the first half of the layers, suffix 2..=32 at 0.5
/// ([`DEFAULT_SUFFIX_MIN_MATCH`], [`DEFAULT_SUFFIX_MAX_MATCH`],
/// [`DEFAULT_SUFFIX_MIN_PROB`]).
pub fn default_settings(kind: DrafterKind, n_layers: usize) -> DrafterSettings {
    match kind {
        DrafterKind::Ngram => DrafterSettings::ngram(DEFAULT_NGRAM_MIN, DEFAULT_NGRAM_MAX),
        DrafterKind::Suffix => {
            DrafterSettings::suffix(DEFAULT_SUFFIX_MIN_MATCH, DEFAULT_SUFFIX_MAX_MATCH, DEFAULT_SUFFIX_MIN_PROB)
        }
        DrafterKind::Layerskip => DrafterSettings::layerskip((0..(n_layers / 2).max(1)).collect()),
        DrafterKind::DraftModel | DrafterKind::Dflash | DrafterKind::Mtp => DrafterSettings::default(),
    }
}

/// A drafter of `kind` with complete `settings`, checked against the target.
pub fn build_drafter_with(
    kind: DrafterKind,
    settings: &DrafterSettings,
    args: &SpeculationSettings,
    engine: &Engine,
) -> Result<Box<dyn Drafter>> {
    settings.check(kind).map_err(|e| anyhow::anyhow!("{kind} drafter settings: {e}"))?;
    let target = &engine.loaded;
    Ok(match kind {
        DrafterKind::Ngram => {
            let (Some(min_n), Some(max_n)) = (settings.ngram_min, settings.ngram_max) else {
                bail!("the ngram drafter needs ngram_min and ngram_max");
            };
            Box::new(NgramDrafter { max_n, min_n })
        }
        DrafterKind::Suffix => {
            let (Some(min_match), Some(max_match), Some(Probability(min_prob))) =
                (settings.suffix_min_match, settings.suffix_max_match, settings.suffix_min_prob)
            else {
                bail!("the suffix drafter needs suffix_min_match, suffix_max_match and suffix_min_prob");
            };
            Box::new(SuffixDrafter { min_match, max_match, min_prob })
        }
        DrafterKind::Layerskip => {
            let n = target.model.config.n_layers;
            let layers = settings.layers.clone().unwrap_or_default();
            if let Some(&l) = layers.iter().find(|&&l| l >= n) {
                bail!("layerskip layer {l} does not exist (the target has {n})");
            }
            Box::new(ModelDrafter::layerskip(&target.model, &layers).map_err(anyhow::Error::msg)?)
        }
        DrafterKind::DraftModel => {
            let Some(p) = &args.drafter_model else {
                bail!(
                    "--drafter draft-model needs --drafter-model PATH (a GGUF file, a Hugging Face directory, or a \
                     known model's name: {})",
                    crate::fetch::model_names()
                )
            };
            // A known model's name (`qwen2.5-coder-0.5b`) is fetched like `--model`'s.
            let p = &crate::fetch::resolve_model_arg(p, None)
                .with_context(|| format!("fetching the draft model {}", p.display()))?;
            let d = crate::model::load(p).with_context(|| format!("loading the draft model {}", p.display()))?;
            check_compatible(target, &d)?;
            Box::new(ModelDrafter::new(DrafterKind::DraftModel, d.model))
        }
        DrafterKind::Dflash | DrafterKind::Mtp => bail!(
            "drafter kind {kind} is recognized but this runtime has no {kind} loader yet: it needs a checkpoint \
             that declares {kind} heads and the loader for them; use ngram, suffix, layerskip or draft-model"
        ),
    })
}

/// The drafter `args` ask for (`kind_s` is `--drafter`'s value), with the
/// settings given or the kind's defaults, checked against the target; no
/// width, policy or probe (`runtime bench --drafter`).
pub fn build_drafter(
    kind_s: &str,
    args: &SpeculationSettings,
    engine: &Engine,
) -> Result<(DrafterKind, Box<dyn Drafter>)> {
    let kind: DrafterKind = kind_s.parse().map_err(anyhow::Error::msg)?;
    let n_layers = engine.loaded.model.config.n_layers;
    let settings = default_settings(kind, n_layers).overlaid_with(&requested_settings(kind, args, n_layers)?);
    Ok((kind, build_drafter_with(kind, &settings, args, engine)?))
}

/// This process as a policy key sees it: device class, host class, target
/// quantization and model, threads and weight formats.
pub fn run_of<'a>(
    engine: &'a Engine,
    device: &'a policy::DeviceClass,
    host: &'a policy::HostClass,
    model: &'a policy::ModelClass,
) -> policy::Run<'a> {
    policy::Run {
        device,
        host,
        quant: &engine.loaded.info.quant,
        model,
        file: engine.loaded.info.path.file_name().and_then(|n| n.to_str()),
        threads: engine.threads,
        weight_formats: Some(&engine.loaded.info.weight_formats),
        precision: crate::policy::key_precision(&engine.loaded.info.weight_formats, engine.loaded.model.precision()),
    }
}

/// Whether the draft length adapts, with the cost model it weighs and why:
/// `--adaptive on` (the cost from `--cost-curve`, else the entry's curve;
/// neither is an error), `--adaptive off`, or unset: adaptive when the
/// measured entry that decided the width chose it and no `--draft-width`
/// fixed the width. `--cost-curve` where nothing adapts is an error (a flag
/// is never ignored).
pub fn adaptive_cost(
    args: &SpeculationSettings,
    resolution: &policy::Resolution,
) -> Result<(Option<CostModel>, String)> {
    let given = policy::table::parse_cost_curves(&args.cost_curves).map_err(anyhow::Error::msg)?;
    let entry = resolution.entry();
    let curve_of = |why: &str| -> Result<(Option<CostModel>, String)> {
        if !given.is_empty() {
            let m = CostModel::new(&given).context("--cost-curve: no curve of two pass sizes")?;
            return Ok((Some(m), format!("{why}, verify cost from --cost-curve")));
        }
        match entry.and_then(|e| CostModel::new(&e.verify_cost)) {
            Some(m) => {
                Ok((Some(m), format!("{why}, verify cost from the entry's record {}", entry.map_or("", |e| &e.record))))
            }
            None => bail!(
                "--adaptive on weighs the verify pass's measured cost, and no entry decided this width with a \
                 verify_cost curve: give --cost-curve CONTEXT=R1,R2,... (`runtime bench --verify-cost` measures \
                 one) or run `tuner sweep`"
            ),
        }
    };
    match args.adaptive {
        Some(true) => curve_of("on (--adaptive on)"),
        Some(false) if !given.is_empty() => {
            bail!("--cost-curve is for the adaptive draft length; --adaptive off fixes it")
        }
        Some(false) => Ok((None, "off (--adaptive off)".into())),
        None => match entry {
            Some(e) if e.drafting.is_some_and(policy::Drafting::is_adaptive) && args.draft_width.is_none() => {
                curve_of("on (the entry chose it)")
            }
            _ if !given.is_empty() => bail!(
                "--cost-curve is for the adaptive draft length, which is off here: give --adaptive on, or \
                 leave the width to an entry that chose adaptive"
            ),
            Some(e) if e.drafting.is_some_and(policy::Drafting::is_adaptive) => {
                Ok((None, "off (--draft-width fixes the width)".into()))
            }
            Some(_) => Ok((None, "off (the entry fixed the width)".into())),
            None => Ok((None, "off (no measured entry chose it)".into())),
        },
    }
}

impl Speculation {
    /// How this process decodes, resolved with the compiled policy.
    /// With `--policy FILE`, that table instead, and the provenance says so.
    pub fn from_settings(args: &SpeculationSettings, engine: &Engine) -> Result<Decoding> {
        let Some(file) = &args.policy else { return Speculation::resolve(args, engine, &compiled_resolver()) };
        let table = load_policy_file(file)?;
        let resolver = policy::Resolver { table: &table, fingerprint: &verify_fingerprint };
        let mut d = Speculation::resolve(args, engine, &resolver)?;
        let note = format!(" [table {} (--policy), not the compiled one]", file.display());
        d.resolution.width_from.push_str(&note);
        if let Some(s) = d.speculation.as_mut() {
            s.width_from.push_str(&note);
        }
        Ok(d)
    }

    /// [`Speculation::from_settings`] against a given policy (tests pass
    /// their own table).
    pub fn resolve(args: &SpeculationSettings, engine: &Engine, resolver: &policy::Resolver<'_>) -> Result<Decoding> {
        let given = |a: &SpeculationSettings| {
            a.draft_width.is_some()
                || a.drafter_model.is_some()
                || a.layerskip_layers.is_some()
                || a.ngram_min.is_some()
                || a.ngram_max.is_some()
                || a.suffix_min_match.is_some()
                || a.suffix_max_match.is_some()
                || a.suffix_min_prob.is_some()
        };
        let target = &engine.loaded;
        let n_layers = target.model.config.n_layers;
        let device =
            policy::DeviceClass::parse(&engine.loaded.model.device_class(engine.family)).map_err(anyhow::Error::msg)?;
        let host_class = host_class_here();
        let model = engine.loaded.info.model_class();
        let run = run_of(engine, &device, &host_class, &model);
        let env = policy::env_override()?;
        let (kind, settings, resolution) = match args.drafter.as_deref() {
            Some("none") => {
                if given(args) || args.adaptive.is_some() || !args.cost_curves.is_empty() {
                    bail!(
                        "--drafter none decodes classically: --draft-width, --drafter-model, \
                         --layerskip-layers, --ngram-min/--ngram-max, --suffix-*, --adaptive and --cost-curve \
                         do not apply"
                    );
                }
                return Ok(Decoding { speculation: None, resolution: policy::Resolution::no_drafter() });
            }
            None => {
                if given(args) {
                    bail!(
                        "--draft-width, --drafter-model, --layerskip-layers, --ngram-min/--ngram-max and \
                         --suffix-* need --drafter (without it the policy picks the drafter, its width and its settings)"
                    );
                }
                if let Some(e) = env.as_ref().filter(|e| !e.value.trim().is_empty()) {
                    tracing::warn!(
                        "{} is set but no --drafter is: the policy decides whether to speculate, and the \
                         override applies only with --drafter",
                        e.name
                    );
                }
                let r = resolver.auto(&run);
                match (r.drafter, r.drafter_settings.clone()) {
                    (Some(k), Some(s)) => (k, s, r),
                    _ if args.adaptive == Some(true) || !args.cost_curves.is_empty() => bail!(
                        "--adaptive on / --cost-curve: no drafter runs here ({}); give --drafter KIND",
                        r.summary()
                    ),
                    _ => return Ok(Decoding { speculation: None, resolution: r }),
                }
            }
            Some(kind_s) => {
                let kind: DrafterKind = kind_s.parse().map_err(|e| anyhow::anyhow!("--drafter: {e} (or none)"))?;
                let requested = requested_settings(kind, args, n_layers)?;
                let declared = read_declared(kind, args.drafter_model.as_deref(), &target.info.path);
                let r = resolver.resolve(&policy::ResolveInput {
                    drafter: kind,
                    declared: &declared,
                    run,
                    settings: &requested,
                    flag: args.draft_width.as_deref(),
                    env: env.as_ref(),
                })?;
                let settings = match &r.drafter_settings {
                    Some(measured) => measured.overlaid_with(&requested),
                    None => default_settings(kind, n_layers).overlaid_with(&requested),
                };
                (kind, settings, r)
            }
        };
        let drafter = build_drafter_with(kind, &settings, args, engine)?;
        let Some(width) = resolution.width else {
            // The measured policy says this drafter loses to classic decoding here.
            tracing::warn!("{}; decoding classically", resolution.summary());
            let spec = Speculation::off(kind, drafter, settings, resolution.width_from.clone());
            return Ok(Decoding { speculation: Some(spec), resolution });
        };
        let width_from = resolution.width_from.clone();
        let ladder = resolution.ladder.clone();
        // The probe checks the widest block any concurrency drafts.
        let widest = ladder.iter().filter_map(|b| b.drafting).map(|d| d.max()).fold(width, policy::Width::max);
        let allow_inexact = args.allow_inexact || std::env::var(ALLOW_INEXACT_ENV).is_ok_and(|v| v == "1");
        let probe_ids = target.tokenizer.encode(PROBE_TEXT).unwrap_or_default();
        let (probe, probe_error) = match engine
            .install(|| block_vs_chain(&target.model, engine.family, engine.threads, &probe_ids, widest.get()))
        {
            Ok(p) => (Some(p), None),
            Err(e) => {
                let why = format!("the width-{widest} exactness probe could not run: {e}");
                tracing::warn!("speculation declined: {why}; decoding classically");
                (None, Some(why))
            }
        };
        if let Some(probe) = probe.as_ref().filter(|p| !p.passed) {
            if allow_inexact {
                tracing::warn!(
                    "EXACTNESS FORFEITED: the width-{widest} verify block differs from the one-token chain \
                     ({} of {} bytes, first at row {:?}); speculating anyway because of --allow-inexact",
                    probe.differing_bytes,
                    probe.compared_bytes,
                    probe.first_differing_row
                );
            } else {
                tracing::warn!(
                    "speculation declined: the width-{widest} verify block differs from the chain; decoding classically"
                );
            }
        }
        let (cost, adaptive_from) = adaptive_cost(args, &resolution)?;
        let spec = Speculation {
            kind,
            drafter,
            settings,
            width: Some(width),
            width_from,
            probe,
            probe_error,
            allow_inexact,
            cost,
            adaptive_from,
            ladder,
        };
        Ok(Decoding { speculation: Some(spec), resolution })
    }

    /// A drafter the policy turned off: requests decode classically.
    fn off(kind: DrafterKind, drafter: Box<dyn Drafter>, settings: DrafterSettings, width_from: String) -> Self {
        Speculation {
            kind,
            drafter,
            settings,
            width: None,
            width_from,
            probe: None,
            probe_error: None,
            allow_inexact: false,
            cost: None,
            adaptive_from: "off: the policy turned speculation off".into(),
            ladder: Vec::new(),
        }
    }

    /// How each round's draft length is chosen, when requests speculate.
    pub fn schedule(&self) -> Option<Schedule> {
        let cap = self.active_width()?;
        Some(match &self.cost {
            Some(cost) => Schedule::Adaptive { cap, cost: cost.clone() },
            None => Schedule::Fixed(cap),
        })
    }

    /// The width to speculate at, when requests speculate at all.
    pub fn active_width(&self) -> Option<policy::Width> {
        self.width.filter(|_| self.declined_reason().is_none())
    }

    /// Why requests run classic decoding although a drafter was asked for
    /// and the policy did not turn it off: a failed exactness probe.
    pub fn declined_reason(&self) -> Option<String> {
        if let Some(e) = &self.probe_error {
            return Some(e.clone());
        }
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
        let probe = match &self.probe_error {
            Some(e) => format!(", speculation declined ({e})"),
            None => probe,
        };
        let width = match (&self.cost, self.width) {
            (Some(_), Some(w)) => format!("adaptive 0..={w}"),
            _ => policy::width::label(self.width),
        };
        format!(
            "speculative: drafter {} ({}), width {width} ({}){probe}{}",
            self.kind,
            self.settings.describe(),
            self.width_from,
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

    fn suffix_args(min_match: Option<usize>, max_match: Option<usize>, min_prob: Option<f64>) -> SpeculationSettings {
        SpeculationSettings {
            drafter: Some("suffix".into()),
            suffix_min_match: min_match,
            suffix_max_match: max_match,
            suffix_min_prob: min_prob,
            ..Default::default()
        }
    }

    #[test]
    fn suffix_flags_become_settings_over_the_defaults() {
        let r = requested_settings(DrafterKind::Suffix, &suffix_args(Some(3), None, Some(0.25)), 30).unwrap();
        let s = default_settings(DrafterKind::Suffix, 30).overlaid_with(&r);
        assert_eq!(s, DrafterSettings::suffix(3, DEFAULT_SUFFIX_MAX_MATCH, 0.25));
        assert!(s.check(DrafterKind::Suffix).is_ok());
        assert!(default_settings(DrafterKind::Suffix, 30).check(DrafterKind::Suffix).is_ok());
    }

    #[test]
    fn suffix_flags_out_of_range_or_on_another_kind_are_refused() {
        for (args, says) in [
            (suffix_args(Some(0), None, None), "--suffix-min-match 0: give 1..=64"),
            (suffix_args(None, Some(65), None), "--suffix-max-match 65: give 1..=64"),
            (suffix_args(None, None, Some(0.0)), "--suffix-min-prob 0: give a probability in (0, 1]"),
            (suffix_args(None, None, Some(1.5)), "--suffix-min-prob 1.5"),
            (suffix_args(None, None, Some(f64::NAN)), "--suffix-min-prob NaN"),
        ] {
            let e = requested_settings(DrafterKind::Suffix, &args, 30).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
        for flag in
            [suffix_args(Some(2), None, None), suffix_args(None, Some(8), None), suffix_args(None, None, Some(0.5))]
        {
            let e = requested_settings(DrafterKind::Ngram, &flag, 30).unwrap_err().to_string();
            assert!(e.contains("settings of --drafter suffix, not of ngram"), "{e}");
        }
        let ngram_on_suffix = SpeculationSettings { ngram_min: Some(2), ..suffix_args(None, None, None) };
        let e = requested_settings(DrafterKind::Suffix, &ngram_on_suffix, 30).unwrap_err().to_string();
        assert!(e.contains("not of suffix"), "{e}");
    }

    #[test]
    fn a_drafter_model_for_a_drafter_that_takes_none_is_refused() {
        let with_model = SpeculationSettings { drafter_model: Some("d.gguf".into()), ..Default::default() };
        for kind in [DrafterKind::Ngram, DrafterKind::Suffix, DrafterKind::Layerskip] {
            let e = requested_settings(kind, &with_model, 30).unwrap_err().to_string();
            assert!(
                e.contains("--drafter-model d.gguf") && e.contains(&format!("{kind} drafts from the target")),
                "{e}"
            );
        }
        assert!(requested_settings(DrafterKind::DraftModel, &with_model, 30).is_ok());
    }
}
