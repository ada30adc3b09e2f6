//! `runtime policy show` and `runtime policy explain`: the compiled table,
//! and a width resolved step by step for a target, without loading weights
//! (GGUF metadata and tensor infos, or `config.json`, are all it reads).

use super::declared::read_declared;
use super::kind::DrafterKind;
use super::quant::{QuantClass, classify_path};
use super::resolve::{PolicyError, Resolution, ResolveInput, Resolver, env_override};
use super::table::{Table, Width, check_device_class};
use super::{KERNEL_FINGERPRINT, compiled_table};
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Subcommand, Debug, Clone)]
pub enum PolicyCommand {
    /// Print the draft-width table compiled into this binary.
    Show {
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Classify a target's quantization and resolve the draft width step by step.
    Explain(ExplainArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ExplainArgs {
    /// The target: a GGUF file or a Hugging Face checkpoint directory (weights are not loaded).
    #[arg(long)]
    pub target: PathBuf,
    /// Drafter kind (ngram, layerskip, draft-model, dflash, mtp); default: every kind.
    #[arg(long)]
    pub drafter: Option<String>,
    /// The drafter checkpoint (draft-model, dflash): read for a declared width only.
    #[arg(long)]
    pub drafter_model: Option<PathBuf>,
    /// Device class to resolve for (default: this host's, e.g. cpu:x86_64-avx2).
    #[arg(long)]
    pub device: Option<String>,
    /// Operator override, as `generate` takes it (a width 1..=32, or off).
    #[arg(long)]
    pub draft_block_size: Option<String>,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A table entry with whether this build would use it.
#[derive(Serialize)]
struct ShownEntry<'a> {
    #[serde(flatten)]
    entry: &'a super::table::Entry,
    stale: bool,
}

#[derive(Serialize)]
struct Shown<'a> {
    file: &'a str,
    schema_version: u32,
    kernel_fingerprint: &'a str,
    entries: Vec<ShownEntry<'a>>,
    per_kind_defaults: BTreeMap<&'static str, usize>,
}

fn per_kind_defaults() -> BTreeMap<&'static str, usize> {
    DrafterKind::ALL.iter().map(|k| (k.as_str(), k.default_block_size())).collect()
}

/// What `policy explain` found.
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    pub target: PathBuf,
    /// The key's quantization class: the target's.
    pub target_quant: QuantClass,
    pub drafter_model: Option<PathBuf>,
    /// The drafter's own class, shown for contrast; never part of the key.
    pub drafter_quant: Option<QuantClass>,
    pub device_class: String,
    /// `--device`, or the kernel family this host selects.
    pub device_from: String,
    pub kernel_fingerprint: String,
    pub table_file: String,
    pub table_entries: usize,
    pub resolutions: Vec<Resolution>,
}

/// Classifies `target` (and `drafter_model`, for contrast) and resolves the
/// width for each kind in `kinds` against `resolver`.
#[allow(clippy::too_many_arguments)]
pub fn explain(
    resolver: &Resolver<'_>,
    target: &Path,
    drafter_model: Option<&Path>,
    kinds: &[DrafterKind],
    device_class: &str,
    device_from: &str,
    flag: Option<&str>,
    env: Option<&str>,
) -> Result<Explanation, PolicyError> {
    let target_quant = classify_path(target);
    let drafter_quant = drafter_model.map(classify_path);
    let mut resolutions = Vec::with_capacity(kinds.len());
    for &kind in kinds {
        let declared = read_declared(kind, drafter_model, target);
        let input =
            ResolveInput { drafter: kind, declared: &declared, device_class, target_quant: &target_quant, flag, env };
        resolutions.push(resolver.resolve(&input)?);
    }
    Ok(Explanation {
        target: target.to_path_buf(),
        target_quant,
        drafter_model: drafter_model.map(Path::to_path_buf),
        drafter_quant,
        device_class: device_class.to_string(),
        device_from: device_from.to_string(),
        kernel_fingerprint: resolver.kernel_fingerprint.to_string(),
        table_file: resolver.table.file.clone(),
        table_entries: resolver.table.entries.len(),
        resolutions,
    })
}

