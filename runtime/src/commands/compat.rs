//! Other engines' command-line habits, taken before clap parses the
//! command line of `runtime generate`, `serve` and `bench` (docs/flags.md
//! lists every one and what it becomes).
//!
//! clap reads a short flag's letters one by one, so llama.cpp's
//! multi-letter short flags would glue onto a neighbour (`-md FILE` is
//! `-m d`, `-ngl 99` is `-n gl`). [`rewrite`] takes them as whole tokens
//! first. Each foreign flag either becomes ours (the mapping is returned as
//! a [`Rewritten::notes`] line, printed once), is accepted as having no
//! effect here (said so, in a note), or is refused by name with the flag
//! to use instead ([`FlagError`]). Nothing a user asks for is dropped
//! without a word.
//!
//! vLLM's `--speculative-config JSON` is read by [`speculative_config`]:
//! its `method` becomes our drafter, `num_speculative_tokens` the width.

use serde_json::{Map, Value};
use std::ffi::OsString;

/// A foreign flag this engine will not take, and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {why}")]
pub struct FlagError {
    /// The flag as the user wrote it (with its value where that matters).
    pub flag: String,
    pub why: String,
}

fn refuse(flag: impl Into<String>, why: impl Into<String>) -> FlagError {
    FlagError { flag: flag.into(), why: why.into() }
}

/// The command line clap should parse, and what was mapped on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewritten {
    pub args: Vec<OsString>,
    /// One line per mapped or ignored flag, in order, each once.
    pub notes: Vec<String>,
}

/// The commands whose flags follow llama.cpp's (they take `-m`, `-n`, `-c`, ...).
pub const COMMANDS: [&str; 3] = ["generate", "serve", "bench"];

/// Sampling controls other engines have and this one does not yet, with
/// the value that asks for nothing (accepted: the output is the same).
pub const MISSING_SAMPLING: &[(&str, f64, &str)] =
    &[("--typical", 1.0, "locally typical sampling is"), ("--mirostat", 0.0, "mirostat sampling is")];

/// llama.cpp's penalty and min-p flags: `generate` takes them as its own
/// (clap parses them); on `serve` and `bench` they are not settings of the
/// process (a server takes them per request, under the request field named
/// here; bench measures plain decoding), so there only the value that
/// changes nothing (`serve`'s default for a request) is accepted.
pub const PER_REQUEST_SAMPLING: &[(&str, f64, &str)] = &[
    ("--repeat-penalty", 1.0, "repeat_penalty"),
    ("--presence-penalty", 0.0, "presence_penalty"),
    ("--frequency-penalty", 0.0, "frequency_penalty"),
    ("--repeat-last-n", 64.0, "repeat_last_n"),
    ("--min-p", 0.0, "min_p"),
];

/// Performance switches of llama.cpp's that change nothing in the output
/// and have nothing to set here: accepted, and said so.
const NO_EFFECT: &[(&[&str], bool, &str)] = &[
    // (spellings, takes a value, why it is a no-op here)
    (
        &["-fa", "--flash-attn"],
        false,
        "flash attention is llama.cpp's fused attention kernel; this engine has one attention kernel per device, \
         chosen at startup, and the output is the same either way",
    ),
    (
        &["-ub", "--ubatch-size", "-b", "--batch-size"],
        true,
        "the prompt is prefilled in one forward pass here, where llama.cpp's batch sizes split it",
    ),
    (
        &["-cb", "--cont-batching", "-nocb", "--no-cont-batching"],
        false,
        "runtime serve always batches continuously, up to --parallel sequences per pass, docs/serve.md",
    ),
    (&["--jinja"], false, "the model's chat template is always rendered with Jinja here"),
];

/// The values llama.cpp's `-fa` / `--flash-attn` may take (newer versions require one).
const FLASH_ATTN_VALUES: [&str; 7] = ["on", "off", "auto", "1", "0", "true", "false"];

