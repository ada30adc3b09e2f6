//! Target quantization classification: the third part of a policy key.
//!
//! Classification never fails and always says why: every path returns a
//! [`QuantClass`] with the class, a sentence of evidence, and the file and
//! field it read. `unknown` is reserved for a target whose config is missing
//! or unreadable, and its `from` says which, so "no measurement for this
//! device" and "the target could not be classified" read differently.
//!
//! A class names numerics, not a file format: one `nvfp4` whether MLX,
//! ModelOpt or compressed-tensors declared it, one `fp8`, and integer
//! weights as `int4` / `int8` (by their bit width, whichever of MLX affine,
//! GPTQ, AWQ, compressed-tensors or bitsandbytes wrote them; bitsandbytes'
//! 4-bit floats are `nf4` / `fp4`). The declaring format is kept beside the
//! class ([`QuantClass::format`]) for the record.
//!
//! - GGUF: the dominant storage type of the layer matrices (`blk.*` tensors
//!   with two dimensions, weighted by elements), cross-checked against
//!   `general.file_type`; the file type alone when there are no layer
//!   matrices. Classes are the ggml type names, lowercase: q4_0, q4_1,
//!   q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, f16, bf16, f32 (the types the
//!   kernels read), or the file type's for a file without layer matrices.
//! - Hugging Face `config.json`, at the root and then under `text_config`:
//!   an MLX `quantization` block (`affine` without a `mode`, else the mode:
//!   nvfp4, mxfp4, ...); `quantization_config` by `quant_method`: ModelOpt
//!   (`quant_algo`: nvfp4, fp8, ...), compressed-tensors (the `format` of its
//!   config groups: nvfp4-pack-quantized, pack-quantized, float-quantized),
//!   gptq, awq, fp8, bitsandbytes, or any other method by its name; else the
//!   unquantized dtype from `torch_dtype` (or `dtype`); else the dominant
//!   dtype of the layer matrices in the safetensors header.

use crate::gguf::GgufFile;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use policy::quant::{QuantClass, UNKNOWN};

/// Largest `config.json` read (real ones are a few KiB).
const MAX_CONFIG_BYTES: u64 = 16 << 20;
/// Largest safetensors header read (the format itself caps it at 100 MB).
const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// A class as the table spells it: lowercase, `[a-z0-9_+-]`.
fn class_name(s: &str) -> String {
    let lower = s.trim().to_ascii_lowercase();
    let c: String =
        lower.chars().map(|c| if c.is_ascii_alphanumeric() || "_+-".contains(c) { c } else { '-' }).collect();
    // `unknown` is reserved for "could not classify"; a config that literally
    // names an unknown method was still read.
    match c.as_str() {
        "" => "unnamed".into(),
        UNKNOWN => "declared-unknown".into(),
        _ => c,
    }
}

/// Classifies a target path: a GGUF file, a checkpoint directory, or a
/// `config.json` given directly.
pub fn classify_path(path: &Path) -> QuantClass {
    if path.is_dir() {
        return classify_hf_dir(path);
    }
    if !path.exists() {
        return QuantClass::unknown(Some(path), format!("{} does not exist", path.display()));
    }
    if path.file_name().is_some_and(|n| n == "config.json") {
        return classify_hf_config_file(path);
    }
    if path.extension().is_some_and(|e| e == "safetensors") {
        let dir = path.parent().unwrap_or(Path::new("."));
        return classify_hf_dir(dir);
    }
    match GgufFile::open(path) {
        Ok(f) => classify_gguf(path, &f),
        Err(e) => QuantClass::unknown(Some(path), format!("GGUF file {} is unreadable: {e}", path.display())),
    }
}

// ---------------------------------------------------------------- GGUF