/// Runs a `policy` subcommand.
pub fn run(cmd: PolicyCommand) -> Result<ExitCode> {
    match cmd {
        PolicyCommand::Show { json } => {
            show(compiled_table(), json);
            Ok(ExitCode::SUCCESS)
        }
        PolicyCommand::Explain(a) => {
            let kinds: Vec<DrafterKind> = match &a.drafter {
                Some(k) => vec![k.parse()?],
                None => DrafterKind::ALL.to_vec(),
            };
            let (device, device_from) = match &a.device {
                Some(d) => {
                    check_device_class(d).map_err(anyhow::Error::msg)?;
                    (d.clone(), "--device".to_string())
                }
                None => {
                    let s = kernels::dispatch::selected()?;
                    let how = if s.forced { "forced by DRAFTWISE_KERNELS" } else { "selected on this host" };
                    (s.family.device_class(), format!("kernel family {} {how}", s.family.name()))
                }
            };
            if !a.target.exists() {
                bail!("--target {}: no such file or directory", a.target.display());
            }
            let env = env_override()?;
            let e = explain(
                &Resolver::compiled(),
                &a.target,
                a.drafter_model.as_deref(),
                &kinds,
                &device,
                &device_from,
                a.draft_block_size.as_deref(),
                env.as_deref(),
            )?;
            if a.json {
                println!("{}", serde_json::to_string(&e)?);
            } else {
                print!("{}", render(&e));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn show(t: &Table, json: bool) {
    if json {
        let shown = Shown {
            file: &t.file,
            schema_version: t.schema_version,
            kernel_fingerprint: KERNEL_FINGERPRINT,
            entries: t
                .entries
                .iter()
                .map(|e| ShownEntry { entry: e, stale: e.kernel_fingerprint != KERNEL_FINGERPRINT })
                .collect(),
            per_kind_defaults: per_kind_defaults(),
        };
        println!("{}", serde_json::to_string(&shown).expect("the table serializes"));
        return;
    }
    println!(
        "{}: schema {}, {} entries; this build's kernel fingerprint is {KERNEL_FINGERPRINT}",
        t.file,
        t.schema_version,
        t.entries.len()
    );
    for e in &t.entries {
        let width = match e.block_size {
            Width::Blocks(n) => n.to_string(),
            Width::Off => "off".into(),
        };
        let stale = if e.kernel_fingerprint != KERNEL_FINGERPRINT { " STALE (not used)" } else { "" };
        println!(
            "  {:<11} {:<24} {:<10} width {:<3} {:.2}x [{:.2}, {:.2}]  {}  {}  kernels {}{stale}  ({})",
            e.drafter.as_str(),
            e.device_class,
            e.target_quant,
            width,
            e.ratio,
            e.ratio_interval[0],
            e.ratio_interval[1],
            e.date,
            e.record,
            e.kernel_fingerprint,
            e.host
        );
    }
    let defaults: Vec<String> = DrafterKind::ALL.iter().map(|k| format!("{k} {}", k.default_block_size())).collect();
    println!("per-kind defaults (no entry, or a stale one): {}", defaults.join(", "));
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
    let _ = writeln!(s, "kernels       fingerprint {}", e.kernel_fingerprint);
    let _ = writeln!(s, "table         {}, {} entries", e.table_file, e.table_entries);
    for r in &e.resolutions {
        let kind = r.drafter.map_or("none", |k| k.as_str());
        let width = r.block_size.map_or("off".to_string(), |n| n.to_string());
        let _ = writeln!(s, "\n{kind}: block_size {width}\n  from: {}", r.block_size_from);
        for (i, st) in r.steps.iter().enumerate() {
            let mark = if st.decided { "->" } else { "  " };
            let _ = writeln!(s, "  {mark} {}. {:<28} {}", i + 1, st.step.label(), st.detail);
        }
    }
    s
}
