//! The policy key: everything a measured width depended on, as one type.
//!
//! [`PolicyKey`] is (drafter kind, device class, host class, target
//! quantization class, activation precision, target model, CPU threads,
//! concurrency). Its `Display` is the
//! phrase every message uses (`ngram on cpu:x86_64-avx512vnni (amd-zen4) with
//! a q4_1 llama 134.5M target at 2 threads`). Two keys differ exactly when
//! their phrases do.
//!
//! - [`DeviceClass`]: which kernels run (`cpu:<arch>-<kernel family>`,
//!   `cuda:sm_XY`), parsed once.
//! - [`HostClass`](crate::host::HostClass): which processor ran them.
//! - the quantization class: the *target's* numerics (never the drafter's).
//! - [`ModelClass`]: the target's architecture and parameter count, the two
//!   things about a model that set what a verify pass reads. Two files of
//!   one model class (a fine-tune and its base, the same weights under
//!   another name) share a key; the entry names the file it measured.
//! - the activation precision ([`Precision`]) of the K-quant matrices, on
//!   CPU device classes and targets with K-quant matrices only (elsewhere
//!   both precisions run the same numbers, and the key has none).
//! - the thread count, on CPU device classes only.
//! - the concurrency: how many sequences a server decoded at once when the
//!   width was measured (`tuner sweep --served --concurrency N`); 1 for an
//!   idle server and for `generate`. An entry at concurrency `N` above 1 is
//!   a *bucket*: the runtime uses it for the steps where at least `N`
//!   sequences run (`Resolver::ladder`), never as a run's own key.

use crate::host::HostClass;
use crate::kind::DrafterKind;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The most CPU threads a key may name (a bound on a typed number; real
/// hosts have far fewer).
pub const MAX_THREADS: usize = 4096;

/// The most concurrent sequences a key may name: `runtime serve
/// --parallel`'s bound.
pub const MAX_CONCURRENCY: usize = 256;

/// The activation precision the K-quant matrices multiply (issue 56):
/// `int8` (8-bit activations, llama.cpp's `Q8_K` numerics; the runtime's
/// default) or `int16` (16-bit activations, closer to float64). An entry
/// measured at one does not apply to the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Int8,
    Int16,
}

