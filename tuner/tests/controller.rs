//! The adaptive controller judged on the committed acceptance profiles
//! (issue 54): replayed through the runtime's own controller on every
//! profile, against every fixed width, with the verify-cost curves of the
//! policy table as it stood when [`BELOW`] was written
//! (`tests/fixtures/controller-table.toml`, a copy of
//! policy/draft-block-width.toml at `5e178ea9`): each profile's model
//! priced by its own Zen 4 entry where the table has one, else by another
//! host's entry of that model, else by the Zen 4 SmolLM2 entry's curves. A re-sweep that replaces an entry changes the live
//! table's curves and would move every share here without the controller
//! changing; the fixture keeps this test about the controller. A new task
//! type in a profile is a new case here. Timing noise is out of it: the
//! tokens are exact, the passes priced by the curve.
use std::path::Path;

use policy::adaptive::CostModel;
use policy::profile::Schedule;
use policy::table::{RecordCheck, compile};

/// The floor: the controller at least this share of the best fixed width,
/// on every task type of every profile.
const FLOOR: f64 = 0.97;

/// The task types below the floor when this test was written (2026-12-07),
/// with the share they reached: the controller (`policy/src/adaptive.rs`)
/// is on the verify path, and changing it stales every adaptive entry, so
/// it is judged here first and changed with the entries re-checked. Each
/// may not fall further (a change that lowers one fails); one that rises
/// above the floor is to be removed from the list (the test says so).
const BELOW: &[(&str, &str, f64)] = &[
    // On the Zen 4 curves of the 2026-12-07 re-sweep (the table's SmolLM2 entry).
    ("SmolLM2-135M-Instruct.Q4_1-ngram-3-4-sweep-48.jsonl", "edit", 0.931),
    ("gemma-3-270m-q4_k_m-ngram-3-4-sweep-48.jsonl", "code", 0.944),
    ("gemma-3-270m-q4_k_m-ngram-3-4-sweep-48.jsonl", "arithmetic", 0.876),
    ("qwen2.5-coder-0.5b-instruct-ngram-3-4-sweep-32.jsonl", "edit", 0.947),
    ("qwen2.5-coder-1.5b-instruct-q4_k_m-draft-model-qwen2.5-coder-0.5b-instruct-sweep-32.jsonl", "edit", 0.843),
    ("qwen2.5-coder-1.5b-instruct-q4_k_m-draft-model-qwen2.5-coder-0.5b-instruct-sweep-32.jsonl", "summarize", 0.883),
    ("qwen2.5-coder-1.5b-instruct-q4_k_m-draft-model-qwen2.5-coder-0.5b-instruct-sweep-32.jsonl", "free", 0.921),
    ("qwen2.5-coder-1.5b-instruct-q4_k_m-draft-model-qwen2.5-coder-0.5b-instruct-sweep-32.jsonl", "arithmetic", 0.840),
    ("qwen2.5-coder-1.5b-instruct-q4_k_m-ngram-3-4-sweep-32.jsonl", "edit", 0.958),
    ("qwen2.5-coder-1.5b-instruct-q4_k_m-ngram-3-4-sweep-32.jsonl", "summarize", 0.952),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

#[test]
fn the_controller_is_within_three_percent_of_the_best_fixed_width_on_every_task_type() {
    let fixture = "tuner/tests/fixtures/controller-table.toml";
    let text = std::fs::read_to_string(root().join(fixture)).unwrap();
    let t = compile(fixture, &text, RecordCheck::Skip).unwrap();
    // Each profile's model priced by an entry of that model (this host
    // class's where it has curves, else another's), else by the Zen 4
    // SmolLM2 entry's curves.
    let zen4 = t
        .entries
        .iter()
        .find(|e| e.key.host.as_str() == "amd-zen4" && e.key.quant == "q4_1" && !e.verify_cost.is_empty())
        .expect("the Zen 4 SmolLM2 entry with its curves");
    let curves_for = |sha: &str| {
        let of_model: Vec<&policy::Entry> =
            t.entries.iter().filter(|e| e.model.sha256 == sha && !e.verify_cost.is_empty()).collect();
        let e =
            of_model.iter().find(|e| e.key.host.as_str() == "amd-zen4").or(of_model.first()).copied().unwrap_or(zen4);
        (CostModel::new(&e.verify_cost).unwrap(), e.key.host.to_string())
    };
    let mut names: Vec<_> = std::fs::read_dir(root().join("profiles")).unwrap().map(|d| d.unwrap().path()).collect();
    names.sort();
    assert!(names.len() >= 6, "the committed profiles: {names:?}");
    let mut report = Vec::new();
    let mut below = Vec::new();
    for path in names {
        let p = tuner::data::profile::read(&path).unwrap();
        let (cost, host) = curves_for(&p.header.model.sha256);
        let cap = 8.min(p.header.lookahead);
        for task in p.task_types() {
            let pick: Vec<usize> = (0..p.traces.len()).filter(|&i| p.traces[i].task == task).collect();
            let ratio = |s| policy::profile::replay_all(&p, s, &cost, &pick).unwrap().ratio();
            let (best_w, best) =
                (1..=cap).map(|w| (w, ratio(Schedule::Fixed(w)))).max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
            let a = ratio(Schedule::Adaptive { cap });
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            report.push(format!(
                "{name} {task} ({host} curves): adaptive {a:.3}, best fixed {best_w} {best:.3}, {:.3}",
                a / best
            ));
            let share = a / best;
            match BELOW.iter().find(|(n, t, _)| *n == name && *t == task) {
                // Rounded as recorded, less a thousandth.
                Some((_, _, was)) if share < was - 0.0015 => {
                    below.push(format!("{name} {task}: {share:.3}, below the {was:.3} it reached before"))
                }
                Some(_) if share >= FLOOR => {
                    below.push(format!("{name} {task}: {share:.3} is above the floor now: remove it from BELOW"))
                }
                Some(_) => {}
                None if share < FLOOR => below.push(format!("{name} {task}: {share:.3} of the best fixed width")),
                None => {}
            }
        }
    }
    println!("{}", report.join("\n"));
    assert!(
        below.is_empty(),
        "below {FLOOR} of the best fixed width:\n{}\n\nall:\n{}",
        below.join("\n"),
        report.join("\n")
    );
}
