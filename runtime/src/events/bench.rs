//! The JSON object `runtime bench --json` prints: one line, a
//! [`BenchReport`] (throughput or the verify-cost curve) or, with
//! `--drafter`, a [`WidthCurveReport`]. Both serialize and deserialize, so a
//! program reads the report it asked for as this type, never as free text;
//! the field names are the ones docs/performance.md and scripts/ read.
//!
//! The measurements themselves are made in [`crate::bench`].

use policy::DrafterKind;
use serde::{Deserialize, Serialize};

/// Schema version of the JSON object `runtime bench --json` prints. 2: the
/// verify-cost points name their pass size `rows` and `relative_to_one_row`
/// (1 named them `width` and `relative_to_w1`; both still read).
pub const BENCH_SCHEMA_VERSION: u32 = 2;

/// The `event` field of a bench report: which of the two shapes it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchEventKind {
    /// [`BenchReport`].
    Bench,
    /// [`WidthCurveReport`].
    BenchWidthCurve,
}

/// What throughput or verify-cost mode ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchSpec {
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub reps: usize,
    pub warmup: usize,
    /// `Some(max W)` for verify-cost mode.
    pub verify_cost: Option<usize>,
}

/// A summary of samples, with the samples themselves (made by
/// [`Summary::of`] under the rules of [`crate::bench::stats`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// 95% distribution-free interval for the median (order statistics);
    /// with fewer than six samples it is the full range.
    pub median_ci95: (f64, f64),
    /// Indices (into `samples`) of samples more than
    /// [`crate::bench::stats::OUTLIER_MADS`] scaled median absolute
    /// deviations from the median.
    pub outliers: Vec<usize>,
    pub samples: Vec<f64>,
}

/// One repetition of throughput mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rep {
    pub prefill_s: f64,
    pub decode_s: f64,
    pub prefill_tok_per_s: f64,
    pub decode_tok_per_s: f64,
}

/// One pass size of verify-cost mode: a forward pass of `rows` rows (a
/// draft of W tokens is verified in a pass of W + 1 rows). Reports before
/// schema 2 named the fields `width` and `relative_to_w1`; both still read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowsCost {
    #[serde(alias = "width")]
    pub rows: usize,
    /// Seconds per forward pass of `rows` rows.
    pub seconds: Summary,
    /// `median(rows) / median(1 row)`.
    #[serde(alias = "relative_to_w1")]
    pub relative_to_one_row: f64,
}

/// The results of one `runtime bench` run (throughput or verify cost).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub schema_version: u32,
    /// Always [`BenchEventKind::Bench`].
    pub event: BenchEventKind,
    pub model: String,
    pub kernel_family: String,
    pub threads: usize,
    pub multirow: bool,
    /// Where the weights lived (the `startup` event's `pages`); absent in
    /// reports before the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<crate::model::weights::PagesReport>,
    pub spec: BenchSpec,
    /// The prompt's token ids (so another engine can be given the same).
    pub prompt_ids: Vec<u32>,
    pub prefill_tok_per_s: Option<Summary>,
    pub decode_tok_per_s: Option<Summary>,
    pub reps: Vec<Rep>,
    pub verify_cost: Vec<RowsCost>,
}

/// What the width curve ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurveSpec {
    pub drafter: DrafterKind,
    pub widths: Vec<policy::Width>,
    pub max_tokens: usize,
    pub reps: usize,
    pub warmup: usize,
    /// The verify-cost curves of the adaptive arm (`--adaptive on`, up to
    /// the widest width), when it ran; absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adaptive_cost: Vec<policy::table::CostCurve>,
}

