//! `runtime policy show` and `runtime policy explain`: the compiled table
//! with each entry's freshness for this build, and what `generate` would do
//! for a target on this host, resolved step by step. A GGUF target is read
//! for its metadata and tensor infos only; a Hugging Face directory is
//! loaded (its weight formats are what the loader makes of it).

use crate::checkpoint::{classify_path, read_declared};
use crate::policy::{KERNEL_FINGERPRINT, compiled_resolver, host_class_here};
use anyhow::{Result, bail};
use policy::key::MAX_THREADS;
use policy::{
    DeviceClass, DrafterKind, DrafterSettings, EnvWidth, HostClass, ModelClass, Probability, QuantClass, Resolution,
    ResolveInput, Resolver, Run, env_override, table, width,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What `policy explain` is asked, as given (`runtime policy explain
/// --help` says what each field is; [`explain_command`] checks them).
#[derive(Debug, Clone)]
pub struct ExplainSettings {
    /// A GGUF file, a Hugging Face checkpoint directory or a known model's
    /// name; `None`: the default model (`generate` without `-m`).
    pub target: Option<PathBuf>,
    /// A table file (`--policy`, as `generate` takes it) to explain against
    /// in place of the compiled one; `None`: the compiled table.
    pub policy: Option<PathBuf>,
    /// A drafter kind, or `none`; `None`: what `generate` does without one.
    pub drafter: Option<String>,
    /// `None`: the CPUs available to this process.
    pub threads: Option<usize>,
    /// `--precision` as given (`None`: int8).
    pub precision: Option<String>,
    pub ngram_min: Option<usize>,
    pub ngram_max: Option<usize>,
    pub suffix_min_match: Option<usize>,
    pub suffix_max_match: Option<usize>,
    pub suffix_min_prob: Option<f64>,
    /// The drafter checkpoint, read for a declared width only.
    pub drafter_model: Option<PathBuf>,
    /// A device class (`None`: this host's).
    pub device: Option<String>,
    /// A host (CPU) class (`None`: this host's).
    pub host_class: Option<String>,
    /// The operator's width override, as given.
    pub draft_width: Option<String>,
    pub json: bool,
}

/// A table entry with whether this build would use it.
#[derive(Serialize)]
struct ShownEntry<'a> {
    #[serde(flatten)]
    entry: &'a table::Entry,
    stale: bool,
    /// This build's fingerprint for the entry's key.
    build_fingerprint: String,
}

#[derive(Serialize)]
struct Shown<'a> {
    file: &'a str,
    schema_version: u32,
    kernel_fingerprint: &'a str,
    entries: Vec<ShownEntry<'a>>,
    per_kind_defaults: BTreeMap<&'static str, policy::Width>,
}

fn per_kind_defaults() -> BTreeMap<&'static str, policy::Width> {
    DrafterKind::ALL.iter().map(|k| (k.as_str(), k.default_width())).collect()
}

/// What `policy explain` found.
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    pub target: PathBuf,
    /// The key's quantization class: the target's.
    pub target_quant: QuantClass,
    /// The target's weight formats (`None`: unreadable, so every format's
    /// kernels count in the fingerprint).
    pub weight_formats: Option<Vec<String>>,
    pub threads: usize,
    /// The K-quant activation precision of the key (`None`: no K-quant
    /// matrix, or a CUDA device: it changes nothing).
    pub precision: Option<::policy::Precision>,
    /// The key's model part (architecture and parameter count).
    pub model: ModelClass,
    /// This build's verify-path fingerprint for the key.
    pub verify_fingerprint: String,
    /// What `generate` does with these flags: the policy's answer without
    /// `--drafter`, the named drafter's resolution with it.
    pub generate: Resolution,
    pub drafter_model: Option<PathBuf>,
    /// The drafter's own class, shown for contrast; never part of the key.
    pub drafter_quant: Option<QuantClass>,
    pub device_class: DeviceClass,
    /// `--device`, or the kernel family this host selects.
    pub device_from: String,
    pub host_class: HostClass,
    /// `--host-class`, or this host's CPU signature.
    pub host_from: String,
    pub table_file: String,
    pub table_entries: usize,
    pub resolutions: Vec<Resolution>,
}

