//! Ethereum's state tests on pagetrie and on revm's in-memory state: each
//! case's transaction runs on both, and each post state's Merkle-Patricia
//! root (computed from what the engine holds) and logs hash must equal the
//! file's and each other's.
//!
//! ```sh
//! cargo run --release -p pagetrie-revm --example statetest -- revm/tests/statetests
//! cargo run --release -p pagetrie-revm --example statetest -- path/to/GeneralStateTests
//! ```
//!
//! Files are in the format of Ethereum's public GeneralStateTests. Cases
//! of forks before Cancun are skipped: pagetrie's key layout relies on
//! Cancun's self-destruct rules (EIP-6780). The run prints each failure and
//! ends with the passed, failed and skipped counts, skips by reason; it
//! exits non-zero if any case failed.

mod engines;
mod roots;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use pagetrie_revm::revm::context::CfgEnv;
use pagetrie_revm::revm::primitives::hardfork::SpecId;
use pagetrie_revm::revm::primitives::U256;
use revm_statetest_types::{SpecName, Test, TestSuite, TestUnit};

use engines::Outcome;

#[derive(Parser, Debug)]
#[command(about = "Ethereum's state tests on pagetrie and on revm's in-memory state")]
struct Args {
    /// Files or directories (searched for .json files) of state tests.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Failures printed in full; the rest are counted by reason.
    #[arg(long, default_value_t = 50)]
    show: usize,
}

/// The run's tallies.
#[derive(Default)]
struct Tally {
    passed: u64,
    /// Passed without reaching an engine: a transaction the test expects
    /// refused that revm's test types could not even build.
    refused_unbuilt: u64,
    failed: u64,
    skipped: u64,
    skipped_by: BTreeMap<String, u64>,
    failed_by: BTreeMap<String, u64>,
    shown: usize,
}

impl Tally {
    fn skip(&mut self, reason: String, n: u64) {
        self.skipped += n;
        *self.skipped_by.entry(reason).or_default() += n;
    }