/// llama.cpp's `enum llama_ftype` (llama.h): the name, and the class its
/// layer matrices mostly have.
fn file_type(id: u32) -> Option<(&'static str, &'static str)> {
    Some(match id {
        0 => ("ALL_F32", "f32"),
        1 => ("MOSTLY_F16", "f16"),
        2 => ("MOSTLY_Q4_0", "q4_0"),
        3 => ("MOSTLY_Q4_1", "q4_1"),
        7 => ("MOSTLY_Q8_0", "q8_0"),
        8 => ("MOSTLY_Q5_0", "q5_0"),
        9 => ("MOSTLY_Q5_1", "q5_1"),
        10 => ("MOSTLY_Q2_K", "q2_k"),
        11 => ("MOSTLY_Q3_K_S", "q3_k"),
        12 => ("MOSTLY_Q3_K_M", "q3_k"),
        13 => ("MOSTLY_Q3_K_L", "q3_k"),
        14 => ("MOSTLY_Q4_K_S", "q4_k"),
        15 => ("MOSTLY_Q4_K_M", "q4_k"),
        16 => ("MOSTLY_Q5_K_S", "q5_k"),
        17 => ("MOSTLY_Q5_K_M", "q5_k"),
        18 => ("MOSTLY_Q6_K", "q6_k"),
        32 => ("MOSTLY_BF16", "bf16"),
        _ => return None,
    })
}

/// A GGUF target: the dominant storage type of the layer matrices (the
/// embedding and head are often kept at higher precision and are not what a
/// verify block mostly reads), with `general.file_type` as corroboration.
pub fn classify_gguf(path: &Path, f: &GgufFile) -> QuantClass {
    let mut elems: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut n_matrices = 0usize;
    for t in &f.tensors {
        if t.name.starts_with("blk.") && t.name.ends_with(".weight") && t.dims.len() == 2 {
            *elems.entry(t.ty.name()).or_default() += t.n_elems;
            n_matrices += 1;
        }
    }
    let ftype =
        f.get("general.file_type").and_then(|v| v.as_int()).map(|n| (n, u32::try_from(n).ok().and_then(file_type)));
    let ftype_text = |agree_with: Option<&str>| match ftype {
        None => "no general.file_type".to_string(),
        Some((n, None)) => format!("general.file_type = {n} (not a type this classifier names)"),
        Some((n, Some((name, class)))) => match agree_with {
            Some(c) if c == class => format!("general.file_type = {n} ({name}) agrees"),
            Some(_) => format!("general.file_type = {n} ({name}) names {class}; the tensors decide"),
            None => format!("general.file_type = {n} ({name})"),
        },
    };
    let total: u64 = elems.values().sum();
    if let Some((name, n)) = elems.iter().max_by_key(|(_, n)| **n).map(|(k, v)| (*k, *v)) {
        let class = name.to_ascii_lowercase();
        let mix = if elems.len() > 1 {
            let parts: Vec<String> =
                elems.iter().map(|(k, v)| format!("{k} {:.1}%", 100.0 * *v as f64 / total.max(1) as f64)).collect();
            format!(" (mixed: {})", parts.join(", "))
        } else {
            String::new()
        };
        let from = format!(
            "GGUF layer matrices: {name} holds {n} of {total} elements in {n_matrices} blk.* matrices{mix}; {}",
            ftype_text(Some(&class))
        );
        return QuantClass::new(class, from, path, "tensor types of blk.*.weight (general.file_type)")
            .declared_by("gguf");
    }
    match ftype {
        Some((n, Some((name, class)))) => QuantClass::new(
            class,
            format!("GGUF has no blk.* layer matrices; general.file_type = {n} ({name})"),
            path,
            "general.file_type",
        )
        .declared_by("gguf"),
        _ => QuantClass::unknown_at(
            path,
            "tensor types of blk.*.weight (general.file_type)",
            format!("GGUF {} has no blk.* layer matrices and {}", path.display(), ftype_text(None)),
        ),
    }
}

// ---------------------------------------------------------- Hugging Face

