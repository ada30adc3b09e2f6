//! Drafter kinds, what each may read a width from, and the per-kind constant
//! that applies when nothing else decides.
//!
//! The table compiler, the resolver and the runtime's flags all read the
//! names from here, so they agree by construction.

use crate::width::Width;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// A kind of drafter: what proposes the tokens a verify block checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DrafterKind {
    /// Prompt lookup: the tokens that followed the most recent earlier
    /// occurrence of the last n tokens. No weights, no checkpoint.
    Ngram,
    /// Self-speculation through the target's first K layers. No checkpoint of
    /// its own (K is a setting of the drafter, not a width).
    Layerskip,
    /// A separate, smaller checkpoint sharing the target's tokenizer.
    DraftModel,
    /// A block-diffusion drafter (DFlash) that proposes a whole block in one
    /// forward pass; its checkpoint declares the block it was trained on.
    Dflash,
    /// Multi-token-prediction heads shipped inside the target checkpoint.
    Mtp,
    /// Suffix matching over the prompt and the generated text: the longest
    /// earlier match of the context's end, drafted as far as its earlier
    /// occurrences agree. No weights, no checkpoint.
    Suffix,
}

/// Where a kind may find a width its checkpoint declares (resolution step 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeclarationSource {
    /// The kind has no checkpoint: step 2 never applies.
    None,
    /// The checkpoint given with `--drafter-model`.
    DrafterModel,
    /// The target checkpoint itself (MTP heads live in the target).
    Target,
}

impl DrafterKind {
    /// Every kind, in the order `policy explain` lists them.
    pub const ALL: [DrafterKind; 6] = [
        DrafterKind::Ngram,
        DrafterKind::Layerskip,
        DrafterKind::DraftModel,
        DrafterKind::Dflash,
        DrafterKind::Mtp,
        DrafterKind::Suffix,
    ];

    /// The name used on the command line, in events and in the policy table.
    pub fn as_str(self) -> &'static str {
        match self {
            DrafterKind::Ngram => "ngram",
            DrafterKind::Layerskip => "layerskip",
            DrafterKind::DraftModel => "draft-model",
            DrafterKind::Dflash => "dflash",
            DrafterKind::Mtp => "mtp",
            DrafterKind::Suffix => "suffix",
        }
    }

    /// The width used when no override, declaration or measurement decides.
    ///
    /// These are starting points, not measurements; `tuner sweep` replaces
    /// them per device. Why each value:
    /// - `ngram` 4: drafts cost nothing to produce, so a wrong draft costs
    ///   only its extra verify rows. A memory-bound mat-vec streams the
    ///   weights once per block, so the first few extra rows are cheap, while
    ///   prompt-lookup matches on non-repetitive text seldom run longer than
    ///   a few tokens. 4 keeps the verify pass at 5 rows.
    /// - `layerskip` 4 and `draft-model` 4: each drafted token costs a
    ///   drafter forward pass, and acceptance of the i-th token decays about
    ///   geometrically (alpha^i); with the alpha of 0.6–0.8 typical of small
    ///   or early-exit drafters, the expected tokens per verify stop growing
    ///   noticeably after 4 while draft time keeps growing linearly.
    /// - `dflash` 7: a DFlash drafter fills a whole block (the last verified
    ///   token plus its drafts) in one pass, so width costs verify rows only.
    ///   Real checkpoints declare their block (step 2 reads it); 7 is what
    ///   the default block of 8 of vLLM's `DFlashConfig` drafts, for a
    ///   checkpoint that declares none.
    /// - `mtp` 1: checkpoints usually carry one next-token-prediction module
    ///   (DeepSeek-V3's `num_nextn_predict_layers = 1`), trained to predict
    ///   one token ahead; chaining it past its training depth loses
    ///   acceptance quickly. Checkpoints with more modules declare them.
    /// - `suffix` 4: the same reasoning as `ngram` (drafts are free, a wrong
    ///   one costs only verify rows); its drafts stop by themselves where the
    ///   earlier occurrences stop agreeing, and a width of 4 is the budget of
    ///   the shortest default match (2 tokens, budget 2·2), so the default
    ///   width never asks more of a match than the drafter would give it.
    pub fn default_width(self) -> Width {
        let n = match self {
            DrafterKind::Ngram => 4,
            DrafterKind::Layerskip => 4,
            DrafterKind::DraftModel => 4,
            DrafterKind::Dflash => 7,
            DrafterKind::Mtp => 1,
            DrafterKind::Suffix => 4,
        };
        Width::new(n).expect("every per-kind constant is in 1..=MAX_WIDTH")
    }

    /// Where this kind's declared width comes from, if anywhere.
    pub fn declaration_source(self) -> DeclarationSource {
        match self {
            DrafterKind::Ngram | DrafterKind::Layerskip | DrafterKind::Suffix => DeclarationSource::None,
            DrafterKind::DraftModel | DrafterKind::Dflash => DeclarationSource::DrafterModel,
            DrafterKind::Mtp => DeclarationSource::Target,
        }
    }

    /// Same as [`DrafterKind::as_str`].
    pub fn name(self) -> &'static str {
        self.as_str()
    }

    /// The kind names, for messages that list the valid choices.
    pub fn names() -> String {
        Self::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for DrafterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a drafter kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownDrafterKind(pub String);

impl fmt::Display for UnknownDrafterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a drafter kind; the kinds are {}", self.0, DrafterKind::names())
    }
}

