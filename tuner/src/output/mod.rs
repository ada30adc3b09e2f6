//! What a reviewer reads and commits: the record ([`record`]: record.md,
//! summary.csv, plot.svg), the policy entry ([`propose`]) and the ledger of
//! every sweep ([`ledger`]); a calibration's record and its predicted
//! entry ([`predicted`]); a check's line in an entry ([`check`]).
pub mod check;
pub mod ledger;
pub mod predicted;
pub mod propose;
pub mod record;
