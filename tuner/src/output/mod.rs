//! What a reviewer reads and commits: the record ([`record`]: record.md,
//! summary.csv, plot.svg), the policy entry ([`propose`]) and the ledger of
//! every sweep ([`ledger`]), and which records a pool may read
//! ([`pool_records`]); a calibration's record and its predicted
//! entry ([`predicted`]); a check's line in an entry ([`check`]); names
//! from files made safe to print ([`printable`]); one writer of the policy
//! table at a time ([`table_lock`]).
pub mod check;
pub mod ledger;
pub mod pool_records;
pub mod predicted;
pub mod printable;
pub mod propose;
pub mod record;
pub mod table_lock;