/// The model class and weight formats of a target, as the loader will see
/// them (`None`: unreadable). A GGUF file is read for its metadata and
/// tensor infos only.
fn model_of(target: &Path) -> Option<(ModelClass, Vec<String>)> {
    if target.is_dir() {
        return crate::model::load(target).ok().map(|l| (l.info.model_class(), l.info.weight_formats));
    }
    let f = crate::gguf::GgufFile::open(target).ok()?;
    let architecture = f.get_str("general.architecture").ok()?.to_string();
    let model = ModelClass { architecture, parameters: crate::model::gguf_load::parameters(&f) };
    Some((model, crate::model::gguf_load::weight_formats(&f)))
}

/// What `policy explain` is asked.
#[derive(Clone, Copy, Debug)]
pub struct Question<'a> {
    pub target: &'a Path,
    pub drafter_model: Option<&'a Path>,
    /// `--drafter` as given (`None`: the policy decides; `none`: classic).
    pub drafter: Option<&'a str>,
    pub device_class: &'a DeviceClass,
    pub device_from: &'a str,
    pub host_class: &'a HostClass,
    pub host_from: &'a str,
    pub threads: usize,
    /// The run's activation precision (`--precision`).
    pub precision: kernels::act8::Precision,
    pub settings: &'a DrafterSettings,
    pub flag: Option<&'a str>,
    pub env: Option<&'a EnvWidth>,
}

/// Classifies the target (and the drafter model, for contrast), answers
/// what `generate` would do, and resolves the width for each kind (only the
/// named one when `--drafter` names one).
pub fn explain(resolver: &Resolver<'_>, q: &Question<'_>) -> Result<Explanation> {
    let target_quant = classify_path(q.target);
    let drafter_quant = q.drafter_model.map(classify_path);
    let found = model_of(q.target);
    let model = found
        .as_ref()
        .map_or_else(|| ModelClass { architecture: "unreadable".into(), parameters: 0 }, |(m, _)| m.clone());
    let weight_formats = found.map(|(_, f)| f);
    let precision = weight_formats.as_deref().and_then(|f| crate::policy::key_precision(f, q.precision));
    let run = Run {
        device: q.device_class,
        host: q.host_class,
        quant: &target_quant,
        model: &model,
        file: q.target.file_name().and_then(|n| n.to_str()),
        threads: q.threads,
        weight_formats: weight_formats.as_deref(),
        precision,
    };
    let named: Option<DrafterKind> = match q.drafter {
        None | Some("none") => None,
        Some(k) => Some(k.parse().map_err(|e| anyhow::anyhow!("--drafter: {e} (or none)"))?),
    };
    let kinds: Vec<DrafterKind> = named.map_or_else(|| DrafterKind::ALL.to_vec(), |k| vec![k]);
    let mut resolutions = Vec::with_capacity(kinds.len());
    for &kind in &kinds {
        let declared = read_declared(kind, q.drafter_model, q.target);
        let settings = if Some(kind) == named { q.settings.clone() } else { DrafterSettings::default() };
        let input =
            ResolveInput { drafter: kind, declared: &declared, run, settings: &settings, flag: q.flag, env: q.env };
        resolutions.push(resolver.resolve(&input)?);
    }
    let generate = match (q.drafter, named) {
        (Some("none"), _) => Resolution::no_drafter(),
        (_, Some(_)) => resolutions[0].clone(),
        (_, None) => resolver.auto(&run),
    };
    let verify_fingerprint = resolver.key_fingerprint(&run);
    Ok(Explanation {
        target: q.target.to_path_buf(),
        target_quant,
        verify_fingerprint,
        weight_formats,
        threads: q.threads,
        precision,
        model,
        generate,
        drafter_model: q.drafter_model.map(Path::to_path_buf),
        drafter_quant,
        device_class: q.device_class.clone(),
        device_from: q.device_from.to_string(),
        host_class: q.host_class.clone(),
        host_from: q.host_from.to_string(),
        table_file: resolver.table.file.clone(),
        table_entries: resolver.table.entries.len(),
        resolutions,
    })
}

