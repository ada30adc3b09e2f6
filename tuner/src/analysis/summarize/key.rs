//! The key step: what the complete arms' `startup` events say the record
//! measured (device, quantization, fingerprints, threads, drafter settings,
//! host, model), each of which must agree across arms, and which arms ran
//! inexact or were no classic baseline.
use std::collections::BTreeSet;
use std::fmt::Debug;

use policy::{DeviceClass, DrafterKind, DrafterSettings, HostClass, ModelClass, PolicyKey};
use runtime::events::Startup;

use crate::analysis::rules;
use crate::analysis::summary::OkArms;
use crate::data::raw::{RawFile, RawLine};

/// What the key step gives the summary.
pub(super) struct Key {
    pub device_class: Option<String>,
    pub target_quant: Option<String>,
    pub target_quant_format: Option<String>,
    pub threads: Option<usize>,
    /// The K-quant activation precision the arms reported (`int8`,
    /// `int16`); `None` in events before the field (16-bit activations, the
    /// only precision then) and where it changes nothing.
    pub precision: Option<String>,
    pub drafter_settings: Option<DrafterSettings>,
    pub weight_formats: Option<Vec<String>>,
    pub kernel_fingerprint: Option<String>,
    pub verify_fingerprint: Option<String>,
    pub host_class: Option<String>,
    pub host_class_from: Option<String>,
    pub model: Option<ModelClass>,
    pub model_file: Option<(String, String)>,
    /// Why the record has no key, every reason found.
    pub problems: Vec<String>,
    pub inexact_arms: Vec<usize>,
}

impl Key {
    /// The record's policy key, typed once here (every reader of the record
    /// takes it from [`crate::analysis::summary::Summary::key`]), or what is
    /// missing or malformed. The strings above are what the record states.
    pub fn policy_key(
        &self,
        drafter: DrafterKind,
        problem: Option<&str>,
        concurrency: usize,
    ) -> Result<PolicyKey, String> {
        let missing = || problem.unwrap_or("missing").to_string();
        let (Some(device), Some(quant), Some(host), Some(model)) =
            (&self.device_class, &self.target_quant, &self.host_class, &self.model)
        else {
            return Err(missing());
        };
        let device = DeviceClass::parse(device)?;
        let host = HostClass::parse(host)?;
        let threads = match (device.is_cpu(), self.threads) {
            (true, Some(t)) => Some(t),
            (true, None) => return Err("the arms report no thread count".into()),
            (false, _) => None,
        };
        // As the table reads an entry without one: where the precision
        // applies, an event without it ran 16-bit activations.
        let formats = self.weight_formats.as_deref().unwrap_or_default();
        let precision = policy::key::key_precision(formats, self.precision.as_deref())?;
        Ok(PolicyKey {
            drafter,
            device,
            host,
            quant: quant.clone(),
            precision,
            model: model.clone(),
            threads,
            concurrency,
        })
    }
}

/// Each value the complete arms reported, typed (a set per field; the
/// drafter settings of speculative arms only).
#[derive(Default)]
struct Reported {
    device: BTreeSet<String>,
    quant: BTreeSet<String>,
    quant_format: BTreeSet<Option<String>>,
    kernel_fingerprint: BTreeSet<String>,
    verify_fingerprint: BTreeSet<String>,
    threads: BTreeSet<usize>,
    precision: BTreeSet<Option<String>>,
    settings: Vec<Option<DrafterSettings>>,
    formats: BTreeSet<Vec<String>>,
    hosts: BTreeSet<Option<String>>,
    models: BTreeSet<(String, u64)>,
    inexact_arms: Vec<usize>,
    not_classic: Vec<String>,
}

impl Reported {
    fn add(&mut self, arm: usize, speculative: bool, s: &Startup) {
        self.device.insert(s.device_class.clone());
        self.quant.insert(s.target.quant.class.clone());
        self.kernel_fingerprint.insert(s.kernel_fingerprint.clone());
        self.verify_fingerprint.insert(s.verify_fingerprint.clone());
        self.quant_format.insert(s.target.quant.format.clone());
        self.threads.insert(s.threads);
        self.precision.insert(s.precision.clone());
        self.formats.insert(s.target.weight_formats.clone());
        self.hosts.insert(s.host_class.clone());
        self.models.insert((s.target.architecture.clone(), s.target.parameters));
        if speculative {
            if !self.settings.contains(&s.drafter_settings) {
                self.settings.push(s.drafter_settings.clone());
            }
        } else if let Some(how) = rules::classic_arm_speculated(s) {
            self.not_classic.push(format!("{arm} ({how})"));
        }
        if rules::ran_inexact(s) {
            self.inexact_arms.push(arm);
        }
    }
}

