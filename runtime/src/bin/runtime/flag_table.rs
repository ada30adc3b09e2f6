//! docs/flags.md, row by row: every flag its llama.cpp, vLLM and SGLang
//! columns name is run through the real command line (the rewrite of
//! `runtime::commands::compat`, then clap) and must work, map onto ours, or
//! be refused naming what to give instead. The docs' flags and this
//! table's must be the same set, so a row added to the docs without a case
//! (or a case for a flag the docs dropped) fails.

use super::Cli;
use clap::Parser;
use runtime::commands::compat::{SPECULATIVE_CONFIG_KEYS, SPECULATIVE_CONFIG_METHODS, rewrite};
use std::collections::BTreeSet;
use std::ffi::OsString;

const FLAGS_MD: &str = include_str!("../../../../docs/flags.md");

/// What a command line must come to.
enum Want {
    /// It parses; the parsed command (its `Debug`) and the mapping notes
    /// hold each of these.
    Parses(&'static [&'static str]),
    /// It is refused with a message holding this.
    Refused(&'static str),
}
use Want::{Parses, Refused};

/// `(the docs' flag, the command line after "runtime", this build has CUDA, the outcome)`.
type Case = (&'static str, &'static [&'static str], bool, Want);

fn cases() -> Vec<Case> {
    vec![
        ("-m", &["generate", "-m", "x.gguf", "-p", "hi"], false, Parses(&["\"x.gguf\""])),
        ("--model", &["serve", "--model", "x.gguf"], false, Parses(&["\"x.gguf\""])),
        (
            "-ngl",
            &["generate", "-ngl", "0", "-p", "hi"],
            false,
            Parses(&["device: Some(\"cpu\")", "runs as --device cpu"]),
        ),
        ("-ngl", &["serve", "-ngl", "99"], true, Parses(&["device: Some(\"cuda\")", "runs as --device cuda"])),
        (
            "-ngl",
            &["generate", "-ngl", "99", "-p", "hi"],
            false,
            Refused("rebuild with `cargo build --release --features cuda`"),
        ),
        ("-ngl", &["generate", "-ngl", "99", "--device", "cpu", "-p", "hi"], true, Refused("give one of them")),
        ("--n-gpu-layers", &["bench", "--n-gpu-layers", "0"], false, Parses(&["device: Some(\"cpu\")"])),
        ("-p", &["generate", "-p", "hi"], false, Parses(&["prompt: Some(\"hi\")"])),
        ("--prompt", &["generate", "--prompt", "hi"], false, Parses(&["prompt: Some(\"hi\")"])),
        ("-n", &["generate", "-p", "hi", "-n", "7"], false, Parses(&["max_tokens: 7"])),
        ("--n-predict", &["generate", "-p", "hi", "--n-predict", "7"], false, Parses(&["max_tokens: 7"])),
        ("-t", &["generate", "-p", "hi", "-t", "3"], false, Parses(&["threads: Some(3)"])),
        ("--threads", &["serve", "--threads", "3"], false, Parses(&["threads: Some(3)"])),
        ("-c", &["generate", "-p", "hi", "-c", "512"], false, Parses(&["ctx_size: Some(512)"])),
        ("--ctx-size", &["serve", "--ctx-size", "512"], false, Parses(&["ctx_size: Some(512)"])),
        ("--max-model-len", &["serve", "--max-model-len", "512"], false, Parses(&["ctx_size: Some(512)"])),
        ("-s", &["generate", "-p", "hi", "-s", "9"], false, Parses(&["seed: 9"])),
        ("--seed", &["generate", "-p", "hi", "--seed", "9"], false, Parses(&["seed: 9"])),
        ("--temp", &["generate", "-p", "hi", "--temp", "0.5"], false, Parses(&["temperature: 0.5"])),
        ("--top-k", &["generate", "-p", "hi", "--top-k", "5"], false, Parses(&["top_k: 5"])),
        ("--top-p", &["generate", "-p", "hi", "--top-p", "0.5"], false, Parses(&["top_p: 0.5"])),
        (
            "--chat-template-file",
            &["serve", "--chat-template-file", "t.jinja"],
            false,
            Parses(&["chat_template: Some(\"t.jinja\")"]),
        ),
        (
            "--chat-template",
            &["serve", "--chat-template", "t.jinja"],
            false,
            Parses(&["chat_template: Some(\"t.jinja\")"]),
        ),
        ("--port", &["serve", "--port", "9000"], false, Parses(&["port: 9000"])),
        ("--host", &["serve", "--host", "0.0.0.0"], false, Parses(&["host: \"0.0.0.0\""])),
        ("--api-key", &["serve", "--api-key", "k"], false, Parses(&["api_key: Some(\"k\")"])),
        (
            "--served-model-name",
            &["serve", "--served-model-name", "m"],
            false,
            Parses(&["served_model_name: Some(\"m\")"]),
        ),
        ("--allowed-origins", &["serve", "--allowed-origins", "http://a,http://b"], false, Parses(&["\"http://b\""])),
        // Taken without effect, said so.
        ("--jinja", &["serve", "--jinja"], false, Parses(&["--jinja (llama.cpp) has no effect here"])),
        ("-fa", &["serve", "-fa"], false, Parses(&["-fa (llama.cpp) has no effect here"])),
        ("-fa", &["serve", "-fa", "on", "--port", "1"], false, Parses(&["-fa on (llama.cpp)", "port: 1"])),
        // `-fa` alone before a prompt: the prompt is not taken as its value.
        ("-fa", &["generate", "-fa", "-p", "hi"], false, Parses(&["prompt: Some(\"hi\")"])),
        ("--flash-attn", &["serve", "--flash-attn", "auto"], false, Parses(&["--flash-attn auto (llama.cpp)"])),
        ("-ub", &["serve", "-ub", "512"], false, Parses(&["-ub 512 (llama.cpp) has no effect"])),
        ("--ubatch-size", &["serve", "--ubatch-size=512"], false, Parses(&["--ubatch-size 512 (llama.cpp)"])),
        (
            "-b",
            &["generate", "-b", "2048", "-p", "hi"],
            false,
            Parses(&["-b 2048 (llama.cpp)", "prompt: Some(\"hi\")"]),
        ),
        ("--batch-size", &["serve", "--batch-size", "2048"], false, Parses(&["--batch-size 2048 (llama.cpp)"])),
        ("-cb", &["serve", "-cb"], false, Parses(&["-cb (llama.cpp) has no effect"])),
        ("--cont-batching", &["serve", "--cont-batching"], false, Parses(&["--cont-batching (llama.cpp)"])),
        ("-nocb", &["serve", "-nocb"], false, Parses(&["-nocb (llama.cpp)"])),
        ("--no-cont-batching", &["serve", "--no-cont-batching"], false, Parses(&["--no-cont-batching (llama.cpp)"])),
        (
            "-np",
            &["serve", "-np", "1"],
            false,
            Parses(&["-np 1 (llama-server: slots) runs as --parallel 1", "parallel: Some(1)"]),
        ),
        (
            "-np",
            &["serve", "-np", "4"],
            false,
            Parses(&["-np 4 (llama-server: slots) runs as --parallel 4", "parallel: Some(4)"]),
        ),
        ("--max-num-seqs", &["serve", "--max-num-seqs", "8"], false, Parses(&["parallel: Some(8)"])),
        // Penalties and min-p: generate's own flags; per request on serve.
        (
            "--repeat-penalty",
            &["generate", "-p", "hi", "--repeat-penalty", "1.1"],
            false,
            Parses(&["repeat_penalty: 1.1"]),
        ),
        (
            "--repeat-penalty",
            &["serve", "--repeat-penalty", "1.1"],
            false,
            Refused("--repeat-penalty 1.1: runtime serve takes it per request: send \"repeat_penalty\""),
        ),
        ("--repeat-penalty", &["serve", "--repeat-penalty", "1.0"], false, Parses(&["asks for nothing here"])),
        ("--repeat-last-n", &["generate", "-p", "hi", "--repeat-last-n", "-1"], false, Parses(&["repeat_last_n: -1"])),
        (
            "--repeat-last-n",
            &["bench", "--repeat-last-n", "16"],
            false,
            Refused("--repeat-last-n 16: runtime bench measures decoding without it"),
        ),
        (
            "--presence-penalty",
            &["generate", "-p", "hi", "--presence-penalty", "-0.5"],
            false,
            Parses(&["presence_penalty: -0.5"]),
        ),
        (
            "--presence-penalty",
            &["serve", "--presence-penalty", "0.5"],
            false,
            Refused("send \"presence_penalty\" in the request body"),
        ),
        (
            "--frequency-penalty",
            &["generate", "-p", "hi", "--frequency-penalty", "0.5"],
            false,
            Parses(&["frequency_penalty: 0.5"]),
        ),
        (
            "--frequency-penalty",
            &["serve", "--frequency-penalty", "0.5"],
            false,
            Refused("send \"frequency_penalty\" in the request body"),
        ),
        ("--min-p", &["generate", "-p", "hi", "--min-p", "0.05"], false, Parses(&["min_p: 0.05"])),
        ("--min-p", &["serve", "--min-p", "0"], false, Parses(&["--min-p 0 asks for nothing"])),
        // Sampling controls this engine lacks: refused by name, unless neutral.
        (
            "--typical",
            &["generate", "-p", "hi", "--typical", "0.9"],
            false,
            Refused("locally typical sampling is not implemented"),
        ),
        (
            "--mirostat",
            &["generate", "-p", "hi", "--mirostat", "2"],
            false,
            Refused("mirostat sampling is not implemented"),
        ),
        // Speculative decoding.
        (
            "-md",
            &["generate", "-md", "d.gguf", "-p", "hi"],
            false,
            Parses(&["drafter: Some(\"draft-model\")", "drafter_model: Some(\"d.gguf\")"]),
        ),
        (
            "-md",
            &["generate", "-p", "hi", "-md", "d.gguf", "--drafter", "draft-model"],
            false,
            Parses(&["drafter: Some(\"draft-model\")"]),
        ),
        (
            "--model-draft",
            &["serve", "--model-draft", "d.gguf"],
            false,
            Parses(&["drafter: Some(\"draft-model\")", "drafter_model: Some(\"d.gguf\")"]),
        ),
        (
            "--speculative-draft-model-path",
            &["serve", "--speculative-draft-model-path", "d.gguf"],
            false,
            Parses(&["drafter: Some(\"draft-model\")"]),
        ),
        ("--draft-max", &["generate", "-p", "hi", "--draft-max", "4"], false, Parses(&["draft_width: Some(\"4\")"])),
        ("--draft", &["generate", "-p", "hi", "--draft", "4"], false, Parses(&["draft_width: Some(\"4\")"])),
        (
            "--speculative-num-draft-tokens",
            &["serve", "--speculative-num-draft-tokens", "4"],
            false,
            Parses(&["draft_width: Some(\"4\")"]),
        ),
        ("--draft-min", &["generate", "-p", "hi", "--draft-min", "1"], false, Refused("give --adaptive on")),
        ("--draft-p-min", &["generate", "-p", "hi", "--draft-p-min", "0.8"], false, Refused("drafts are greedy here")),
        (
            "--spec-type",
            &["generate", "-p", "hi", "--spec-type", "ngram-simple"],
            false,
            Parses(&["drafter: Some(\"ngram\")", "runs as --drafter ngram"]),
        ),
        ("--spec-type", &["generate", "-p", "hi", "--spec-type", "eagle"], false, Refused("only the ngram types")),
        (
            "--speculative-algorithm",
            &["serve", "--speculative-algorithm", "NGRAM"],
            false,
            Parses(&["drafter: Some(\"ngram\")"]),
        ),
        (
            "--speculative-algorithm",
            &["serve", "--speculative-algorithm", "STANDALONE", "-md", "d.gguf"],
            false,
            Parses(&["drafter: Some(\"draft-model\")"]),
        ),
        (
            "--speculative-algorithm",
            &["serve", "--speculative-algorithm", "EAGLE"],
            false,
            Refused("NGRAM (--drafter ngram) and STANDALONE"),
        ),
        (
            "--speculative-config",
            &[
                "serve",
                "--speculative-config",
                r#"{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5, "prompt_lookup_min": 2}"#,
            ],
            false,
            Parses(&[
                "drafter: Some(\"ngram\")",
                "draft_width: Some(\"4\")",
                "ngram_max: Some(5)",
                "ngram_min: Some(2)",
                "--speculative-config (vLLM) runs as --drafter ngram",
            ]),
        ),
        (
            "--speculative-config",
            &[
                "serve",
                "--speculative-config",
                r#"{"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 3}"#,
            ],
            false,
            Parses(&["drafter: Some(\"draft-model\")", "drafter_model: Some(\"d.gguf\")", "draft_width: Some(\"3\")"]),
        ),
        (
            "--speculative-config",
            &["serve", "--speculative-config", r#"{"method": "suffix", "suffix_decoding_min_token_prob": 0.25}"#],
            false,
            Parses(&["drafter: Some(\"suffix\")", "suffix_min_prob: Some(0.25)"]),
        ),
        (
            "--speculative-config",
            &["serve", "--speculative-config", r#"{"model": "d.gguf"}"#],
            false,
            Parses(&["drafter: Some(\"draft-model\")"]),
        ),
        (
            "--speculative-config",
            &["serve", "--speculative-config", r#"{"method": "eagle3", "model": "e"}"#],
            false,
            Refused("method \"eagle3\": not a drafter this engine has"),
        ),
        (
            "--speculative-config",
            &["serve", "--speculative-config", r#"{"method": "ngram", "draft_tensor_parallel_size": 1}"#],
            false,
            Refused("key \"draft_tensor_parallel_size\": this engine takes only method, model"),
        ),
        ("--speculative-config", &["serve", "--speculative-config", "{nope"], false, Refused("not valid JSON")),
    ]
}

/// The outcome of `runtime ARGS`: the parsed command and the notes, or the refusal.
fn outcome(args: &[&str], cuda: bool) -> Result<String, String> {
    let line: Vec<OsString> = std::iter::once("runtime").chain(args.iter().copied()).map(OsString::from).collect();
    let r = rewrite(line, cuda).map_err(|e| e.to_string())?;
    let cli = Cli::try_parse_from(r.args).map_err(|e| e.to_string())?;
    Ok(format!("{:?} notes: {:?}", cli.command, r.notes))
}

/// The backticked pieces of the columns of other engines in docs/flags.md's tables.
fn foreign_cells() -> Vec<String> {
    let mut pieces = Vec::new();
    let mut foreign: Vec<usize> = Vec::new();
    for line in FLAGS_MD.lines() {
        let line = line.replace("\\|", "/");
        if !line.starts_with('|') {
            foreign.clear();
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.contains(&"ours") {
            foreign = (0..cells.len())
                .filter(|&i| ["llama.cpp", "vLLM", "SGLang"].iter().any(|e| cells[i].starts_with(e)))
                .collect();
            continue;
        }
        for &i in &foreign {
            let Some(cell) = cells.get(i) else { continue };
            pieces.extend(cell.split('`').skip(1).step_by(2).map(str::to_string));
        }
    }
    pieces
}

fn docs_flags() -> BTreeSet<String> {
    foreign_cells()
        .iter()
        .filter_map(|p| p.split_whitespace().next())
        .filter(|w| w.starts_with('-'))
        .map(|w| w.trim_end_matches(',').to_string())
        .collect()
}

#[test]
fn every_flag_in_docs_flags_md_works_maps_or_is_refused() {
    let docs = docs_flags();
    assert!(docs.len() > 40 && docs.contains("-ngl") && docs.contains("--speculative-config"), "{docs:?}");
    let cases = cases();
    let covered: BTreeSet<String> = cases.iter().map(|c| c.0.to_string()).collect();
    assert_eq!(docs, covered, "docs/flags.md's flags and this table's cases differ");
    for (flag, args, cuda, want) in &cases {
        let got = outcome(args, *cuda);
        match (want, &got) {
            (Parses(has), Ok(parsed)) => {
                for h in *has {
                    assert!(parsed.contains(h), "{flag}: {args:?} parsed without {h:?}:\n{parsed}");
                }
            }
            (Refused(says), Err(e)) => {
                assert!(e.contains(says), "{flag}: {args:?} refused, but not with {says:?}: {e}");
                // A refusal names the flag as written.
                assert!(e.contains(flag.trim_start_matches('-')), "{flag}: the refusal does not name it: {e}");
            }
            (Parses(_), Err(e)) => panic!("{flag}: {args:?} was refused: {e}"),
            (Refused(_), Ok(p)) => panic!("{flag}: {args:?} parsed, should be refused:\n{p}"),
        }
    }
}

/// The vLLM `speculative_config` keys and methods the docs name are the ones the mapping takes.
#[test]
fn the_speculative_config_keys_in_docs_flags_md_are_the_ones_taken() {
    let keys: Vec<&str> = SPECULATIVE_CONFIG_KEYS.iter().map(|(k, _)| *k).collect();
    let methods: Vec<&str> = SPECULATIVE_CONFIG_METHODS.iter().map(|(m, _)| *m).collect();
    let mut seen = 0;
    for piece in foreign_cells().iter().filter(|p| p.starts_with('"')) {
        let mut parts = piece.split('"').skip(1).step_by(2);
        let key = parts.next().unwrap();
        assert!(keys.contains(&key), "docs name speculative_config key {key:?}, the mapping takes {keys:?}");
        if key == "method"
            && let Some(m) = parts.next()
        {
            assert!(methods.contains(&m), "docs name method {m:?}, the mapping takes {methods:?}");
        }
        seen += 1;
    }
    assert!(seen >= 6, "the vLLM column of the speculative table names {seen} keys");
    for (_, ours) in SPECULATIVE_CONFIG_KEYS {
        assert!(FLAGS_MD.contains(ours), "docs/flags.md does not name {ours}");
    }
}

/// vLLM's `serve MODEL`: the model as a positional argument, the same as `-m`.
#[test]
fn serve_takes_the_model_positionally_as_vllm_does() {
    let parsed = outcome(&["serve", "x.gguf", "--port", "1"], false).unwrap();
    assert!(parsed.contains("model_positional: Some(\"x.gguf\")"), "{parsed}");
    let e = outcome(&["serve", "x.gguf", "-m", "y.gguf"], false).unwrap_err();
    assert!(e.contains("cannot be used with"), "{e}");
    let super::Command::Serve(a) = Cli::try_parse_from(["runtime", "serve", "x.gguf"]).unwrap().command else {
        panic!("not serve")
    };
    let s: runtime::serve::ServeSettings = a.into();
    assert_eq!(s.load.model.as_deref(), Some(std::path::Path::new("x.gguf")));
}

/// Glued short flags: each of llama.cpp's is one token, never `-m d`.
#[test]
fn llama_cpp_multi_letter_short_flags_are_whole_tokens() {
    for args in [
        &["generate", "-p", "hi", "-md", "d.gguf"][..],
        &["generate", "-p", "hi", "-ngl", "0"],
        &["serve", "-np", "1"],
        &["serve", "-fa"],
        &["serve", "-ub", "64"],
        &["serve", "-cb"],
    ] {
        let parsed = outcome(args, false).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        // `-md` as `-m d` would set the model to "d"; `-ngl` as `-n gl` fails to parse.
        assert!(parsed.contains("load: ModelArgs { model: None"), "{args:?} set the model:\n{parsed}");
    }
    // Nothing after `--` is rewritten, and other commands are left alone.
    let line = ["runtime", "generate", "--", "-md"].map(OsString::from).to_vec();
    assert_eq!(rewrite(line.clone(), false).unwrap().args, line);
    let line = ["runtime", "policy", "explain", "-fa"].map(OsString::from).to_vec();
    assert_eq!(rewrite(line.clone(), false).unwrap().args, line);
}