/// Rewrites `args` (the whole command line, program name first) for clap.
/// `cuda_built`: this build has the CUDA backend (`-ngl N` with N > 0
/// needs it). Only the commands of [`COMMANDS`] are touched, and nothing
/// after a `--`.
pub fn rewrite(args: Vec<OsString>, cuda_built: bool) -> Result<Rewritten, FlagError> {
    let command = args.get(1).and_then(|a| a.to_str()).unwrap_or("").to_string();
    if !COMMANDS.contains(&command.as_str()) {
        return Ok(Rewritten { args, notes: Vec::new() });
    }
    let mut out: Vec<OsString> = args[..2].to_vec();
    let mut notes: Vec<String> = Vec::new();
    let mut note = |n: String| {
        if !notes.contains(&n) {
            notes.push(n);
        }
    };
    // A drafter a flag implies (`-md` implies draft-model), with the flag.
    let mut implied: Option<(&'static str, String)> = None;
    let mut imply = |kind: &'static str, by: &str| -> Result<(), FlagError> {
        match &implied {
            Some((k, other)) if *k != kind => Err(refuse(
                by.to_string(),
                format!("implies --drafter {kind}, and {other} implies --drafter {k}: give one"),
            )),
            _ => {
                implied = Some((kind, by.to_string()));
                Ok(())
            }
        }
    };
    let explicit_device =
        args.iter().skip(2).any(|a| a.to_str().is_some_and(|s| s == "--device" || s.starts_with("--device=")));
    let mut rest = args.into_iter().skip(2).peekable();
    while let Some(token) = rest.next() {
        let Some(t) = token.to_str().map(str::to_string) else {
            out.push(token);
            continue;
        };
        if t == "--" {
            out.push(token);
            out.extend(rest.by_ref());
            break;
        }
        // `--name=value` of a long flag handled here; short ones take their value apart.
        let (name, inline) = match t.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (t.clone(), None),
        };
        match name.as_str() {
            "-md" | "--model-draft" | "--speculative-draft-model-path" => {
                let file = take_value(
                    &mut rest,
                    &inline,
                    &name,
                    "the draft model: a GGUF file, a Hugging Face directory or a known model's name",
                )?;
                imply("draft-model", &name)?;
                note(format!(
                    "{name} FILE runs as --drafter draft-model --drafter-model FILE (the drafter must share the \
                     target's vocabulary)"
                ));
                out.push("--drafter-model".into());
                out.push(file.into());
            }
            "-ngl" | "--n-gpu-layers" | "--gpu-layers" => {
                let n = take_value(&mut rest, &inline, &name, "a layer count")?;
                if explicit_device {
                    return Err(refuse(format!("{name} {n}"), "--device is given too: give one of them"));
                }
                let layers = match n.as_str() {
                    "all" | "auto" => u64::MAX,
                    _ => n.parse::<u64>().map_err(|_| {
                        refuse(format!("{name} {n}"), "give a layer count (0 runs on the CPU, more on CUDA)")
                    })?,
                };
                if layers == 0 {
                    note(format!("{name} 0 (llama.cpp: no layers on the GPU) runs as --device cpu"));
                    out.push("--device".into());
                    out.push("cpu".into());
                } else if cuda_built {
                    note(format!(
                        "{name} {n} (llama.cpp: layers on the GPU) runs as --device cuda: every layer on CUDA \
                         device 0 (this engine does not split a model between devices; --device cuda:N picks another)"
                    ));
                    out.push("--device".into());
                    out.push("cuda".into());
                } else {
                    return Err(refuse(
                        format!("{name} {n}"),
                        "asks for the GPU, and this build has no CUDA: rebuild with `cargo build --release \
                         --features cuda` (docs/cuda.md), or give -ngl 0 (or --device cpu) to run on the CPU",
                    ));
                }
            }
            "-np" => {
                let n = take_value(&mut rest, &inline, &name, "a sequence count")?;
                note(format!("-np {} (llama-server: slots) runs as --parallel {}", n.trim(), n.trim()));
                out.push("--parallel".into());
                out.push(n.trim().to_string().into());
            }
            "--draft-min" => {
                let n = take_value(&mut rest, &inline, &name, "a token count")?;
                return Err(refuse(
                    format!("--draft-min {n}"),
                    "has no equivalent: give --adaptive on (each round then drafts 0 up to --draft-width tokens, \
                     chosen from the acceptance seen and this host's verify cost), or drop it",
                ));
            }
            "--draft-p-min" => {
                let p = take_value(&mut rest, &inline, &name, "a probability")?;
                return Err(refuse(
                    format!("--draft-p-min {p}"),
                    "has no equivalent: drafts are greedy here, and output stays byte-identical to classic \
                     decoding whatever the drafter proposes; drop it",
                ));
            }
            "--spec-type" => {
                let v = take_value(&mut rest, &inline, &name, "a speculation type")?;
                if !v.starts_with("ngram") {
                    return Err(refuse(
                        format!("--spec-type {v}"),
                        "only the ngram types have a drafter here (--drafter ngram); for a draft model give \
                         -md FILE (--drafter draft-model --drafter-model FILE)",
                    ));
                }
                imply("ngram", &name)?;
                note(format!("--spec-type {v} runs as --drafter ngram (--ngram-min/--ngram-max set the pattern)"));
            }
            "--speculative-algorithm" => {
                let v = take_value(&mut rest, &inline, &name, "an algorithm")?;
                let kind = match v.to_ascii_uppercase().as_str() {
                    "NGRAM" => "ngram",
                    "STANDALONE" => "draft-model",
                    _ => {
                        return Err(refuse(
                            format!("--speculative-algorithm {v}"),
                            "this engine has NGRAM (--drafter ngram) and STANDALONE (--drafter draft-model), \
                             not this one",
                        ));
                    }
                };
                imply(kind, &name)?;
                note(format!("--speculative-algorithm {v} runs as --drafter {kind}"));
            }
            "--speculative-config" => {
                let json = take_value(&mut rest, &inline, &name, "a JSON object, as vLLM takes it")?;
                let mapped = speculative_config(&json)?;
                imply(mapped.drafter, &name)?;
                note(format!(
                    "--speculative-config (vLLM) runs as --drafter {} {}",
                    mapped.drafter,
                    mapped.flags.join(" ")
                ));
                out.extend(mapped.flags.into_iter().map(OsString::from));
            }
            n if command != "generate" && PER_REQUEST_SAMPLING.iter().any(|(f, ..)| *f == n) => {
                let (flag, neutral, field) = *PER_REQUEST_SAMPLING.iter().find(|(f, ..)| *f == n).expect("just found");
                let v = take_value(&mut rest, &inline, &name, "a number")?;
                let instead = if command == "serve" {
                    format!(
                        "runtime serve takes it per request: send \"{field}\" in the request body (/completion and \
                         the OpenAI routes, docs/serve.md); runtime generate takes {flag}"
                    )
                } else {
                    format!("runtime {command} measures decoding without it; runtime generate takes {flag}")
                };
                if v.parse::<f64>().ok() != Some(neutral) {
                    return Err(refuse(format!("{flag} {v}"), instead));
                }
                note(format!("{flag} {v} asks for nothing here (a request's default); {instead}"));
            }
            n if MISSING_SAMPLING.iter().any(|(f, ..)| *f == n) => {
                let (flag, neutral, what) = *MISSING_SAMPLING.iter().find(|(f, ..)| *f == n).expect("just found");
                let v = take_value(&mut rest, &inline, &name, "a number")?;
                if v.parse::<f64>().ok() != Some(neutral) {
                    return Err(refuse(
                        format!("{flag} {v}"),
                        format!(
                            "{what} not implemented in this engine; drop it, or give {neutral} (no effect), or \
                             sample with --temperature, --top-k, --top-p, --min-p and the penalties"
                        ),
                    ));
                }
                note(format!("{flag} {v} asks for nothing (its neutral value); {what} not implemented here"));
            }
            n => match NO_EFFECT.iter().find(|(names, ..)| names.contains(&n)) {
                Some((_, takes_value, why)) => {
                    let shown = if *takes_value {
                        format!("{n} {}", take_value(&mut rest, &inline, &name, "a number")?)
                    } else if n == "-fa" || n == "--flash-attn" {
                        // Older llama.cpp takes `-fa` alone, newer `-fa on|off|auto`.
                        let word = |v: &OsString| v.to_str().is_some_and(|s| FLASH_ATTN_VALUES.contains(&s));
                        match inline.clone().or_else(|| rest.next_if(word).and_then(|v| v.into_string().ok())) {
                            Some(v) => format!("{n} {v}"),
                            None => n.to_string(),
                        }
                    } else {
                        n.to_string()
                    };
                    note(format!("{shown} (llama.cpp) has no effect here: {why}"));
                }
                None => out.push(token),
            },
        }
    }
    if let Some((kind, _)) = implied
        && !out.iter().skip(2).any(|a| a.to_str().is_some_and(|s| s == "--drafter" || s.starts_with("--drafter=")))
    {
        out.push("--drafter".into());
        out.push(kind.into());
    }
    Ok(Rewritten { args: out, notes })
}

