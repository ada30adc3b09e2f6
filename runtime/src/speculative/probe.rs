//! The block-vs-chain exactness probe run before speculating: a verify
//! block of `width + 1` rows must produce, byte for byte, the logits the
//! one-token chain produces at the same positions. If it does not, greedy
//! speculative output could drift from classic output, so speculation
//! declines (unless the operator forfeits exactness).

use crate::model::forward::{ForwardError, LogitRows};
use crate::model::{Model, Session};
use kernels::dispatch::KernelFamily;
use serde::{Deserialize, Serialize};

/// Text whose tokens make the probe sequence.
pub const PROBE_TEXT: &str =
    "In 1969, Apollo 11 landed on the Moon; fn main() { println!(\"hi\"); } — exactness probe.";

/// Cached positions before the probed block, so the block attends to a real prefix.
const PREFIX: usize = 8;

/// The probe's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Draft width probed: the verify block had `width + 1` rows.
    pub width: usize,
    pub passed: bool,
    /// First block row whose logits differ from the chain's.
    pub first_differing_row: Option<usize>,
    /// Bytes of logits that differ over the whole block.
    pub differing_bytes: usize,
    pub compared_bytes: usize,
    pub kernel_family: String,
    pub threads: usize,
}

/// Runs the probe for `width` on `model` with `probe_ids` (cycled to length).
pub fn block_vs_chain(
    model: &Model,
    family: KernelFamily,
    threads: usize,
    probe_ids: &[u32],
    width: usize,
) -> Result<ProbeReport, ForwardError> {
    // A context too short for a block and one position before it cannot
    // be probed: report a probe that did not pass (nothing compared), so
    // speculation declines instead of the run failing.
    let context = model.config.context_length;
    if width.saturating_add(2) > context {
        return Ok(ProbeReport {
            width,
            passed: false,
            first_differing_row: None,
            differing_bytes: 0,
            compared_bytes: 0,
            kernel_family: model.kernel_family_name(family).into(),
            threads,
        });
    }
    // The prefix shrinks to fit a short context.
    let prefix_len = PREFIX.min(context - width - 1);
    let n = prefix_len + width + 1;
    let ids: Vec<u32> = if probe_ids.is_empty() {
        (0..n as u32).map(|i| i % model.config.vocab as u32).collect()
    } else {
        probe_ids.iter().copied().cycle().take(n).collect()
    };
    let (prefix, block) = ids.split_at(prefix_len);
    let mut a = Session::new(&model.config);
    model.forward(family, &mut a, prefix, LogitRows::Last)?;
    let got = model.forward(family, &mut a, block, LogitRows::All)?;
    let mut b = Session::new(&model.config);
    model.forward(family, &mut b, prefix, LogitRows::Last)?;
    let vocab = model.config.vocab;
    let (mut differing, mut first) = (0usize, None);
    for (row, &t) in block.iter().enumerate() {
        let want = model.forward(family, &mut b, &[t], LogitRows::Last)?;
        let have = &got[row * vocab..(row + 1) * vocab];
        let d: usize = have
            .iter()
            .zip(&want)
            .map(|(x, y)| x.to_le_bytes().iter().zip(y.to_le_bytes()).filter(|(p, q)| **p != *q).count())
            .sum();
        if d > 0 && first.is_none() {
            first = Some(row);
        }
        differing += d;
    }
    Ok(ProbeReport {
        width,
        passed: differing == 0,
        first_differing_row: first,
        differing_bytes: differing,
        compared_bytes: block.len() * vocab * 4,
        kernel_family: model.kernel_family_name(family).into(),
        threads,
    })
}
