//! The `TokenSink` both decoders report to (the server streams and cancels
//! through it): it sees exactly the emitted tokens, in order, and it can end
//! a generation — `Halt::Stop` keeps the tokens so far, `Halt::Cancel`
//! abandons it — in classic decoding and in the middle of a speculative round.

mod common;

use common::model;
use kernels::dispatch::KernelFamily;
use runtime::engine::{Engine, FinishReason, GenerateError, Halt, TokenSink};
use runtime::sampling::SamplingParams;
use runtime::speculative::drafter::NgramDrafter;
use std::ops::ControlFlow;

const MAX_TOKENS: usize = 32;
/// Repetitive, so the n-gram drafter drafts and rounds emit several tokens.
const PROMPT: &str = "1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2,";

/// Records tokens; halts with `halt` after `after` of them.
struct Recorder {
    seen: Vec<u32>,
    halt: Option<(usize, Halt)>,
}

impl TokenSink for Recorder {
    fn token(&mut self, id: u32) -> ControlFlow<Halt> {
        self.seen.push(id);
        match self.halt {
            Some((after, h)) if self.seen.len() == after => ControlFlow::Break(h),
            _ => ControlFlow::Continue(()),
        }
    }
}

fn engine() -> Engine {
    Engine::new(runtime::model::load(&model().info.path).unwrap(), KernelFamily::best(), 2).unwrap()
}

/// The outcome of a run: (tokens, finish reason, speculative rounds).
type Outcome = Result<(Vec<u32>, FinishReason, usize), GenerateError>;

/// Decodes with a recorder, classically (`width` None) or speculatively.
fn run(e: &Engine, width: Option<usize>, halt: Option<(usize, Halt)>) -> (Outcome, Vec<u32>) {
    let ids = e.loaded.tokenizer.encode_prompt(PROMPT).unwrap();
    let greedy = SamplingParams::default();
    let mut sink = Recorder { seen: Vec::new(), halt };
    let pre = e.prefill(&ids).unwrap();
    let r = match width {
        None => e.decode_with(pre, MAX_TOKENS, &greedy, &mut sink).map(|g| (g, 0)),
        Some(w) => {
            let mut d = NgramDrafter::default();
            e.decode_speculative(
                pre,
                MAX_TOKENS,
                &greedy,
                &mut d,
                policy::Width::new(w).unwrap(),
                &mut sink,
            )
            .map(|(g, s)| (g, s.rounds))
        }
    };
    (r.map(|(g, rounds)| (g.token_ids, g.finish_reason, rounds)), sink.seen)
}

#[test]
fn the_sink_sees_exactly_the_emitted_tokens_in_both_decoders() {
    let e = engine();
    let ids = e.loaded.tokenizer.encode_prompt(PROMPT).unwrap();
    let plain = e.generate(&ids, MAX_TOKENS, &SamplingParams::default()).unwrap();
    for width in [None, Some(1), Some(4)] {
        let (r, seen) = run(&e, width, None);
        let (tokens, finish, rounds) = r.unwrap();
        assert!(width.is_none() || rounds > 0, "width {width:?}: no rounds, so this tests no speculation");
        assert_eq!(tokens, plain.token_ids, "width {width:?}: a sink must not change the output");
        assert_eq!(finish, plain.finish_reason);
        assert_eq!(seen, tokens, "width {width:?}");
    }
}

#[test]
fn stop_keeps_the_tokens_so_far_and_cancel_abandons_the_request() {
    let e = engine();
    let (full, _) = run(&e, None, None);
    let (full, _, _) = full.unwrap();
    assert!(full.len() > 10);
    for width in [None, Some(4)] {
        // Halting at every position: inside a speculative round for most of them.
        let mut rounds_before_a_stop = 0;
        for after in 1..=10 {
            let (r, seen) = run(&e, width, Some((after, Halt::Stop)));
            let (tokens, finish, rounds) = r.unwrap();
            rounds_before_a_stop += rounds;
            assert_eq!(tokens, full[..after], "width {width:?}, stop after {after}");
            assert_eq!(finish, FinishReason::Stop);
            assert_eq!(seen.len(), after);
            let (r, seen) = run(&e, width, Some((after, Halt::Cancel)));
            assert!(matches!(r, Err(GenerateError::Cancelled)), "width {width:?}, cancel after {after}");
            assert_eq!(seen, full[..after]);
        }
        assert!(width.is_none() || rounds_before_a_stop > 0, "no stop came after a speculative round");
    }
}
