//! What a reviewer reads and commits: the record ([`record`]: record.md,
//! summary.csv, plot.svg), the policy entry ([`propose`]) and the ledger of
//! every sweep ([`ledger`]); names from files made safe to print
//! ([`printable`]); one writer of the policy table at a time
//! ([`table_lock`]).
pub mod ledger;
pub mod printable;
pub mod propose;
pub mod record;
pub mod table_lock;
