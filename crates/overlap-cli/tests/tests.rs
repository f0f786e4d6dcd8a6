//! The integration tests of the `overlap` command, one binary (modules
//! below), each running the built binary as a user would.

mod util;

mod bench;
mod journal;
mod probe;
mod serve;
