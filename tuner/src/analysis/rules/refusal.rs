//! Why a record cannot become a policy entry: the [`Refusal`] every check
//! in [`crate::analysis::rules`] returns. Each message ends with the remedy.
//!
//! The variants from [`Refusal::NotUnderRecords`] on are not judgements of
//! the measurement but of where `tuner propose` was pointed (the record's
//! folder, the table, the file system).
use crate::data::plan::SpeculativeArm;
use std::path::PathBuf;

/// Why a record cannot become an entry. Each message ends with the remedy.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("the sweep is incomplete ({0}); finish it with `tuner sweep --resume DIR`, then `tuner summarize DIR`")]
    Incomplete(String),
    #[error("the record's key is unknown: {0}; re-run the sweep with one runtime build and one target")]
    Key(String),
    #[error(
        "the host drifted: in {0} the closing brackets' speed differs from the opening brackets' by more than \
         the drift tests allow (a round's by credibly more than their tolerance, the sweep's by more than the \
         bracket arms' spread explains); re-run `tuner sweep` (every run is in records/ledger.jsonl)"
    )]
    Drift(String),
    #[error(
        "the record's plan cannot detect a {target:.0}% drift: at its measured bracket-arm spread the sweep's \
         drift test flags a systematic slowdown of the closing brackets with 90% power only from {detectable:.1}% \
         on ({bracket_arms} bracket arm(s) a side over {rounds} round(s)); re-run `tuner sweep` with \
         `--bracket-arms {needed}` (what this spread needs) or more rounds",
        target = 100.0 * crate::analysis::estimate::DRIFT_TO_DETECT,
        detectable = 100.0 * detectable
    )]
    WeakDriftTest { detectable: f64, bracket_arms: usize, rounds: usize, needed: String },
    #[error(
        "arm(s) {arms} were read by the gate fewer than {min} times while they ran, so contention during them \
         could have gone unseen; re-run `tuner sweep` with this tuner (every arm is read at least {min} times)",
        min = crate::host::gate::during::MIN_IN_ARM_READINGS
    )]
    Unwatched { arms: String },
    #[error(
        "drift cannot be ruled out: round(s) {0} could not be judged (the test needs two prompts paired and a \
         variance of the bracket arms: two or more arms a side, or two widths and two rounds); re-run with the \
         default plan or more prompts"
    )]
    DriftUnjudged(String),
    #[error(
        "output differs from classic decoding ({0}); speculation is not exact on this build: fix the runtime \
         (see `runtime generate --drafter ... --json` exactness_probe) before measuring widths"
    )]
    Inexact(String),
    #[error(
        "gate source(s) were accepted as unknown before arm(s) {0}: the host was not fully checked; re-run the \
         sweep without `--accept-unknown` on a host where every gate source can be read"
    )]
    AcceptedUnknown(String),
    #[error(
        "the chosen width {width} is not a measurement ({why}); a declined or zero-round arm measured classic \
         decoding: fix the drafter or the probe, then re-run the sweep"
    )]
    NotAMeasurement { width: SpeculativeArm, why: String },
    #[error(
        "the decision is `off`, but width(s) {0} were not measurements, so `off` is not shown for every width; \
         fix them and re-run the sweep"
    )]
    OffWithoutMeasurements(String),
    #[error("no decision: {0}; the record has no complete speculative arm with its brackets")]
    NoDecision(String),
    #[error(
        "the record has {0} complete round(s): with the process as the unit, an interval needs at least two; \
         re-run `tuner sweep` with `--rounds 2` or more (the default is {rounds})",
        rounds = crate::data::plan::DEFAULT_ROUNDS
    )]
    TooFewRounds(usize),
    #[error(
        "width(s) {0} are not measurements; under the tie rule any width can change the decision (as the best it \
         redefines the tied set; as a narrower tied width it would be taken), so no entry is proposed; fix the \
         cause named in the record and re-run the sweep"
    )]
    WidthsNotMeasured(String),
    #[error("the raw data does not match the plan or itself: {0}")]
    DataProblems(String),
    #[error(
        "the chosen width {width} is the widest the sweep measured ([{shown}]): the best width may lie past the \
         range, so the record cannot say; re-run `tuner sweep` with wider `--widths` (e.g. 1-{wider})",
        shown = widths.iter().map(SpeculativeArm::to_string).collect::<Vec<_>>().join(", "),
        wider = (width.code() + 4).min(policy::MAX_WIDTH)
    )]
    WidestWidth { width: SpeculativeArm, widths: Vec<SpeculativeArm> },
    #[error(
        "the sweep's gate was looser than the defaults ({0}), so its arms ran through more contention than a \
         record may; re-run `tuner sweep` with the default gate, or pass --allow-loose-gate (the entry's note then \
         says so)"
    )]
    LooserGate(String),
    #[error(
        "arm(s) {arms} ran a dirty build (`build.git_dirty` is true in their startup events: tracked files \
         differed from commit {commits}), so no commit holds the code that was measured; commit the change, \
         rebuild, and re-run `tuner sweep`, or pass --allow-dirty to propose the record anyway"
    )]
    DirtyBuild { arms: String, commits: String },
    #[error(
        "whether the build was dirty is unknown for arm(s) {arms} ({why}), and an unknown build is refused like a \
         dirty one; rebuild in a git checkout and re-run `tuner sweep`, or pass --allow-dirty (it covers \
         an unknown state too) to propose the record anyway"
    )]
    DirtyUnknown { arms: String, why: String },
    #[error(
        "the record was measured with kernel fingerprint {record}, but this build's is {current} (the kernels \
         changed since the sweep), so the entry would be stale as soon as it is built and never used; re-run \
         `tuner sweep` with this build, or pass --allow-stale-fingerprint to propose the record anyway"
    )]
    StaleFingerprint { record: String, current: String },
    #[error(
        "the record is dated {record_date}, older than the entry it would replace ({key}: {entry_record}, dated \
         {entry_date}); keep the newer entry, or pass --allow-older to replace it anyway"
    )]
    Older { record_date: String, key: String, entry_record: String, entry_date: String },
    #[error(
        "the record's date {0:?} is not YYYY-MM-DD (raw.jsonl's `sweep` header); the record is damaged: re-run `tuner sweep`"
    )]
    BadDate(String),
    #[error("{record} is not the sweep records/ledger.jsonl records: {why}")]
    Unvouched { record: String, why: String },
    #[error("{dir} is not under {root}/records/; move the record folder there (entries cite records/<folder>)")]
    NotUnderRecords { dir: String, root: String },
    #[error("no policy table found above {0}: pass `--table PATH` (policy/draft-block-width.toml in the repository)")]
    NoTable(String),
    #[error(
        "the table's entry for {key} rests on {basis} ({record}) and is fresh for this build: a prediction never \
         replaces a measurement; `tuner check` re-checks it, `tuner sweep` re-measures it"
    )]
    MeasurementStands { key: String, basis: String, record: String },
    #[error("{0}")]
    Table(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}
