//! Every number the CLI takes is bounded, and errors are printed once with
//! the documented exit status: 1 when a command fails, 2 for a usage error.

use draftwise_tests::{bin, model_path, run};
use std::process::Command;
use std::time::{Duration, Instant};

fn generate() -> Command {
    let mut c = Command::new(bin("runtime"));
    c.arg("generate").arg("--model").arg(model_path()).env("DRAFTWISE_LOG", "warn");
    c
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn huge_thread_counts_are_refused_without_a_panic_or_an_allocation() {
    for threads in ["18446744073709551615", "10000000000", "1000"] {
        let t0 = Instant::now();
        let out = run(generate().args(["--prompt", "hi", "--max-tokens", "1", "--threads", threads]));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "--threads {threads}: {err}");
        assert!(err.contains(&format!("--threads {threads} is more than 4 per available CPU")), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(20), "--threads {threads} took {:?}", t0.elapsed());
    }
    let out = run(generate().args(["--prompt", "hi", "--threads", "0"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--threads must be at least 1"));
}

#[test]
fn more_threads_than_cores_runs_with_a_warning_naming_the_core_count() {
    let n = cpus() + 1;
    let out = run(generate().args(["--prompt", "hi", "--max-tokens", "2", "--threads", &n.to_string()]));
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("more than the {} CPUs available", cpus())), "{err}");
}

#[test]
fn ngram_sizes_are_bounded() {
    for (flag, v) in [("--ngram-max", "1000000000000"), ("--ngram-max", "65"), ("--ngram-min", "0")] {
        let t0 = Instant::now();
        let out = run(generate().args(["--prompt", "1, 2, 1, 2,", "--max-tokens", "4", "--drafter", "ngram", flag, v]));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flag} {v}: {err}");
        assert!(err.contains(&format!("{flag} {v}: give 1..=")), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(20));
    }
}

#[test]
fn an_error_chain_is_printed_once_and_exits_1() {
    let out = run(Command::new(bin("runtime")).args(["generate", "--prompt", "x", "--model", "/nonexistent/m.gguf"]));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "the cause is printed once: {err}");
}

#[test]
fn usage_errors_exit_2_and_help_documents_the_codes() {
    let out = run(Command::new(bin("runtime")).args(["generate", "--prompt", "x", "--max-tokens", "many"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let help = run(Command::new(bin("runtime")).arg("--help"));
    assert!(String::from_utf8_lossy(&help.stdout).contains("1 when the command fails, 2 for a usage error"));
}

#[test]
fn serve_refuses_out_of_range_limits_naming_the_flag() {
    for (flag, v) in [
        ("--max-connections", "0"),
        ("--header-timeout-ms", "0"),
        ("--request-timeout-secs", "100000000"),
        ("--max-body-bytes", "10"),
        ("--max-queue", "18446744073709551615"),
    ] {
        let out = run(Command::new(bin("runtime"))
            .args(["serve", "--port", "0", "--model"])
            .arg(model_path())
            .args([flag, v])
            .env("DRAFTWISE_LOG", "warn"));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flag} {v}: {err}");
        assert!(err.contains(&format!("{flag} {v} is out of range")), "{err}");
    }
}

#[test]
fn serve_bounds_the_allowed_origins() {
    let long = format!("http://{}", "a".repeat(300));
    let many = vec!["http://x"; 65].join(",");
    for v in [long.as_str(), many.as_str()] {
        let out = run(Command::new(bin("runtime"))
            .args(["serve", "--port", "0", "--model"])
            .arg(model_path())
            .args(["--allowed-origins", v])
            .env("DRAFTWISE_LOG", "warn"));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("--allowed-origins takes at most 64 origins of 1 to 256 bytes"), "{err}");
    }
}

#[test]
fn count_flags_of_generate_and_bench_are_bounded_naming_the_flag() {
    let bench = || {
        let mut c = Command::new(bin("runtime"));
        c.arg("bench").arg("--model").arg(model_path()).env("DRAFTWISE_LOG", "warn");
        c
    };
    let huge = "18446744073709551615";
    let cases: Vec<(Command, &str, &str)> = vec![
        (
            {
                let mut c = generate();
                c.args(["--prompt", "hi", "--max-tokens", "1", "--repeat", huge]);
                c
            },
            "--repeat",
            huge,
        ),
        (
            {
                let mut c = generate();
                c.args(["--prompt", "hi", "--max-tokens", "1", "--repeat", "0"]);
                c
            },
            "--repeat",
            "0",
        ),
        (
            {
                let mut c = generate();
                c.args(["--prompt", "hi", "--max-tokens", "1", "--warmup", huge]);
                c
            },
            "--warmup",
            huge,
        ),
        (
            {
                let mut c = bench();
                c.args(["--prompt-tokens", huge]);
                c
            },
            "--prompt-tokens",
            huge,
        ),
        (
            {
                let mut c = bench();
                c.args(["--prompt-tokens", "1099511627776"]);
                c
            },
            "--prompt-tokens",
            "1099511627776",
        ),
        (
            {
                let mut c = bench();
                c.args(["--gen-tokens", huge]);
                c
            },
            "--gen-tokens",
            huge,
        ),
        (
            {
                let mut c = bench();
                c.args(["--verify-cost", "--max-rows", huge]);
                c
            },
            "--max-rows",
            huge,
        ),
        (
            {
                let mut c = bench();
                c.args(["--reps", huge]);
                c
            },
            "--reps",
            huge,
        ),
        (
            {
                let mut c = bench();
                c.args(["--warmup", huge]);
                c
            },
            "--warmup",
            huge,
        ),
        (
            {
                let mut c = bench();
                c.args(["--drafter", "ngram", "--max-tokens", huge]);
                c
            },
            "--max-tokens",
            huge,
        ),
    ];
    for (mut c, flag, v) in cases {
        let t0 = Instant::now();
        let out = run(&mut c);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flag} {v}: {err}");
        assert!(err.contains(&format!("{flag} {v} is out of range: give ")), "{flag} {v}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(20), "{flag} {v} took {:?}", t0.elapsed());
    }
    // In range, but past the model's context: refused once the model is open, naming both flags.
    let out = run(bench().args(["--prompt-tokens", "1000000", "--gen-tokens", "8"]));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--prompt-tokens 1000000 plus --gen-tokens 8 is more than the model's context length"),
        "{err}"
    );
    let out = run(bench().args(["--verify-cost", "--prompt-tokens", "1000000", "--max-rows", "4"]));
    let err = stderr(&out);
    assert!(err.contains("--prompt-tokens 1000000 plus --max-rows 4 is more than"), "{err}");
}