impl std::error::Error for UnknownDrafterKind {}

impl FromStr for DrafterKind {
    type Err = UnknownDrafterKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DrafterKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| UnknownDrafterKind(s.to_string()))
    }
}

impl Serialize for DrafterKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DrafterKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The drafter's own settings: part of what a policy entry measured, so an
/// entry applies only with exactly these settings, and the runtime uses them
/// when it takes the drafter from the policy.
///
/// Which fields a kind has: `ngram` — `ngram_min` and `ngram_max` (the
/// shortest and longest pattern looked up); `layerskip` — `layers` (the
/// target layers the drafter runs); `suffix` — `suffix_min_match`,
/// `suffix_max_match` (the shortest match that drafts, the longest looked
/// for) and `suffix_min_prob` (the agreement below which a draft stops); the
/// kinds with a checkpoint have none (their checkpoint is their setting).
/// [`DrafterSettings::check`] enforces it. Unset fields are not serialized,
/// so settings without the suffix fields read and write as they always did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrafterSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ngram_min: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ngram_max: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<Vec<usize>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix_min_match: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix_max_match: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix_min_prob: Option<Probability>,
}

/// A probability setting, compared and hashed by its bits so settings stay
/// `Eq` and `Hash` (a policy entry's key includes them); serialized as the
/// plain number. [`DrafterSettings::check`] refuses values outside (0, 1],
/// NaN included.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Probability(pub f64);

impl PartialEq for Probability {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Probability {}

impl Hash for Probability {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0.to_bits().hash(h);
    }
}

impl fmt::Display for Probability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The longest match a `suffix` drafter may look for (`--suffix-max-match`):
/// the scan costs the context length times this per round, and a draft's
/// budget (twice the match) already exceeds the widest verify block long
/// before it.
pub const MAX_SUFFIX_MATCH: usize = 64;

/// The largest n-gram a drafter may look up (`--ngram-max`): the lookup
/// scans the context once per length, and no prompt-lookup gain is known
/// past a few tokens.
pub const MAX_NGRAM: usize = 64;

/// The most layers a `layerskip` setting may list.
pub const MAX_LAYERS: usize = 1024;

impl DrafterSettings {
    /// `ngram` settings.
    pub fn ngram(min: usize, max: usize) -> Self {
        DrafterSettings { ngram_min: Some(min), ngram_max: Some(max), ..Default::default() }
    }

    /// `layerskip` settings.
    pub fn layerskip(layers: Vec<usize>) -> Self {
        DrafterSettings { layers: Some(layers), ..Default::default() }
    }

    /// `suffix` settings.
    pub fn suffix(min_match: usize, max_match: usize, min_prob: f64) -> Self {
        DrafterSettings {
            suffix_min_match: Some(min_match),
            suffix_max_match: Some(max_match),
            suffix_min_prob: Some(Probability(min_prob)),
            ..Default::default()
        }
    }

    fn has_suffix_fields(&self) -> bool {
        self.suffix_min_match.is_some() || self.suffix_max_match.is_some() || self.suffix_min_prob.is_some()
    }