/// Reads `path` as a JSON object, or says why it cannot (missing file, size,
/// parse error at line/column, not an object).
pub(crate) fn read_json_object(path: &Path) -> Result<Map<String, Value>, String> {
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let dir = path.parent().map_or_else(|| ".".into(), |d| d.display().to_string());
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(format!("{name} not found in {dir}")),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(format!("{} is {} bytes, over the {MAX_CONFIG_BYTES}-byte limit", path.display(), meta.len()));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(format!("{} is not a JSON object (it is {})", path.display(), json_kind(&other))),
        Err(e) => {
            let msg = e.to_string();
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            Err(format!("{} does not parse: {msg} at line {} column {}", path.display(), e.line(), e.column()))
        }
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A checkpoint directory: its `config.json`, then its safetensors header.
pub fn classify_hf_dir(dir: &Path) -> QuantClass {
    let path = dir.join("config.json");
    if !path.exists() {
        return QuantClass::unknown(Some(&path), format!("config.json not found in {}", dir.display()));
    }
    classify_hf_config_file(&path)
}

/// A `config.json` file (the directory beside it holds the safetensors).
pub fn classify_hf_config_file(path: &Path) -> QuantClass {
    match read_json_object(path) {
        Ok(root) => classify_hf_config(path, &root),
        Err(why) => QuantClass::unknown(Some(path), why),
    }
}

fn str_field<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k).and_then(Value::as_str)
}

/// `k v` pairs of the fields present, for evidence sentences.
fn details(m: &Map<String, Value>, keys: &[&str]) -> String {
    let parts: Vec<String> = keys.iter().filter_map(|k| m.get(*k).map(|v| format!("{k} {v}"))).collect();
    if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) }
}