    fn fail(&mut self, show: usize, case: &str, kind: &str, detail: String) {
        self.failed += 1;
        *self.failed_by.entry(kind.to_string()).or_default() += 1;
        if self.shown < show {
            self.shown += 1;
            println!("FAIL {case}: {kind}: {detail}");
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut files = Vec::new();
    for path in &args.paths {
        collect(path, &mut files)?;
    }
    files.sort();
    let start = Instant::now();
    let store = engines::Store::new()?;
    let mut tally = Tally::default();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        match serde_json::from_str::<TestSuite>(&text) {
            Ok(suite) => {
                for (name, unit) in &suite.0 {
                    let case = format!("{}::{name}", file.display());
                    run_unit(&args, &store, &case, unit, &mut tally)?;
                }
            }
            Err(e) => tally.fail(
                args.show,
                &file.display().to_string(),
                "unreadable file",
                e.to_string(),
            ),
        }
    }
    println!(
        "{} files in {:.1} s; skipped by reason:",
        files.len(),
        start.elapsed().as_secs_f64()
    );
    for (reason, n) in &tally.skipped_by {
        println!("  {n:>6}  {reason}");
    }
    if !tally.failed_by.is_empty() {
        println!("failed by reason:");
        for (reason, n) in &tally.failed_by {
            println!("  {n:>6}  {reason}");
        }
    }
    println!(
        "of the passed, {} expected a refusal and did not build (no engine ran them)",
        tally.refused_unbuilt
    );
    println!(
        "{} passed, {} failed, {} skipped",
        tally.passed, tally.failed, tally.skipped
    );
    if tally.failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// Every `.json` file at or under `path`.
fn collect(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_dir() {
        for entry in std::fs::read_dir(path)? {
            collect(&entry?.path(), out)?;
        }
    } else if path.extension().is_some_and(|e| e == "json") {
        out.push(path.to_path_buf());
    }
    Ok(())
}

/// Runs every case of `unit` whose fork pagetrie's layout supports.
fn run_unit(
    args: &Args,
    store: &engines::Store,
    case: &str,
    unit: &TestUnit,
    tally: &mut Tally,
) -> Result<(), Box<dyn std::error::Error>> {
    if unit.post.keys().any(supported) {
        store.with_pre(unit, |db| run_cases(args, db, case, unit, tally))
    } else {
        for (spec_name, tests) in &unit.post {
            tally.skip(skip_reason(spec_name), tests.len() as u64);
        }
        Ok(())
    }
}

/// Whether pagetrie's layout supports `spec_name`'s rules: Cancun's or
/// later. Constantinople's rules are Petersburg's in revm's types, which
/// refuse the name; before Cancun either way.
fn supported(spec_name: &SpecName) -> bool {
    !matches!(
        spec_name,
        SpecName::Unknown | SpecName::Constantinople | SpecName::ByzantiumToConstantinopleAt5
    ) && spec_name.to_spec_id().is_enabled_in(SpecId::CANCUN)
}

fn skip_reason(spec_name: &SpecName) -> String {
    match spec_name {
        SpecName::Unknown => "a fork this revm does not name".into(),
        other => format!("{other:?}: before Cancun (EIP-6780)"),
    }
}

fn run_cases(
    args: &Args,
    db: &pagetrie::Db,
    case: &str,
    unit: &TestUnit,
    tally: &mut Tally,
) -> Result<(), Box<dyn std::error::Error>> {
    for (spec_name, tests) in &unit.post {
        let n = tests.len() as u64;
        if !supported(spec_name) {
            tally.skip(skip_reason(spec_name), n);
            continue;
        }
        let spec = spec_name.to_spec_id();
        let mut cfg = CfgEnv::default();
        cfg.chain_id = unit
            .env
            .current_chain_id
            .unwrap_or(U256::ONE)
            .try_into()
            .unwrap_or(1);
        cfg.set_spec_and_mainnet_gas_params(spec);
        cfg.set_max_blobs_per_tx(
            if spec.is_enabled_in(SpecId::PRAGUE) && !spec.is_enabled_in(SpecId::OSAKA) {
                9
            } else {
                6
            },
        );
        let block = unit.block_env(&mut cfg);
        for (index, test) in tests.iter().enumerate() {
            let case = format!("{case} {spec_name:?} #{index}");
            let tx = match test.tx_env(unit) {
                Ok(tx) => tx,
                // Refused as the test expects before reaching an engine.
                Err(_) if test.expect_exception.is_some() => {
                    tally.passed += 1;
                    tally.refused_unbuilt += 1;
                    continue;
                }
                Err(e) => {
                    tally.fail(args.show, &case, "transaction not built", e.to_string());
                    continue;
                }
            };
            let ours = engines::on_pagetrie(db, unit, &cfg, &block, &tx)?;
            let theirs = engines::on_revm(unit, &cfg, &block, &tx);
            match check(test, &ours, &theirs) {
                Ok(()) => tally.passed += 1,
                Err((kind, detail)) => tally.fail(args.show, &case, kind, detail),
            }
        }
    }
    Ok(())
}

/// A case passes when both engines refuse the transaction as the test
/// expects, or both run it to the expected logs and state root.
fn check(test: &Test, ours: &Outcome, theirs: &Outcome) -> Result<(), (&'static str, String)> {
    match (&test.expect_exception, &ours.refused, &theirs.refused) {
        (Some(_), Some(_), Some(_)) => return Ok(()),
        (None, None, None) => {}
        (expected, ours, theirs) => {
            return Err((
                "refusal differs",
                format!("expected {expected:?}, pagetrie {ours:?}, revm {theirs:?}"),
            ))
        }
    }
    if ours.state_root != theirs.state_root {
        return Err((
            "pagetrie and revm disagree on the state root",
            format!(
                "pagetrie {}, revm {}, file {}",
                ours.state_root, theirs.state_root, test.hash
            ),
        ));
    }
    if ours.logs_hash != theirs.logs_hash || ours.logs_hash != test.logs {
        return Err((
            "logs hash",
            format!(
                "pagetrie {}, revm {}, file {}",
                ours.logs_hash, theirs.logs_hash, test.logs
            ),
        ));
    }
    if ours.state_root != test.hash {
        return Err((
            "state root differs from the file's (both engines agree)",
            format!("engines {}, file {}", ours.state_root, test.hash),
        ));
    }
    Ok(())
}
