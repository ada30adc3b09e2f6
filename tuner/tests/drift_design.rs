//! The bracket plan's drift power, by simulation through the real
//! summarizer: the table docs/records.md ("Choosing the bracket plan")
//! reports. `cargo test --release -p tuner --test drift_design -- --ignored --nocapture`
use tuner::analysis::simulate::{SimConfig, Template, calibrate};

#[test]
#[ignore = "prints the bracket-plan table for docs/records.md (a few minutes)"]
fn print_the_bracket_plan_table() {
    let t = Template::new();
    println!(
        "| bracket arms a side | passes each | process spread | false drift | 10% drift in every round flagged | stated detectable | one round 15% flagged |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (arms, bursts) in [(3, 4), (6, 1), (8, 1), (9, 1), (10, 1)] {
        for spread in [0.075, 0.12] {
            let mut c = SimConfig::default_plan(spread, 0.11, 3_000_000 + (arms * 100 + bursts) as u64);
            c.bracket_arms = arms;
            c.bracket_bursts = bursts;
            let clean = calibrate(&t, &c, 500, 2);
            let mut d = c.clone();
            d.close_slowdown_every_round = Some(0.10);
            let drifted = calibrate(&t, &d, 500, 2);
            let mut o = c.clone();
            o.close_slowdown = Some((1, 0.15));
            let one = calibrate(&t, &o, 500, 2);
            println!(
                "| {arms} | {bursts} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% |",
                100.0 * spread,
                100.0 * clean.drift_rate(),
                100.0 * drifted.drift_rate(),
                100.0 * clean.mean_detectable(),
                100.0 * one.slowed_round_rate()
            );
        }
    }
}