/// A parsed `config.json` (`path` names it in the evidence).
pub fn classify_hf_config(path: &Path, root: &Map<String, Value>) -> QuantClass {
    let mut scopes: Vec<(&str, &Map<String, Value>)> = vec![("", root)];
    if let Some(Value::Object(t)) = root.get("text_config") {
        scopes.push(("text_config.", t));
    }
    for (prefix, m) in &scopes {
        if let Some(Value::Object(q)) = m.get("quantization") {
            return mlx(path, prefix, q);
        }
        if let Some(Value::Object(qc)) = m.get("quantization_config") {
            return quantization_config(path, prefix, qc);
        }
    }
    for (prefix, m) in &scopes {
        for key in ["torch_dtype", "dtype"] {
            if let Some(d) = str_field(m, key) {
                let class = match d {
                    "bfloat16" => "bf16".to_string(),
                    "float16" | "half" => "f16".to_string(),
                    "float32" | "float" => "f32".to_string(),
                    other => class_name(other),
                };
                let from = format!("unquantized: {prefix}{key} {d:?} in {}", path.display());
                return QuantClass::new(class, from, path, format!("{prefix}{key}")).declared_by("torch_dtype");
            }
        }
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    match safetensors_dtype(dir) {
        Ok((file, class, from)) => {
            QuantClass::new(class, from, &file, "safetensors header dtypes of *.layers.* matrices")
                .declared_by("safetensors")
        }
        Err(why) => QuantClass::unknown_at(
            path,
            "quantization, quantization_config, torch_dtype, dtype",
            format!(
                "{} declares no quantization, quantization_config, torch_dtype or dtype (root or text_config), \
                 and {why}",
                path.display()
            ),
        ),
    }
}

/// `int4` for 4 bits: integer weights by their width.
fn int_class(bits: Option<u64>) -> Option<String> {
    bits.filter(|b| (1..=16).contains(b)).map(|b| format!("int{b}"))
}

/// A ModelOpt `quant_algo`, compressed-tensors group or MLX mode as the
/// numerics it names: `NVFP4`, `NVFP4_AWQ` → nvfp4; `FP8`,
/// `FP8_PER_CHANNEL_PER_TOKEN` → fp8; `MXFP4` → mxfp4; `INT4_AWQ`,
/// `W4A16_AWQ` → int4; `INT8_SQ`, `W8A8` → int8; else its own name.
fn numerics_of(name: &str) -> String {
    let n = name.trim().to_ascii_lowercase();
    let starts = |p: &str| n.starts_with(p);
    if starts("nvfp4") {
        "nvfp4".into()
    } else if starts("mxfp4") {
        "mxfp4".into()
    } else if starts("mxfp8") {
        "mxfp8".into()
    } else if starts("fp8") || starts("w8a8_fp8") || starts("float8") {
        "fp8".into()
    } else if starts("int4") || starts("w4a16") || starts("w4a8") {
        "int4".into()
    } else if starts("int8") || starts("w8a8") || starts("w8a16") {
        "int8".into()
    } else {
        class_name(&n)
    }
}

/// An MLX `quantization` block: integer (affine) weights by their bit width
/// unless it names another `mode` (nvfp4, mxfp4, ...).
fn mlx(path: &Path, prefix: &str, q: &Map<String, Value>) -> QuantClass {
    let d = details(q, &["bits", "group_size"]);
    let bits = q.get("bits").and_then(Value::as_u64);
    match str_field(q, "mode").filter(|m| *m != "affine") {
        Some(mode) => QuantClass::new(
            numerics_of(mode),
            format!("MLX {prefix}quantization block, mode {mode:?}{d}"),
            path,
            format!("{prefix}quantization.mode"),
        )
        .declared_by("mlx"),
        None => match int_class(bits) {
            Some(class) => QuantClass::new(
                class,
                format!("MLX {prefix}quantization block, affine integer weights{d}"),
                path,
                format!("{prefix}quantization.bits"),
            )
            .declared_by("mlx"),
            None => QuantClass::unknown_at(
                path,
                format!("{prefix}quantization.bits"),
                format!("{} has an MLX affine {prefix}quantization block without a usable bits{d}", path.display()),
            ),
        },
    }
}

/// A `quantization_config` block, by `quant_method`.
fn quantization_config(path: &Path, prefix: &str, qc: &Map<String, Value>) -> QuantClass {
    let at = |f: &str| format!("{prefix}quantization_config.{f}");
    let method = str_field(qc, "quant_method").map(str::to_ascii_lowercase);
    let modelopt_algo = str_field(qc, "quant_algo")
        .or_else(|| qc.get("quantization").and_then(Value::as_object).and_then(|q| str_field(q, "quant_algo")));
    let is_bnb = qc.get("load_in_4bit").and_then(Value::as_bool) == Some(true)
        || qc.get("load_in_8bit").and_then(Value::as_bool) == Some(true);
    // Old bitsandbytes configs and some ModelOpt and compressed-tensors
    // exports omit quant_method: recognize them by their fields.
    let kind = match method.as_deref() {
        Some(m) => m.to_string(),
        None if modelopt_algo.is_some() => "modelopt".into(),
        None if qc.contains_key("config_groups") => "compressed-tensors".into(),
        None if is_bnb => "bitsandbytes".into(),
        None => {
            return QuantClass::unknown(
                Some(path),
                format!(
                    "{} has a {prefix}quantization_config with no quant_method, quant_algo, config_groups \
                     or load_in_4bit/8bit",
                    path.display()
                ),
            );
        }
    };
    match kind.as_str() {
        "modelopt" => match modelopt_algo {
            Some(algo) => {
                let field = if str_field(qc, "quant_algo").is_some() {
                    at("quant_algo")
                } else {
                    at("quantization.quant_algo")
                };
                QuantClass::new(
                    numerics_of(algo),
                    format!("ModelOpt quantization_config, quant_algo {algo:?}"),
                    path,
                    field,
                )
                .declared_by("modelopt")
            }
            None => QuantClass::unknown_at(
                path,
                at("quant_algo"),
                format!("{} has a ModelOpt {prefix}quantization_config without quant_algo", path.display()),
            ),
        },
        "compressed-tensors" => compressed_tensors(path, prefix, qc),
        "bitsandbytes" => {
            let d = details(qc, &["load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type"]);
            let four = qc.get("load_in_4bit").and_then(Value::as_bool) == Some(true);
            let eight = qc.get("load_in_8bit").and_then(Value::as_bool) == Some(true);
            let (class, field) = match (four, eight) {
                (true, false) => {
                    // bitsandbytes' default 4-bit type is fp4.
                    let t = str_field(qc, "bnb_4bit_quant_type").unwrap_or("fp4").to_ascii_lowercase();
                    (class_name(&t), at("bnb_4bit_quant_type"))
                }
                (false, true) => ("int8".to_string(), at("load_in_8bit")),
                _ => {
                    return QuantClass::unknown_at(
                        path,
                        at("load_in_4bit"),
                        format!(
                            "{} has a bitsandbytes {prefix}quantization_config with neither or both of \
                             load_in_4bit and load_in_8bit{d}",
                            path.display()
                        ),
                    );
                }
            };
            QuantClass::new(class, format!("bitsandbytes quantization_config{d}"), path, field)
                .declared_by("bitsandbytes")
        }
        m @ ("gptq" | "awq") => {
            let d = details(qc, &["bits", "w_bit", "group_size", "version"]);
            let name = if m == "gptq" { "GPTQ" } else { "AWQ" };
            // Both default to 4-bit weights when the config leaves bits out.
            let (bits, field) = match (qc.get("bits").and_then(Value::as_u64), qc.get("w_bit").and_then(Value::as_u64))
            {
                (Some(b), _) => (Some(b), at("bits")),
                (None, Some(b)) => (Some(b), at("w_bit")),
                (None, None) => (Some(4), at("quant_method")),
            };
            match int_class(bits) {
                Some(class) => {
                    QuantClass::new(class, format!("{name} quantization_config, integer weights{d}"), path, field)
                        .declared_by(m)
                }
                None => QuantClass::unknown_at(
                    path,
                    field,
                    format!("{} has a {name} quantization_config whose bits are not 1..=16{d}", path.display()),
                ),
            }
        }
        "fp8" => {
            let d = details(qc, &["activation_scheme", "fmt", "weight_block_size"]);
            QuantClass::new("fp8", format!("fp8 quantization_config{d}"), path, at("quant_method")).declared_by("fp8")
        }
        m @ ("mxfp4" | "nvfp4") => {
            QuantClass::new(m, format!("{m} quantization_config"), path, at("quant_method")).declared_by(m)
        }
        m => QuantClass::new(
            class_name(m),
            format!("quantization_config quant_method {m:?} (no rule for it here; its name is the class)"),
            path,
            at("quant_method"),
        )
        .declared_by(&class_name(m)),
    }
}

/// The numerics of one compressed-tensors config group: its `format`
/// where that names them (`nvfp4-pack-quantized`, `mxfp4-pack-quantized`),
/// else its `weights` (`type` int or float, `num_bits`).
fn group_numerics(format: Option<&str>, g: &Map<String, Value>) -> Option<String> {
    if let Some(f) = format {
        let n = numerics_of(f);
        if n == "nvfp4" || n == "mxfp4" {
            return Some(n);
        }
    }
    let w = g.get("weights").and_then(Value::as_object)?;
    let bits = w.get("num_bits").and_then(Value::as_u64).filter(|b| (1..=16).contains(b))?;
    match str_field(w, "type") {
        Some("int") => Some(format!("int{bits}")),
        Some("float") if bits == 8 => Some("fp8".into()),
        Some("float") => Some(format!("fp{bits}")),
        _ => None,
    }
}

/// compressed-tensors: the numerics of its config groups (they may differ
/// per group; one is the class, several are joined with `+`), each from the
/// group's format or weights ([`group_numerics`]).
fn compressed_tensors(path: &Path, prefix: &str, qc: &Map<String, Value>) -> QuantClass {
    let block_format = str_field(qc, "format");
    let mut classes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unreadable: Vec<String> = Vec::new();
    if let Some(Value::Object(groups)) = qc.get("config_groups") {
        for (name, g) in groups {
            let Some(g) = g.as_object() else {
                unreadable.push(name.clone());
                continue;
            };
            match group_numerics(str_field(g, "format").or(block_format), g) {
                Some(c) => classes.entry(c).or_default().push(name.clone()),
                None => unreadable.push(name.clone()),
            }
        }
    }
    if !unreadable.is_empty() || classes.is_empty() {
        let what = if unreadable.is_empty() {
            "no config groups".to_string()
        } else {
            format!(
                "config group(s) {} without a numerics-naming format or weights num_bits/type",
                unreadable.join(", ")
            )
        };
        let field = match unreadable.first() {
            Some(g) => format!("{prefix}quantization_config.config_groups.{g}.weights"),
            None => format!("{prefix}quantization_config.config_groups"),
        };
        return QuantClass::unknown_at(
            path,
            field,
            format!("{} has a compressed-tensors {prefix}quantization_config with {what}", path.display()),
        );
    }
    let class = classes.keys().cloned().collect::<Vec<_>>().join("+");
    let groups: Vec<String> = classes.iter().map(|(c, g)| format!("{} {c}", g.join(", "))).collect();
    let first_group = classes.values().next().and_then(|g| g.first()).cloned().unwrap_or_default();
    let fmt = block_format.map_or(String::new(), |f| format!(", format {f:?}"));
    QuantClass::new(
        class,
        format!("compressed-tensors quantization_config{fmt}, config groups: {}", groups.join("; ")),
        path,
        format!("{prefix}quantization_config.config_groups.{first_group}"),
    )
    .declared_by("compressed-tensors")
}

/// The dominant dtype (by elements) of the layer matrices in the first
/// safetensors file of `dir`: `(file, class, evidence)`, or why not.
fn safetensors_dtype(dir: &Path) -> Result<(PathBuf, String, String), String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    let file = files.into_iter().next().ok_or_else(|| format!("no *.safetensors in {}", dir.display()))?;
    let header = read_safetensors_header(&file)?;
    let mut elems: BTreeMap<String, u64> = BTreeMap::new();
    for (name, t) in &header {
        let Some(t) = t.as_object() else { continue };
        let shape: Vec<u64> =
            t.get("shape").and_then(Value::as_array).map_or(vec![], |s| s.iter().filter_map(Value::as_u64).collect());
        if name.contains("layers.")
            && shape.len() == 2
            && let Some(d) = str_field(t, "dtype")
        {
            *elems.entry(d.to_string()).or_default() += shape.iter().product::<u64>();
        }
    }
    let (dtype, n) = elems
        .iter()
        .max_by_key(|(_, n)| **n)
        .ok_or_else(|| format!("{} has no 2-D *.layers.* tensors", file.display()))?;
    let total: u64 = elems.values().sum();
    let class = match dtype.as_str() {
        "BF16" => "bf16".to_string(),
        "F16" => "f16".to_string(),
        "F32" => "f32".to_string(),
        other => class_name(other),
    };
    Ok((
        file.clone(),
        class,
        format!("safetensors header of {}: {dtype} holds {n} of {total} layer-matrix elements", file.display()),
    ))
}

fn read_safetensors_header(file: &Path) -> Result<Map<String, Value>, String> {
    use std::io::Read;
    let mut f = std::fs::File::open(file).map_err(|e| format!("cannot open {}: {e}", file.display()))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|e| format!("{}: no header length: {e}", file.display()))?;
    let n = u64::from_le_bytes(len);
    if n > MAX_SAFETENSORS_HEADER {
        return Err(format!("{}: header length {n} is over {MAX_SAFETENSORS_HEADER}", file.display()));
    }
    let mut buf = vec![0u8; n as usize];
    f.read_exact(&mut buf).map_err(|e| format!("{}: truncated header: {e}", file.display()))?;
    match serde_json::from_slice::<Value>(&buf) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(format!("{}: the header is not a JSON object", file.display())),
    }
}
