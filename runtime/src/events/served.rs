//! The `draftwise` object of a `runtime serve` response (docs/serve.md): the
//! server-side timings and speculation counters of one request. Not
//! OpenAI's, but clients ignore fields they do not know, and measurements
//! need them; the tuner reads it back with these types.

use super::{Completion, SpeculationReport};
use serde::{Deserialize, Serialize};

/// A served request's timings as the server measured them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServedTimings {
    /// From arriving in the wait queue to the start of its prefill.
    pub queue_ms: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub decode_steps: usize,
    /// Tokens after the first per second of decode; null when there were none.
    pub decode_tok_per_s: Option<f64>,
    /// The generated token ids (a stop string's tokens included), for exact
    /// comparisons across runs. Always in a response; the tuner's raw rows
    /// keep them once, in the row, and leave them out here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// Null for a request that did not speculate.
    #[serde(default)]
    pub speculative: Option<ServedSpeculative>,
    /// The batches the request ran in (`runtime serve --parallel`); absent
    /// in records of servers that ran one sequence at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<ServedBatch>,
}

/// `draftwise.batch`: the passes a served request had rows in, and how many
/// sequences those passes carried (itself included).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServedBatch {
    pub passes: usize,
    /// Sequences per pass, on average over its passes.
    pub mean_sequences: f64,
    /// The most sequences one of its passes carried.
    pub widest: usize,
}

/// `draftwise.speculative`: the counters of a speculative request, or the
/// reason it declined to classic decoding (the two shapes have no field
/// that could be mistaken for the other's, so they need no tag).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ServedSpeculative {
    Ran {
        drafter: String,
        #[serde(alias = "block_size")]
        width: policy::Width,
        rounds: usize,
        drafted: usize,
        accepted: usize,
        acceptance_rate: Option<f64>,
        emitted_per_verify: Option<f64>,
        /// Rounds whose draft token `i` was accepted.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        accepted_per_position: Vec<usize>,
        /// Target passes whose round asked for `n` drafted tokens.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        draft_lengths: Vec<usize>,
        /// The draft length was chosen per round (up to `width`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        adaptive: bool,
    },
    Declined {
        drafter: String,
        #[serde(alias = "block_size")]
        width: policy::Width,
        declined: String,
    },
}

impl ServedTimings {
    /// The timings of `c`, which waited `queue_ms` before its prefill.
    pub fn new(queue_ms: f64, c: &Completion, speculation: Option<&SpeculationReport>) -> Self {
        let o = &c.outcome;
        // Computed from the millisecond total (not from the completion's own
        // rate) so the figure is the one clients have always been sent.
        let decode_tokens = o.usage.completion_tokens.saturating_sub(1);
        ServedTimings {
            queue_ms,
            prefill_ms: o.prefill_ms,
            decode_ms: o.decode_ms,
            decode_steps: o.decode_steps,
            decode_tok_per_s: (decode_tokens > 0 && o.decode_ms > 0.0)
                .then(|| decode_tokens as f64 * 1e3 / o.decode_ms),
            token_ids: Some(o.token_ids.clone()),
            speculative: speculation.map(|s| match s {
                SpeculationReport::Diagnostics(d) => ServedSpeculative::Ran {
                    drafter: d.drafter.clone(),
                    width: d.width,
                    rounds: d.rounds,
                    drafted: d.drafted,
                    accepted: d.accepted,
                    acceptance_rate: d.acceptance_rate,
                    emitted_per_verify: d.emitted_per_verify,
                    accepted_per_position: d.accepted_per_position.clone(),
                    draft_lengths: d.draft_lengths.clone(),
                    adaptive: d.adaptive,
                },
                SpeculationReport::Declined(d) => ServedSpeculative::Declined {
                    drafter: d.drafter.clone(),
                    width: d.width,
                    declined: d.reason.clone(),
                },
            }),
            batch: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speculative_counters_and_declines_read_back_as_their_own_shape() {
        let ran = r#"{"acceptance_rate":null,"accepted":3,"drafted":4,"drafter":"ngram","emitted_per_verify":1.5,"rounds":2,"width":2}"#;
        let declined = r#"{"declined":"probe failed","drafter":"ngram","width":2}"#;
        let r: ServedSpeculative = serde_json::from_str(ran).unwrap();
        assert!(matches!(r, ServedSpeculative::Ran { rounds: 2, acceptance_rate: None, .. }), "{r:?}");
        let d: ServedSpeculative = serde_json::from_str(declined).unwrap();
        assert!(matches!(&d, ServedSpeculative::Declined { declined, .. } if declined == "probe failed"), "{d:?}");
        // Inside a response body (a `serde_json::Value`) keys are sorted: the bytes clients get.
        assert_eq!(serde_json::to_value(&r).unwrap().to_string(), ran);
        assert_eq!(serde_json::to_value(&d).unwrap().to_string(), declined);
    }
}