/// `runtime policy show`: the compiled table.
pub fn show(json: bool) -> Result<ExitCode> {
    print_table(&compiled_resolver(), json);
    Ok(ExitCode::SUCCESS)
}

/// `runtime policy explain`: the settings checked, then [`explain`] with the
/// compiled table, printed.
/// `--target`'s file: a path, or a known model's name (`qwen2.5-coder-1.5b`)
/// for its file in the model cache. Explaining never downloads: a known
/// model that is not cached names the command that fetches it.
/// A model flag's value as `policy explain` reads it: an existing path is
/// itself, a known model's name its file in the cache (explain reads files,
/// it never fetches); anything else is an error naming `flag`.
fn explain_model(flag: &str, value: &Path) -> Result<PathBuf> {
    if value.exists() {
        return Ok(value.to_path_buf());
    }
    let Some(spec) = value.to_str().and_then(crate::fetch::find_model) else {
        bail!(
            "{flag} {}: no such file or directory (nor a known model: {})",
            value.display(),
            crate::fetch::model_names()
        );
    };
    let p = crate::fetch::default_cache_dir()?.join(spec.file_name);
    if !p.is_file() {
        bail!(
            "{flag} {}: the known model is not in the cache ({}); fetch it with `runtime fetch-model --model {}`",
            spec.name,
            p.display(),
            spec.name
        );
    }
    Ok(p)
}