/// One arm of one task of the width curve.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurveArm {
    /// `None` for classic decoding; the cap for the adaptive arm.
    pub width: Option<policy::Width>,
    /// The adaptive arm: each round's draft length chosen up to `width`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adaptive: bool,
    /// Decode tok/s per recorded repetition; `None` when the width declined.
    pub decode_tok_per_s: Option<Summary>,
    /// `median / classic median`.
    pub ratio_vs_classic: Option<f64>,
    pub rounds: usize,
    pub drafted: usize,
    pub accepted: usize,
    pub acceptance_rate: Option<f64>,
    /// Tokens emitted per verify pass that carried a draft.
    pub emitted_per_verify: Option<f64>,
    /// Every completion's token ids equal classic decoding's.
    pub ids_equal_classic: bool,
    /// Why this width was not measured (a failed exactness probe).
    pub declined: Option<String>,
    /// One-token target passes over the recorded repetitions: classic
    /// decoding's decode steps; a speculative arm's plain steps (an empty
    /// draft, so one row).
    #[serde(default)]
    pub single_token_steps: usize,
    /// Milliseconds per one-token pass, pooled over the recorded
    /// repetitions: a classic step's forward pass with its sampling, a plain
    /// step's forward pass alone. Null with no such pass.
    #[serde(default)]
    pub single_token_step_ms: Option<f64>,
    /// `single_token_step_ms / classic's`: what a plain step inside the
    /// speculative loop costs against a classic step, measured in the same
    /// process with the arms' order rotated every repetition.
    #[serde(default)]
    pub single_token_step_vs_classic: Option<f64>,
    /// Milliseconds per verify pass that carried a draft (speculative arms).
    #[serde(default)]
    pub verify_pass_ms: Option<f64>,
    /// The plain steps against classic steps taken after the same number of
    /// emitted tokens of the same prompt (the context length and the
    /// distance from the prefill then match; speculative arms).
    #[serde(default)]
    pub single_token_step_vs_classic_same_position: Option<PositionMatched>,
}

/// [`CurveArm::single_token_step_vs_classic_same_position`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PositionMatched {
    /// Plain steps' seconds over the matched classic steps' seconds (each
    /// classic position's mean over the recorded classic runs).
    pub ratio: f64,
    /// Plain steps matched (a plain step where classic never stepped is
    /// left out).
    pub steps: usize,
}

/// The width curve of one task (the prompts of one `type` tag).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskCurve {
    pub task: String,
    pub prompt_ids: Vec<String>,
    /// Classic first, then the widths in ascending order.
    pub arms: Vec<CurveArm>,
}

