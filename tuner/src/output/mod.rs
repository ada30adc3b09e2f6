//! What a reviewer reads and commits: the record ([`record`]: record.md,
//! summary.csv, plot.svg), the policy entry ([`propose`]) and the ledger of
//! every sweep ([`ledger`]).
pub mod ledger;
pub mod propose;
pub mod record;