/// A flag's value: its inline `=value`, else the next token.
fn take_value(
    rest: &mut impl Iterator<Item = OsString>,
    inline: &Option<String>,
    name: &str,
    what: &str,
) -> Result<String, FlagError> {
    if let Some(v) = inline {
        return Ok(v.clone());
    }
    match rest.next() {
        Some(v) => v.into_string().map_err(|_| refuse(name, format!("{what} must be UTF-8 text"))),
        None => Err(refuse(name, format!("needs a value ({what})"))),
    }
}

/// vLLM's `--speculative-config`, as our flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedConfig {
    /// Our drafter kind (`--drafter`).
    pub drafter: &'static str,
    /// Our flags for the other keys, in the order of [`SPECULATIVE_CONFIG_KEYS`].
    pub flags: Vec<String>,
}

/// The `--speculative-config` keys this engine takes, and the flag each becomes
/// (`method` becomes `--drafter`).
pub const SPECULATIVE_CONFIG_KEYS: &[(&str, &str)] = &[
    ("method", "--drafter"),
    ("model", "--drafter-model"),
    ("num_speculative_tokens", "--draft-width"),
    ("prompt_lookup_max", "--ngram-max"),
    ("prompt_lookup_min", "--ngram-min"),
    ("suffix_decoding_min_token_prob", "--suffix-min-prob"),
];