    /// Whether these are complete, valid settings for `kind`; the error says
    /// what is missing, extra or out of range.
    pub fn check(&self, kind: DrafterKind) -> Result<(), String> {
        let extra = |what: &str| Err(format!("{what} is not a setting of the {kind} drafter"));
        if kind != DrafterKind::Suffix && self.has_suffix_fields() {
            return extra("suffix_min_match/suffix_max_match/suffix_min_prob");
        }
        match kind {
            DrafterKind::Ngram => {
                if self.layers.is_some() {
                    return extra("layers");
                }
                match (self.ngram_min, self.ngram_max) {
                    (Some(lo), Some(hi)) if lo >= 1 && lo <= hi && hi <= MAX_NGRAM => Ok(()),
                    (Some(lo), Some(hi)) => {
                        Err(format!("ngram_min {lo} / ngram_max {hi}: need 1 <= ngram_min <= ngram_max <= {MAX_NGRAM}"))
                    }
                    _ => Err("the ngram drafter needs ngram_min and ngram_max".into()),
                }
            }
            DrafterKind::Layerskip => {
                if self.ngram_min.is_some() || self.ngram_max.is_some() {
                    return extra("ngram_min/ngram_max");
                }
                match &self.layers {
                    None => Err("the layerskip drafter needs layers".into()),
                    Some(l) if l.is_empty() || l.len() > MAX_LAYERS => {
                        Err(format!("layers has {} entries; give 1..={MAX_LAYERS}", l.len()))
                    }
                    Some(l) if l.windows(2).any(|w| w[0] >= w[1]) => Err("layers must be increasing".into()),
                    Some(_) => Ok(()),
                }
            }
            DrafterKind::Suffix => {
                if self.layers.is_some() {
                    return extra("layers");
                }
                if self.ngram_min.is_some() || self.ngram_max.is_some() {
                    return extra("ngram_min/ngram_max");
                }
                let (Some(lo), Some(hi), Some(p)) =
                    (self.suffix_min_match, self.suffix_max_match, self.suffix_min_prob)
                else {
                    return Err(
                        "the suffix drafter needs suffix_min_match, suffix_max_match and suffix_min_prob".into()
                    );
                };
                if !(lo >= 1 && lo <= hi && hi <= MAX_SUFFIX_MATCH) {
                    return Err(format!(
                        "suffix_min_match {lo} / suffix_max_match {hi}: need 1 <= suffix_min_match <= \
                         suffix_max_match <= {MAX_SUFFIX_MATCH}"
                    ));
                }
                // Written so that NaN fails too.
                if !(p.0 > 0.0 && p.0 <= 1.0) {
                    return Err(format!("suffix_min_prob {p}: need 0 < suffix_min_prob <= 1"));
                }
                Ok(())
            }
            DrafterKind::DraftModel | DrafterKind::Dflash | DrafterKind::Mtp => {
                if *self == DrafterSettings::default() {
                    Ok(())
                } else {
                    extra("ngram_min/ngram_max/layers")
                }
            }
        }
    }

    /// `ngram_min 3, ngram_max 4`, `layers 0-14`, or `no settings`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.ngram_min {
            parts.push(format!("ngram_min {n}"));
        }
        if let Some(n) = self.ngram_max {
            parts.push(format!("ngram_max {n}"));
        }
        if let Some(l) = &self.layers {
            let contiguous = l.first() == Some(&0) && l.windows(2).all(|w| w[1] == w[0] + 1);
            match (contiguous, l.last()) {
                (true, Some(last)) => parts.push(format!("layers 0-{last}")),
                _ => parts.push(format!("layers {}", l.iter().map(usize::to_string).collect::<Vec<_>>().join(","))),
            }
        }
        if let Some(n) = self.suffix_min_match {
            parts.push(format!("suffix_min_match {n}"));
        }
        if let Some(n) = self.suffix_max_match {
            parts.push(format!("suffix_max_match {n}"));
        }
        if let Some(p) = self.suffix_min_prob {
            parts.push(format!("suffix_min_prob {p}"));
        }
        if parts.is_empty() { "no settings".into() } else { parts.join(", ") }
    }

    /// The fields set in `requested` that differ from `self`, as
    /// `ngram_min 2 (measured 3)`; empty when every requested field agrees.
    pub fn differences(&self, requested: &DrafterSettings) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(r) = requested.ngram_min
            && self.ngram_min != Some(r)
        {
            out.push(format!("ngram_min {r} (measured {})", opt(self.ngram_min)));
        }
        if let Some(r) = requested.ngram_max
            && self.ngram_max != Some(r)
        {
            out.push(format!("ngram_max {r} (measured {})", opt(self.ngram_max)));
        }
        if let Some(r) = &requested.layers
            && self.layers.as_ref() != Some(r)
        {
            let d = DrafterSettings::layerskip(r.clone()).describe();
            let m = self.layers.clone().map_or("none".into(), |l| DrafterSettings::layerskip(l).describe());
            out.push(format!("{d} (measured {m})"));
        }
        if let Some(r) = requested.suffix_min_match
            && self.suffix_min_match != Some(r)
        {
            out.push(format!("suffix_min_match {r} (measured {})", opt(self.suffix_min_match)));
        }
        if let Some(r) = requested.suffix_max_match
            && self.suffix_max_match != Some(r)
        {
            out.push(format!("suffix_max_match {r} (measured {})", opt(self.suffix_max_match)));
        }
        if let Some(r) = requested.suffix_min_prob
            && self.suffix_min_prob != Some(r)
        {
            let m = self.suffix_min_prob.map_or("none".into(), |p| p.to_string());
            out.push(format!("suffix_min_prob {r} (measured {m})"));
        }
        out
    }

    /// `requested`'s fields where set, else `self`'s.
    pub fn overlaid_with(&self, requested: &DrafterSettings) -> DrafterSettings {
        DrafterSettings {
            ngram_min: requested.ngram_min.or(self.ngram_min),
            ngram_max: requested.ngram_max.or(self.ngram_max),
            layers: requested.layers.clone().or_else(|| self.layers.clone()),
            suffix_min_match: requested.suffix_min_match.or(self.suffix_min_match),
            suffix_max_match: requested.suffix_max_match.or(self.suffix_max_match),
            suffix_min_prob: requested.suffix_min_prob.or(self.suffix_min_prob),
        }
    }
}

fn opt(v: Option<usize>) -> String {
    v.map_or("none".into(), |n| n.to_string())
}