impl Precision {
    pub const fn as_str(self) -> &'static str {
        match self {
            Precision::Int8 => "int8",
            Precision::Int16 => "int16",
        }
    }

    /// `int8` or `int16`; the error names both.
    pub fn parse(s: &str) -> Result<Precision, String> {
        match s {
            "int8" => Ok(Precision::Int8),
            "int16" => Ok(Precision::Int16),
            other => Err(format!("{other:?} is not an activation precision: give \"int8\" or \"int16\"")),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The weight formats whose products the activation precision changes
/// (lowercase ggml names): a target with none of them has no precision in
/// its key.
pub const PRECISION_FORMATS: &[&str] = &["q4_k", "q5_k", "q6_k"];

/// Whether a target of these weight formats has a precision in its key.
pub fn precision_applies<S: AsRef<str>>(formats: &[S]) -> bool {
    formats.iter().any(|f| PRECISION_FORMATS.contains(&f.as_ref()))
}

/// The key's precision for a run of a target of `formats` that reported
/// `reported`, on any device (the CPU and CUDA both run the K-quants at
/// either precision): `None` where the precision changes nothing; where it
/// does, the reported one, and 16 bits when none was reported (a table
/// entry, an event or a record from before 8-bit activations, when 16 bits
/// was the only precision).
pub fn key_precision<S: AsRef<str>>(formats: &[S], reported: Option<&str>) -> Result<Option<Precision>, String> {
    if !precision_applies(formats) {
        return Ok(None);
    }
    reported.map_or(Ok(Precision::Int16), Precision::parse).map(Some)
}

/// Which kernels run: `cpu:<arch>-<kernel family>` (`cpu:x86_64-avx512vnni`,
/// `cpu:aarch64-neon`) or `cuda:sm_<digits>[a-z]` (`cuda:sm_90a`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceClass(String);

impl DeviceClass {
    /// Parses a device class; the error says the two shapes.
    pub fn parse(s: &str) -> Result<DeviceClass, String> {
        let word = |w: &str, extra: &[u8]| {
            !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || extra.contains(&b))
        };
        let ok = s.len() <= 64
            && if let Some(rest) = s.strip_prefix("cpu:") {
                match rest.rsplit_once('-') {
                    Some((arch, family)) => word(arch, b"_") && word(family, b""),
                    None => false,
                }
            } else if let Some(sm) = s.strip_prefix("cuda:sm_") {
                let digits = sm.trim_end_matches(|c: char| c.is_ascii_lowercase());
                !digits.is_empty()
                    && digits.len() >= sm.len().saturating_sub(1)
                    && digits.bytes().all(|b| b.is_ascii_digit())
            } else {
                false
            };
        if ok {
            Ok(DeviceClass(s.to_string()))
        } else {
            Err(format!(
                "{s:?} is not a device class: write cpu:<arch>-<kernel family> (e.g. cpu:x86_64-avx2) \
                 or cuda:sm_<major><minor> (e.g. cuda:sm_90)"
            ))
        }
    }

    /// Whether CPU kernels run (the key then holds a thread count).
    pub fn is_cpu(&self) -> bool {
        self.0.starts_with("cpu:")
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeviceClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for DeviceClass {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DeviceClass {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        DeviceClass::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// The target model as the key holds it: its architecture (`llama`,
/// `gemma3`, `qwen2`: GGUF `general.architecture`, or the Hugging Face
/// `model_type`) and its parameter count (every element of every weight
/// tensor in the file, a tied head counted once).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ModelClass {
    pub architecture: String,
    pub parameters: u64,
}

impl ModelClass {
    /// `134.5M`, `1.54B`: the count as people say it.
    pub fn size(&self) -> String {
        let p = self.parameters as f64;
        if self.parameters == 0 {
            "(size unknown)".to_string()
        } else if p >= 1e9 {
            format!("{:.2}B", p / 1e9)
        } else if p >= 1e6 {
            format!("{:.1}M", p / 1e6)
        } else {
            format!("{}", self.parameters)
        }
    }

    /// The architecture as a table spells it: lowercase `[a-z0-9_.-]`,
    /// 1..=64 bytes.
    pub fn check_architecture(s: &str) -> Result<(), String> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
        if ok { Ok(()) } else { Err(format!("{s:?} is not an architecture name (lowercase, e.g. llama, gemma3)")) }
    }
}

impl fmt::Display for ModelClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.architecture, self.size())
    }
}

/// Everything a measured width depended on. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct PolicyKey {
    pub drafter: DrafterKind,
    pub device: DeviceClass,
    pub host: HostClass,
    /// The target's quantization class (`q4_1`, `nvfp4`, ...).
    pub quant: String,
    /// The K-quant matrices' activation precision; `None` where it changes
    /// nothing (no K-quant matrix, or a CUDA device).
    pub precision: Option<Precision>,
    pub model: ModelClass,
    /// CPU worker threads; `None` on CUDA device classes.
    pub threads: Option<usize>,
    /// Sequences decoding at once when measured: 1 (an idle server,
    /// `generate`) or a bucket above it (module docs).
    pub concurrency: usize,
}

/// `a q4_1`, `an nvfp4`: the article English uses before a class name read
/// letter by letter (or as a word, for `affine` and `unknown`).
pub fn article(class: &str) -> &'static str {
    let mut c = class.chars();
    let (first, second) = (c.next().unwrap_or('x'), c.next().unwrap_or('x'));
    let vowel = |ch: char| "aeiou".contains(ch);
    let an = match first {
        'a' | 'e' | 'i' | 'o' => true,
        'u' => class.starts_with("un"),
        // Read as letters (ef, aitch, el, em, en, ar, es, ex) unless they start a word.
        'f' | 'h' | 'l' | 'm' | 'n' | 'r' | 's' | 'x' => !vowel(second),
        _ => false,
    };
    if an { "an" } else { "a" }
}

/// `, 4 sequences at once`, or nothing at concurrency 1.
pub fn at_concurrency(concurrency: usize) -> String {
    if concurrency > 1 { format!(", {concurrency} sequences at once") } else { String::new() }
}

/// ` at 2 threads`, ` at 1 thread`, or nothing (a CUDA key).
pub fn at_threads(threads: Option<usize>) -> String {
    match threads {
        Some(1) => " at 1 thread".to_string(),
        Some(n) => format!(" at {n} threads"),
        None => String::new(),
    }
}

