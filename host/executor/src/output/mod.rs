//! A command's output: the pumps that read its pipes, the byte-exact tails kept in memory, the
//! spill files that hold a whole stream once it overflows, and the meter progress reports read.

pub(crate) mod ledger;
pub(crate) mod meter;
pub(crate) mod spill;
pub(crate) mod stream;
pub(crate) mod tail;