/// vLLM's `method` values and our drafter for each.
pub const SPECULATIVE_CONFIG_METHODS: &[(&str, &str)] =
    &[("ngram", "ngram"), ("draft_model", "draft-model"), ("suffix", "suffix")];

/// Reads vLLM's `--speculative-config` JSON object. Without `method`, a
/// `model` means a draft model (as vLLM infers it; its old `"[ngram]"`
/// model name means ngram). A method we lack and a key we do not take are
/// refused by name (every key matters to what vLLM would run, so none is
/// dropped).
pub fn speculative_config(json: &str) -> Result<MappedConfig, FlagError> {
    let flag = "--speculative-config";
    let v: Value = serde_json::from_str(json).map_err(|e| refuse(flag, format!("not valid JSON: {e}")))?;
    let Value::Object(mut obj): Value = v else {
        return Err(refuse(flag, "give a JSON object, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'"));
    };
    obj.retain(|_, v| !v.is_null());
    let taken: Vec<&str> = SPECULATIVE_CONFIG_KEYS.iter().map(|(k, _)| *k).collect();
    if let Some(k) = obj.keys().find(|k| !taken.contains(&k.as_str())) {
        return Err(refuse(
            format!("{flag} key {k:?}"),
            format!("this engine takes only {}; drop it", taken.join(", ")),
        ));
    }
    let model = string(&mut obj, "model")?;
    let method = string(&mut obj, "method")?;
    let drafter = match (method.as_deref(), model.as_deref()) {
        (Some(m), _) => match SPECULATIVE_CONFIG_METHODS.iter().find(|(v, _)| *v == m) {
            Some((_, ours)) => *ours,
            None => {
                let have: Vec<&str> = SPECULATIVE_CONFIG_METHODS.iter().map(|(v, _)| *v).collect();
                return Err(refuse(
                    format!("{flag} method {m:?}"),
                    format!(
                        "not a drafter this engine has (it has {}; and --drafter layerskip, the target's first \
                         layers)",
                        have.join(", ")
                    ),
                ));
            }
        },
        (None, Some("[ngram]")) => "ngram",
        (None, Some(_)) => "draft-model",
        (None, None) => {
            return Err(refuse(flag, "give \"method\" (ngram, draft_model or suffix), or a draft \"model\""));
        }
    };
    let mut flags = Vec::new();
    if let Some(m) = model.filter(|m| m != "[ngram]") {
        if drafter != "draft-model" {
            return Err(refuse(
                format!("{flag} model"),
                format!("a draft model is for method draft_model, not {drafter}"),
            ));
        }
        flags.extend(["--drafter-model".to_string(), m]);
    }
    for (key, ours) in &SPECULATIVE_CONFIG_KEYS[2..] {
        let Some(v) = obj.remove(*key) else { continue };
        let text = match &v {
            Value::Number(n) => n.to_string(),
            _ => return Err(refuse(format!("{flag} {key}"), "give a number")),
        };
        let applies = match *ours {
            "--ngram-max" | "--ngram-min" => drafter == "ngram",
            "--suffix-min-prob" => drafter == "suffix",
            _ => true,
        };
        if !applies {
            return Err(refuse(format!("{flag} {key}"), format!("does not apply to method {drafter}")));
        }
        flags.extend([ours.to_string(), text]);
    }
    Ok(MappedConfig { drafter, flags })
}

fn string(obj: &mut Map<String, Value>, key: &str) -> Result<Option<String>, FlagError> {
    match obj.remove(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(refuse(format!("--speculative-config {key}"), "give a string")),
    }
}