impl PolicyKey {
    /// The key without the host and the model: the entries that may stand
    /// in for it on another CPU or for another model share it.
    pub fn same_measurement(&self, other: &PolicyKey) -> bool {
        self.drafter == other.drafter
            && self.device == other.device
            && self.quant == other.quant
            && self.precision == other.precision
            && self.threads == other.threads
            && self.concurrency == other.concurrency
    }

    /// This key at `concurrency` sequences at once.
    pub fn at(&self, concurrency: usize) -> PolicyKey {
        PolicyKey { concurrency, ..self.clone() }
    }
}

impl fmt::Display for PolicyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} ({}) with {} {} {} target{}{}{}",
            self.drafter,
            self.device,
            self.host,
            article(&self.quant),
            self.quant,
            self.model,
            self.precision.map_or(String::new(), |p| format!(" ({p} activations)")),
            at_threads(self.threads),
            at_concurrency(self.concurrency)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(host: &str, params: u64, threads: Option<usize>) -> PolicyKey {
        PolicyKey {
            drafter: DrafterKind::Ngram,
            device: DeviceClass::parse("cpu:x86_64-avx512vnni").unwrap(),
            host: HostClass::parse(host).unwrap(),
            quant: "q4_1".into(),
            precision: None,
            model: ModelClass { architecture: "llama".into(), parameters: params },
            threads,
            concurrency: 1,
        }
    }

    #[test]
    fn the_key_phrase_names_every_part() {
        assert_eq!(
            key("amd-zen4", 134_515_008, Some(2)).to_string(),
            "ngram on cpu:x86_64-avx512vnni (amd-zen4) with a q4_1 llama 134.5M target at 2 threads"
        );
        let mut k = key("intel-sapphire-rapids", 1_543_714_304, Some(1));
        k.quant = "nvfp4".into();
        assert_eq!(
            k.to_string(),
            "ngram on cpu:x86_64-avx512vnni (intel-sapphire-rapids) with an nvfp4 llama 1.54B target at 1 thread"
        );
        assert_eq!(
            key("amd-zen4", 134_515_008, Some(2)).at(4).to_string(),
            "ngram on cpu:x86_64-avx512vnni (amd-zen4) with a q4_1 llama 134.5M target at 2 threads, 4 sequences at once"
        );
        let k = PolicyKey {
            quant: "q4_k_m".into(),
            precision: Some(Precision::Int8),
            ..key("amd-zen4", 1_543_714_304, Some(1))
        };
        assert_eq!(
            k.to_string(),
            "ngram on cpu:x86_64-avx512vnni (amd-zen4) with a q4_k_m llama 1.54B target (int8 activations) at 1 thread"
        );
    }

    #[test]
    fn keys_differ_exactly_when_their_phrases_do() {
        let a = key("amd-zen4", 134_515_008, Some(2));
        for b in [
            key("amd-zen5", 134_515_008, Some(2)),
            key("amd-zen4", 268_098_176, Some(2)),
            key("amd-zen4", 134_515_008, Some(1)),
            key("amd-zen4", 134_515_008, Some(2)).at(2),
            PolicyKey { precision: Some(Precision::Int16), ..key("amd-zen4", 134_515_008, Some(2)) },
        ] {
            assert_ne!(a, b);
            assert_ne!(a.to_string(), b.to_string());
        }
        assert!(a.same_measurement(&key("amd-zen5", 268_098_176, Some(2))));
        assert!(!a.same_measurement(&key("amd-zen4", 134_515_008, Some(1))));
        assert!(!a.same_measurement(&a.at(4)), "a bucket never stands in for an idle server");
    }

    #[test]
    fn device_classes_parse_once_and_bad_ones_say_the_shapes() {
        for ok in ["cpu:x86_64-avx2", "cpu:aarch64-neon", "cuda:sm_90", "cuda:sm_90a", "cuda:sm_121"] {
            assert_eq!(DeviceClass::parse(ok).unwrap().as_str(), ok);
        }
        assert!(DeviceClass::parse("cpu:x86_64-avx2").unwrap().is_cpu());
        assert!(!DeviceClass::parse("cuda:sm_90").unwrap().is_cpu());
        for bad in ["", "cpu", "cpu:avx2", "gpu:sm_90", "cuda:sm_", "cuda:sm_9ab", "CPU:x86_64-avx2"] {
            let e = DeviceClass::parse(bad).unwrap_err();
            assert!(e.contains("cpu:<arch>-<kernel family>"), "{e}");
        }
    }
}