/// The one value every arm reported, or a problem saying none did or they
/// disagreed.
fn one<T: Clone + Debug>(
    values: impl ExactSizeIterator<Item = T>,
    what: &str,
    problems: &mut Vec<String>,
) -> Option<T> {
    let values: Vec<T> = values.collect();
    match values.len() {
        1 => values.into_iter().next(),
        0 => {
            problems.push(format!("no complete arm reported its {what}"));
            None
        }
        _ => {
            problems.push(format!("arms disagree on the {what}: {values:?}"));
            None
        }
    }
}

/// A field the runtime reports since the schema-2 policy table: empty in
/// older records, which then have no key a schema-2 entry can hold.
fn newer<T>(v: Option<T>, empty: impl Fn(&T) -> bool, what: &str, problems: &mut Vec<String>) -> Option<T> {
    match v {
        Some(x) if empty(&x) => {
            problems.push(format!(
                "the arms report no {what} (recorded by a runtime older than the schema-2 policy table); re-measure \
                 with this build"
            ));
            None
        }
        other => other,
    }
}

/// The key step over the startup events of the complete arms' latest attempts.
pub(super) fn key(raw: &RawFile, ok_arms: &OkArms<'_>) -> Key {
    let h = &raw.header;
    let speculative: BTreeSet<usize> = h.plan.iter().filter(|a| a.width.is_some()).map(|a| a.index).collect();
    let mut r = Reported::default();
    for l in &raw.lines {
        if let RawLine::Startup(s) = l
            && ok_arms.get(&s.arm).is_some_and(|(a, _)| *a == s.attempt)
        {
            r.add(s.arm, speculative.contains(&s.arm), &s.startup);
        }
    }
    let mut p = Vec::new();
    let device_class = one(r.device.into_iter(), "device class", &mut p);
    let target_quant = one(r.quant.into_iter(), "target quantization class", &mut p);
    let kernel_fingerprint = one(r.kernel_fingerprint.into_iter(), "kernel fingerprint", &mut p);
    if !r.not_classic.is_empty() {
        p.push(format!(
            "classic arm(s) did not decode classically: {}; their rates are no baseline",
            r.not_classic.join("; ")
        ));
    }
    let verify_fp = one(r.verify_fingerprint.into_iter(), "verify-path fingerprint", &mut p);
    let verify_fingerprint = newer(verify_fp, String::is_empty, "verify-path fingerprint", &mut p);
    let formats = one(r.formats.into_iter(), "weight formats", &mut p);
    let weight_formats = newer(formats, |f| f.is_empty(), "weight formats", &mut p);
    let target_quant_format = one(r.quant_format.into_iter(), "quantization format", &mut p).flatten();
    let threads = one(r.threads.into_iter(), "thread count", &mut p);
    let precision = one(r.precision.into_iter(), "activation precision", &mut p).flatten();
    let settings = one(r.settings.into_iter(), "drafter settings", &mut p);
    let drafter_settings = newer(settings, Option::is_none, "drafter settings", &mut p).flatten();
    let (host_class, host_class_from) = host(one(r.hosts.into_iter(), "host class", &mut p), raw, &mut p);
    let model = match one(r.models.into_iter(), "target model (architecture and parameter count)", &mut p) {
        Some((architecture, parameters)) if parameters > 0 => Some(ModelClass { architecture, parameters }),
        Some(_) => {
            p.push("the arms report no parameter count (events before schema 2); re-measure with this build".into());
            None
        }
        None => None,
    };
    let model_file = h.identity.models.first().and_then(|m| {
        let name = std::path::Path::new(&m.path).file_name()?.to_str()?.to_string();
        Some((name, m.sha256.value.clone()?))
    });
    if model_file.is_none() {
        p.push("the identity has no sha256 of the target model".into());
    }
    if let (Some(want), Some(got)) = (&h.settings.drafter_settings, &drafter_settings)
        && want != got
    {
        p.push(format!(
            "the speculative arms ran with drafter settings {} but the sweep passed {}",
            got.describe(),
            want.describe()
        ));
    }
    Key {
        device_class,
        target_quant,
        target_quant_format,
        threads,
        precision,
        drafter_settings,
        weight_formats,
        kernel_fingerprint,
        verify_fingerprint,
        host_class,
        host_class_from,
        model,
        model_file,
        problems: p,
        inexact_arms: r.inexact_arms,
    }
}

/// The host class and where it came from: the arms' events, or (for arms
/// before events schema 2, which report none) the identity's CPU signature.
fn host(reported: Option<Option<String>>, raw: &RawFile, p: &mut Vec<String>) -> (Option<String>, Option<String>) {
    match reported {
        Some(Some(c)) if !c.is_empty() => (Some(c), Some("the arms' startup events".to_string())),
        Some(_) => match raw.header.identity.cpu.signature.value.as_deref().and_then(HostClass::from_signature) {
            Some(c) => {
                (Some(c.to_string()), Some("the identity's CPU signature (the arms predate events schema 2)".into()))
            }
            None => {
                p.push(
                    "the record names no CPU: its arms report no host class (events before schema 2) and its identity \
                     has no CPU signature; re-measure with this build"
                        .into(),
                );
                (None, None)
            }
        },
        None => (None, None),
    }
}