pub fn explain_command(a: ExplainSettings) -> Result<ExitCode> {
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 || threads > MAX_THREADS {
        bail!("--threads {threads}: give 1..={MAX_THREADS}");
    }
    crate::speculative::setup::bound_ngram_flags(a.ngram_min, a.ngram_max)?;
    crate::speculative::setup::bound_suffix_flags(a.suffix_min_match, a.suffix_max_match, a.suffix_min_prob)?;
    let settings = DrafterSettings {
        ngram_min: a.ngram_min,
        ngram_max: a.ngram_max,
        suffix_min_match: a.suffix_min_match,
        suffix_max_match: a.suffix_max_match,
        suffix_min_prob: a.suffix_min_prob.map(Probability),
        ..Default::default()
    };
    let (device, device_from) = match &a.device {
        Some(d) => (DeviceClass::parse(d).map_err(|e| anyhow::anyhow!("--device: {e}"))?, "--device".to_string()),
        None => {
            let s = kernels::dispatch::selected()?;
            let how = if s.forced { "forced by DRAFTWISE_KERNELS" } else { "selected on this host" };
            let d = DeviceClass::parse(&s.family.device_class()).map_err(anyhow::Error::msg)?;
            (d, format!("kernel family {} {how}", s.family.name()))
        }
    };
    let (host_class, host_from) = match &a.host_class {
        Some(h) => (HostClass::parse(h).map_err(|e| anyhow::anyhow!("--host-class: {e}"))?, "--host-class".to_string()),
        None => (host_class_here(), "this host's CPU signature (/proc/cpuinfo)".to_string()),
    };
    // Without -m, the model `generate` runs without one (looked up in the
    // cache, never fetched: explaining runs nothing).
    let target = match &a.target {
        Some(t) => explain_model("--model", t)?,
        None => explain_model("--model (default)", Path::new(crate::fetch::DEFAULT_MODEL.name))?,
    };
    // The drafter checkpoint by name too, as `generate --drafter-model` takes it.
    let drafter_model = a.drafter_model.as_deref().map(|p| explain_model("--drafter-model", p)).transpose()?;
    let env = env_override()?;
    let q = Question {
        target: &target,
        drafter_model: drafter_model.as_deref(),
        drafter: a.drafter.as_deref(),
        device_class: &device,
        device_from: &device_from,
        host_class: &host_class,
        host_from: &host_from,
        threads,
        precision: crate::open::parse_precision(a.precision.as_deref())?,
        settings: &settings,
        flag: a.draft_width.as_deref(),
        env: env.as_ref(),
    };
    // `--policy FILE`: the table a proposal wrote, checked as `generate
    // --policy` checks it, so an entry is explained before a rebuild.
    let table = a
        .policy
        .as_deref()
        .map(|p| {
            let mut t = crate::speculative::setup::load_policy_file(p)?;
            t.file = format!("{} (--policy, not the compiled table)", t.file);
            anyhow::Ok(t)
        })
        .transpose()?;
    let e = match &table {
        Some(t) => explain(&Resolver { table: t, fingerprint: &crate::policy::verify_fingerprint }, &q)?,
        None => explain(&compiled_resolver(), &q)?,
    };
    if a.json {
        println!("{}", serde_json::to_string(&e)?);
    } else {
        print!("{}", render(&e));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(r: &Resolver<'_>, json: bool) {
    let t = r.table;
    let build_fp = |e: &table::Entry| (r.fingerprint)(&e.key.device, Some(&e.weight_formats));
    if json {
        let shown = Shown {
            file: &t.file,
            schema_version: t.schema_version,
            kernel_fingerprint: KERNEL_FINGERPRINT,
            entries: t
                .entries
                .iter()
                .map(|e| ShownEntry { entry: e, stale: !r.is_fresh(e), build_fingerprint: build_fp(e) })
                .collect(),
            per_kind_defaults: per_kind_defaults(),
        };
        println!("{}", serde_json::to_string(&shown).expect("the table serializes"));
        return;
    }
    let here = host_class_here();
    println!(
        "{}: schema {}, {} entries; this build's verify-path fingerprint is {KERNEL_FINGERPRINT} (all parts); \
         this host is {here}",
        t.file,
        t.schema_version,
        t.entries.len()
    );
    // Grouped by the CPU they were measured on, this host's first.
    let mut hosts: Vec<&HostClass> = t.entries.iter().map(|e| &e.key.host).collect();
    hosts.sort_by_key(|h| (**h != here, h.as_str()));
    hosts.dedup();
    for h in hosts {
        let mark = if *h == here { " (this host)" } else { "" };
        println!("measured on {h}{mark}:");
        for e in t.entries.iter().filter(|e| e.key.host == *h) {
            let state = if r.is_fresh(e) {
                format!("fresh, {} (fingerprint {})", e.basis_words(&build_fp(e)), e.verify_fingerprint)
            } else {
                format!("STALE, not used: measured with {}, this build has {}", e.verify_fingerprint, build_fp(e))
            };
            println!(
                "  {}: width {}, {:.2}x [{:.2}, {:.2}], {}; model {} (sha256 {}), prompts {}; {}, {}; formats [{}]; \
                 {state}  ({})",
                e.key,
                match e.drafting {
                    Some(policy::Drafting::Adaptive { max }) => format!("adaptive 0..={max}"),
                    d => width::label(d.map(policy::Drafting::max)),
                },
                e.ratio,
                e.ratio_interval[0],
                e.ratio_interval[1],
                e.drafter_settings.describe(),
                e.model.file,
                &e.model.sha256[..12],
                e.prompts.name,
                e.record,
                e.date,
                e.weight_formats.join(", "),
                e.host
            );
            for c in &e.verify_cost {
                println!("    verify pass against one row, {}", c.describe());
            }
        }
    }
    let defaults: Vec<String> = DrafterKind::ALL.iter().map(|k| format!("{k} {}", k.default_width())).collect();
    println!("per-kind defaults (a named drafter with no usable entry): {}", defaults.join(", "));
    println!(
        "without --drafter, runtime speculates only where a fresh entry of a weight-free drafter beats classic; \
         an entry of another CPU or model applies only when its whole interval is above 1.0"
    );
}

/// The human form of an [`Explanation`].
pub fn render(e: &Explanation) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let q = &e.target_quant;
    let _ = writeln!(s, "target        {}", e.target.display());
    let _ = writeln!(s, "  quant class {}", q.class);
    let _ = writeln!(s, "  evidence    {}", q.from);
    if let Some(f) = &q.file {
        let _ = writeln!(
            s,
            "  read        {}{}",
            f.display(),
            q.field.as_ref().map_or(String::new(), |x| format!(": {x}"))
        );
    }
    if let (Some(p), Some(dq)) = (&e.drafter_model, &e.drafter_quant) {
        let _ = writeln!(
            s,
            "drafter model {} ({}; not part of the key, which uses the target's class)",
            p.display(),
            dq.class
        );
    }
    let _ = writeln!(s, "device class  {} ({})", e.device_class, e.device_from);
    let _ = writeln!(s, "host class    {} ({})", e.host_class, e.host_from);
    let _ = writeln!(s, "model         {} ({} parameters)", e.model, e.model.parameters);
    let _ = writeln!(s, "threads       {}", e.threads);
    let precision = e.precision.map_or("none in the key (no K-quant matrix, or not a CPU)".to_string(), |p| {
        format!("{p} activations for the K-quant matrices (--precision)")
    });
    let _ = writeln!(s, "precision     {precision}");
    let formats =
        e.weight_formats.as_ref().map_or("unreadable (every format's kernels count)".into(), |f| f.join(", "));
    let _ = writeln!(s, "formats       {formats}");
    let _ = writeln!(s, "fingerprint   {} (verify path, this key)", e.verify_fingerprint);
    let _ = writeln!(s, "table         {}, {} entries", e.table_file, e.table_entries);
    let g = &e.generate;
    let what = match (g.drafter, g.width) {
        (Some(k), Some(n)) if g.entry().and_then(|x| x.drafting).is_some_and(policy::Drafting::is_adaptive) => {
            format!("speculate with {k}, each round's draft length chosen in 0..={n} (the entry chose adaptive)")
        }
        (Some(k), Some(n)) => format!("speculate with {k} at width {n}"),
        (Some(k), None) => format!("load {k} but decode classically"),
        (None, _) => "decode classically".to_string(),
    };
    let settings = g.drafter_settings.as_ref().map_or(String::new(), |d| format!(" ({})", d.describe()));
    let _ = writeln!(s, "\ngenerate would {what}{settings}\n  because: {}", g.width_from);
    for st in &g.steps {
        let mark = if st.decided { "->" } else { "  " };
        let _ = writeln!(s, "  {mark} {}", st.detail);
    }
    if !g.ladder_notes.is_empty() {
        let _ = writeln!(s, "  a server with several sequences at once:");
        for n in &g.ladder_notes {
            let _ = writeln!(s, "     {n}");
        }
    }
    for r in &e.resolutions {
        let kind = r.drafter.map_or("none", |k| k.as_str());
        let w = match (r.width, r.entry().and_then(|x| x.drafting).is_some_and(policy::Drafting::is_adaptive)) {
            (Some(n), true) => format!("adaptive 0..={n}"),
            _ => width::label(r.width),
        };
        let _ = writeln!(s, "\n{kind}: width {w}\n  from: {}", r.width_from);
        for (i, st) in r.steps.iter().enumerate() {
            let mark = if st.decided { "->" } else { "  " };
            let _ = writeln!(s, "  {mark} {}. {:<28} {}", i + 1, st.step.label(), st.detail);
        }
        for n in &r.ladder_notes {
            let _ = writeln!(s, "     under load: {n}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_or_drafter_model_is_a_path_or_a_known_models_name() {
        let f = tempfile::NamedTempFile::new().unwrap();
        assert_eq!(explain_model("--target", f.path()).unwrap(), f.path());
        let e = explain_model("--target", Path::new("no-such-model")).unwrap_err().to_string();
        assert!(e.contains("no such file or directory (nor a known model: smollm2-135m, gemma3-270m"), "{e}");
        // The drafter checkpoint is read the same way, and the message names its flag.
        let e = explain_model("--drafter-model", Path::new("no-such-model")).unwrap_err().to_string();
        assert!(e.starts_with("--drafter-model no-such-model: no such file"), "{e}");
        // A known name is its file in the cache, or a refusal naming the
        // command that fetches it: never a download.
        match explain_model("--target", Path::new("qwen2.5-coder-1.5b")) {
            Ok(p) => assert!(p.ends_with("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"), "{}", p.display()),
            Err(e) => assert!(e.to_string().contains("runtime fetch-model --model qwen2.5-coder-1.5b"), "{e}"),
        }
    }
}
