//! README, checked against the programs it describes: every flag it gives a
//! `runtime` or `tuner` command is in that command's `--help`, the default
//! model's size is the fetched file's, and every build command builds both
//! programs at once (built apart, cargo resolves their dependencies'
//! features differently and compiles `runtime` twice).

use draftwise_tests::bin;
use std::collections::BTreeMap;
use std::process::Command;

const README: &str = include_str!("../../README.md");

/// The README's code: its inline spans and the lines of its code blocks.
fn code() -> Vec<String> {
    let mut out = Vec::new();
    let mut prose = String::new();
    let mut in_block = false;
    for line in README.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            out.push(line.to_string());
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    out.extend(prose.split('`').skip(1).step_by(2).map(|s| s.replace('\n', " ")));
    out
}

/// `(program, subcommand words)` → the flags the README gives them.
fn commands() -> BTreeMap<(String, Vec<String>), Vec<String>> {
    let mut found: BTreeMap<(String, Vec<String>), Vec<String>> = BTreeMap::new();
    for piece in code() {
        let words: Vec<&str> = piece.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            let program = w.rsplit('/').next().unwrap_or(w);
            if !["runtime", "tuner"].contains(&program) || i + 1 >= words.len() {
                continue;
            }
            // `runtime policy explain`: two words; otherwise one.
            let mut sub = vec![words[i + 1].to_string()];
            if sub[0] == "policy" && i + 2 < words.len() {
                sub.push(words[i + 2].to_string());
            }
            if !sub[0].chars().all(|c| c.is_ascii_lowercase() || c == '-') || sub[0].starts_with('-') {
                continue;
            }
            let flags = found.entry((program.to_string(), sub.clone())).or_default();
            for f in &words[i + 1 + sub.len()..] {
                // Up to the next command of the line (`&&`, a pipe).
                if ["&&", "|", ";", "&"].contains(f) {
                    break;
                }
                let f = f.trim_start_matches('[').trim_end_matches([']', ',', ';', ':', ')', '.']);
                let f = f.split('=').next().unwrap();
                if f.starts_with('-') && f.chars().nth(1).is_some_and(|c| c.is_ascii_alphabetic() || c == '-') {
                    flags.push(f.to_string());
                }
            }
        }
    }
    found
}

/// `flag` as a whole word in `help` (`--threads` is not `--threads-x`).
fn names(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(at, _)| {
        let before = help[..at].chars().next_back();
        let after = help[at + flag.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

#[test]
fn every_flag_the_readme_gives_a_command_is_in_its_help() {
    let commands = commands();
    for want in [("runtime", "generate"), ("runtime", "serve"), ("tuner", "sweep"), ("runtime", "policy")] {
        assert!(
            commands.keys().any(|(p, s)| p == want.0 && s[0] == want.1),
            "README names no `{} {}` command: {commands:?}",
            want.0,
            want.1
        );
    }
    let mut checked = 0;
    for ((program, sub), flags) in &commands {
        let out = Command::new(bin(program)).args(sub).arg("--help").output().unwrap();
        if !out.status.success() {
            // Not a subcommand (prose such as "runtime speculates"); a real
            // one with flags must exist.
            assert!(flags.is_empty(), "`{program} {}` has flags {flags:?} but no --help", sub.join(" "));
            continue;
        }
        let help = String::from_utf8_lossy(&out.stdout);
        for f in flags {
            assert!(names(&help, f), "README gives `{program} {} {f}`, which its --help does not name", sub.join(" "));
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} flags checked: {commands:?}");
}

#[test]
fn the_readme_states_the_default_models_size_and_one_build_for_both_programs() {
    let mb = (runtime::fetch::DEFAULT_MODEL.size as f64 / 1e6).round();
    assert!(
        README.contains(&format!("the default model, {mb} MB")),
        "README does not say the default model is {mb} MB"
    );
    let builds: Vec<String> = code().into_iter().filter(|l| l.contains("cargo build")).collect();
    assert!(!builds.is_empty());
    for b in &builds {
        assert!(b.contains("-p runtime -p tuner"), "a README build command builds one program alone: {b}");
    }
}