/// The results of one `runtime bench --drafter KIND` run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WidthCurveReport {
    pub schema_version: u32,
    /// Always [`BenchEventKind::BenchWidthCurve`].
    pub event: BenchEventKind,
    /// The target's path.
    pub model: std::path::PathBuf,
    pub kernel_family: String,
    pub threads: usize,
    pub multirow: bool,
    pub spec: CurveSpec,
    pub tasks: Vec<TaskCurve>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> Summary {
        Summary::of(vec![2.0, 1.0, 3.0])
    }

    #[test]
    fn a_bench_report_prints_its_field_names_in_order_and_reads_back_byte_for_byte() {
        let r = BenchReport {
            schema_version: BENCH_SCHEMA_VERSION,
            event: BenchEventKind::Bench,
            model: "m.gguf".into(),
            kernel_family: "avx2".into(),
            threads: 2,
            multirow: true,
            pages: None,
            spec: BenchSpec { prompt_tokens: 2, gen_tokens: 1, reps: 3, warmup: 0, verify_cost: None },
            prompt_ids: vec![300, 301],
            prefill_tok_per_s: Some(summary()),
            decode_tok_per_s: None,
            reps: vec![Rep { prefill_s: 0.5, decode_s: 0.25, prefill_tok_per_s: 4.0, decode_tok_per_s: 4.0 }],
            verify_cost: vec![RowsCost { rows: 1, seconds: summary(), relative_to_one_row: 1.0 }],
        };
        let line = serde_json::to_string(&r).unwrap();
        let s =
            r#"{"n":3,"median":2.0,"min":1.0,"max":3.0,"median_ci95":[1.0,3.0],"outliers":[],"samples":[2.0,1.0,3.0]}"#;
        assert_eq!(
            line,
            format!(
                "{{\"schema_version\":2,\"event\":\"bench\",\"model\":\"m.gguf\",\"kernel_family\":\"avx2\",\
                 \"threads\":2,\"multirow\":true,\"spec\":{{\"prompt_tokens\":2,\"gen_tokens\":1,\"reps\":3,\
                 \"warmup\":0,\"verify_cost\":null}},\"prompt_ids\":[300,301],\"prefill_tok_per_s\":{s},\
                 \"decode_tok_per_s\":null,\"reps\":[{{\"prefill_s\":0.5,\"decode_s\":0.25,\
                 \"prefill_tok_per_s\":4.0,\"decode_tok_per_s\":4.0}}],\"verify_cost\":[{{\"rows\":1,\
                 \"seconds\":{s},\"relative_to_one_row\":1.0}}]}}"
            )
        );
        let back: BenchReport = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
        assert_eq!(serde_json::to_string(&back).unwrap(), line);
    }

    #[test]
    fn a_width_curve_report_reads_back_and_is_not_read_as_the_other_shape() {
        let r = WidthCurveReport {
            schema_version: BENCH_SCHEMA_VERSION,
            event: BenchEventKind::BenchWidthCurve,
            model: "m.gguf".into(),
            kernel_family: "avx2".into(),
            threads: 1,
            multirow: false,
            spec: CurveSpec {
                drafter: DrafterKind::Ngram,
                widths: vec![policy::Width::new(2).unwrap()],
                max_tokens: 8,
                reps: 3,
                warmup: 1,
                adaptive_cost: vec![],
            },
            tasks: vec![TaskCurve {
                task: "code".into(),
                prompt_ids: vec!["p".into()],
                arms: vec![
                    CurveArm {
                        width: None,
                        adaptive: false,
                        decode_tok_per_s: Some(summary()),
                        ratio_vs_classic: Some(1.0),
                        rounds: 0,
                        drafted: 0,
                        accepted: 0,
                        acceptance_rate: None,
                        emitted_per_verify: None,
                        ids_equal_classic: true,
                        declined: None,
                        single_token_steps: 14,
                        single_token_step_ms: Some(4.5),
                        single_token_step_vs_classic: Some(1.0),
                        verify_pass_ms: None,
                        single_token_step_vs_classic_same_position: None,
                    },
                    CurveArm {
                        width: Some(policy::Width::new(2).unwrap()),
                        adaptive: false,
                        decode_tok_per_s: None,
                        ratio_vs_classic: None,
                        rounds: 0,
                        drafted: 0,
                        accepted: 0,
                        acceptance_rate: None,
                        emitted_per_verify: None,
                        ids_equal_classic: false,
                        declined: Some("block-vs-chain probe failed at width 2".into()),
                        single_token_steps: 3,
                        single_token_step_ms: Some(4.75),
                        single_token_step_vs_classic: Some(4.75 / 4.5),
                        verify_pass_ms: Some(7.25),
                        single_token_step_vs_classic_same_position: Some(PositionMatched { ratio: 1.03125, steps: 3 }),
                    },
                ],
            }],
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.starts_with(r#"{"schema_version":2,"event":"bench_width_curve","model":"m.gguf""#), "{line}");
        assert!(
            line.contains(r#""spec":{"drafter":"ngram","widths":[2],"max_tokens":8,"reps":3,"warmup":1}"#),
            "{line}"
        );
        let back: WidthCurveReport = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
        assert_eq!(serde_json::to_string(&back).unwrap(), line);
        let wrong = serde_json::from_str::<BenchReport>(&line).unwrap_err().to_string();
        assert!(wrong.contains("missing field"), "{wrong}");
    }
}
