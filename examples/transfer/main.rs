//! The user's yardstick (docs/design.md section 9): blocks of account transfers, each
//! committed with a witness, on a database of `2^n` accounts built by bulk import.
//!
//! ```sh
//! cargo run --release --example transfer                       # 2^20 accounts, 20 workloads
//! cargo run --release --example transfer -- --accounts-log2 24 --dir /data/pt24 --cold
//! cargo run --release --example transfer -- --help             # every flag and its default
//! ```
//!
//! The same workload side by side with NOMT is the `pagetrie-compare` crate
//! of this workspace (`cargo run --release -p pagetrie-compare -- --help`),
//! which keeps NOMT out of the library's own build.

mod harness;
mod probe;
mod table;
mod versions;
mod workload;

use clap::Parser;

/// The transfer workload: blocks of transfers between 2^n accounts, each block
/// committed with a witness; prints its figures.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: harness::RunArgs,
}

fn main() -> Result<(), harness::BoxError> {
    let args = Cli::parse().run;
    let (dir, _temp) = harness::database_dir(&args)?;
    let run = harness::run_pagetrie(&args, &dir)?;
    harness::report(&args, "pagetrie", &run)
}
