//! The transfer workload side by side: pagetrie and NOMT on the same
//! accounts and transfers; after every workload the roots must be equal,
//! since both commit to the same trie. A crate of its own so that the
//! library's build and tests never compile NOMT.
//!
//! Fair by default, as a skeptical NOMT author would have it:
//! - NOMT is opened as its authors' benchmark opens it (three upper page
//!   levels read in at open) with its page cache shrunk so both hold as many
//!   trie pages in RAM (both budgets are printed; `--nomt-defaults` keeps
//!   NOMT's plain defaults), its hash table sized for the pages the trie
//!   will store at most half full.
//! - NOMT runs at its own default commit concurrency (1) and at pagetrie's
//!   worker count, each on a database of its own; ratios are against the
//!   faster.
//! - NOMT's rollback is on, as deep as pagetrie's history, whenever
//!   pagetrie keeps one (`--history 0` turns both off).
//! - Each database is built in a process of its own; `--rounds` rounds
//!   (4 by default) alternate the order, each run a process that opens its
//!   database once (the open measured is the process's first); each round,
//!   the medians and their spread are shown.
//! - Every round runs both disk states: primed (each engine's files read
//!   through before its run, so a virtual disk keeping what was read lately
//!   serves both alike) and cold (an unrelated file read first, so neither
//!   database's blocks were touched lately). The disk's lone read on each
//!   engine's files is probed before the open and after the last commit
//!   (median, mean, 90th percentile), beside the run's read latency.
//!
//! ```sh
//! cargo run --release -p pagetrie-compare                      # both at 2^20, with ratios
//! cargo run --release -p pagetrie-compare -- --engine nomt     # NOMT alone
//! cargo run --release -p pagetrie-compare -- --help            # every flag and its default
//! ```

#[path = "../../examples/transfer/harness.rs"]
mod harness;
mod nomt_engine;
#[path = "../../examples/transfer/probe.rs"]
mod probe;
mod rounds;
#[path = "../../examples/transfer/table.rs"]
mod table;
#[path = "../../examples/transfer/versions.rs"]
mod versions;
#[path = "../../examples/transfer/workload.rs"]
mod workload;

use std::path::Path;

use clap::{Parser, ValueEnum};
use harness::{bar, BoxError, Run, RunArgs};
use nomt_engine::NomtSettings;
use rounds::{both, Plan};

/// Which database runs the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Engine {
    Pagetrie,
    Nomt,
    /// Pagetrie, then NOMT, each in a child process; a table with ratios.
    Both,
}

/// What the disk has served lately when a run starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum DiskState {
    Primed,
    Cold,
    AsIs,
}

/// The transfer workload on pagetrie, NOMT or both, with their ratios.
#[derive(Parser, Clone, Debug)]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// The database to measure.
    #[arg(long, value_enum, default_value_t = Engine::Both)]
    engine: Engine,
    /// With both engines: rounds of `--workloads` each, every run in a
    /// process of its own that opens the database anew, the engines
    /// alternating (pagetrie first in odd rounds, last in even ones); the
    /// table shows each round and the medians with their spread.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// NOMT with its plain defaults (two upper page levels, none read in at
    /// open, the page cache at `--page-cache-mib`) instead of as its
    /// authors' benchmark opens it (three upper levels read in at open, and
    /// the page cache shrunk so both engines hold as many trie pages in RAM).
    #[arg(long)]
    nomt_defaults: bool,
    /// NOMT's commit concurrency, comma separated: with both engines each
    /// round runs NOMT once at each, and the ratios are against the faster
    /// (by median workload). Default: NOMT's own default, 1, and pagetrie's
    /// `--workers`. With `--engine nomt`, the first.
    #[arg(long, value_delimiter = ',')]
    nomt_commit_concurrency: Vec<usize>,
    /// With both engines: the disk states each round runs both engines in,
    /// comma separated. `primed` reads each engine's files through before
    /// its run: a virtual disk answering data read or written lately
    /// several times faster than the rest (here 90 against 260 us a 4 KiB
    /// read) then serves both alike. `cold` first reads `--evict-gib` of a
    /// file of its own, so that neither database's blocks were touched
    /// lately. `as-is` does neither, favouring whichever engine ran last.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "primed,cold")]
    disk: Vec<DiskState>,
    /// The unrelated reads before a `cold` run, in GiB (a file under
    /// `--dir`, written once).
    #[arg(long, default_value_t = 16)]
    evict_gib: u64,
    /// Internal: workloads the database will see in all, for sizing NOMT's
    /// hash table when it is built by a run of fewer.
    #[arg(long, hide = true)]
    nomt_total_workloads: Option<usize>,
}

fn main() -> Result<(), BoxError> {
    let Args {
        run: args,
        engine,
        rounds,
        nomt_defaults,
        nomt_commit_concurrency,
        disk,
        evict_gib,
        nomt_total_workloads,
    } = Args::parse();
    if args.hold_snapshot && engine != Engine::Pagetrie {
        return Err("--hold-snapshot holds a pagetrie session (--engine pagetrie)".into());
    }
    let total = nomt_total_workloads.unwrap_or(args.workloads);
    if args.threads as u64 > 1u64 << args.accounts_log2 {
        return Err("more execution threads than accounts".into());
    }
    if args.versions && engine != Engine::Pagetrie {
        return Err("--versions measures pagetrie's history (--engine pagetrie)".into());
    }
    let mut concurrency = nomt_commit_concurrency;
    if concurrency.is_empty() {
        concurrency = vec![1, args.workers];
    }
    concurrency.dedup();
    if concurrency.contains(&0) {
        return Err("NOMT's commit concurrency is at least 1".into());
    }
    if engine == Engine::Both {
        let plan = Plan {
            rounds: rounds.max(1),
            plain: nomt_defaults,
            concurrency,
            disk,
            evict_gib,
        };
        return both(&args, &plan);
    }
    if engine == Engine::Nomt {
        let (dir, _temp) = harness::database_dir(&args)?;
        let settings = nomt_settings(&args, nomt_defaults, total, concurrency[0]);
        let run = run_nomt(&args, &dir, &settings)?;
        return harness::report(&args, engine_name(engine), &run);
    }
    let (dir, _temp) = harness::database_dir(&args)?;
    let run = harness::run_pagetrie(&args, &dir)?;
    harness::report(&args, engine_name(engine), &run)
}

/// NOMT's settings for this run: as its authors' benchmark opens it, with
/// its page cache sized so it holds as many trie pages in RAM as pagetrie,
/// or (`plain`) its defaults; its hash table sized for `workloads` in all;
/// its rollback on, as deep as pagetrie's history, whenever pagetrie keeps
/// one, so both carry the cost of going back.
pub(crate) fn nomt_settings(
    args: &RunArgs,
    plain: bool,
    workloads: usize,
    commit_concurrency: usize,
) -> NomtSettings {
    // Every account the runs may create, so the hash table never fills.
    let fresh = (workloads * args.transfers) as u64 * args.fresh / 100;
    let keys = (1u64 << args.accounts_log2) + fresh;
    let keys_now = 1u64 << args.accounts_log2;
    let (upper_levels, prepopulate, page_cache_mib) = match plain {
        true => (2, false, args.page_cache_mib),
        false => (
            nomt_engine::AUTHORS_UPPER_LEVELS,
            true,
            nomt_engine::fair_page_cache_mib(
                args.page_cache_mib,
                keys_now,
                nomt_engine::AUTHORS_UPPER_LEVELS,
            ),
        ),
    };
    NomtSettings {
        commit_concurrency,
        page_cache_mib,
        leaf_cache_mib: args.value_cache_mib,
        warm_up: args.lookahead > 0,
        upper_levels,
        prepopulate,
        buckets: nomt_engine::buckets_for(keys),
        rollback: u32::try_from(args.history).unwrap_or(u32::MAX),
    }
}

pub(crate) fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Nomt => "nomt",
        _ => "pagetrie",
    }
}
fn run_nomt(args: &RunArgs, dir: &Path, settings: &NomtSettings) -> Result<Run, BoxError> {
    if !args.json {
        eprintln!(
            "nomt: {} upper page levels{} ({:.0} MiB beyond pagetrie's pinned ones), page cache {} MiB, {} hash-table buckets, commit concurrency {}, rollback {}",
            settings.upper_levels,
            if settings.prepopulate { " read in at open" } else { "" },
            nomt_engine::upper_levels_mib(1 << args.accounts_log2, settings.upper_levels),
            settings.page_cache_mib,
            settings.buckets,
            settings.commit_concurrency,
            match settings.rollback {
                0 => "off".to_string(),
                n => format!("on ({n} commits)"),
            }
        );
    }
    let quiet = args.json;
    let db_dir = nomt_engine::paths(dir).0;
    let read_through = harness::read_through(args, &db_dir)?;
    let mut disk_before = probe::disk_read_latency(&db_dir, probe::READS);
    let (db, mut accounts, import, open) =
        nomt_engine::open_or_fill(dir, args.accounts_log2, settings, |done, total| {
            if !quiet {
                let line = bar(done as f64 / total as f64, &format!("{done}/{total}"));
                eprint!("\rfill by commits: {line}   ");
            }
        })?;
    let import_peak_rss = import.map(|_| workload::peak_rss_bytes());
    if import.is_some() {
        disk_before = probe::disk_read_latency(&db_dir, probe::READS);
    }
    harness::announce(args, import, dir);
    let initial_root = nomt_engine::root(&db);
    let mut pipeline = nomt_engine::Pipeline::default();
    let mut stats = harness::workloads(args, |config| match (config, args.pipeline) {
        (Some(config), true) => pipeline.run(&db, &mut accounts, config).map(Some),
        (Some(config), false) => nomt_engine::run_workload(&db, &mut accounts, config).map(Some),
        (None, _) => Ok(None),
    })?;
    // The last commit belongs to the last workload's time.
    let tail = pipeline.wait(&db)?;
    if let Some(last) = stats.last_mut() {
        last.total += tail;
    }
    let disk_after = probe::disk_read_latency(&db_dir, probe::READS);
    Ok(Run {
        stats,
        initial_root,
        import,
        import_peak_rss,
        open,
        db_bytes: workload::dir_bytes(&db_dir),
        peak_rss: workload::peak_rss_bytes(),
        disk_read: [disk_before, disk_after],
        read_through,
        versions: None,
        direct_io: None,
        opened_from_catalog: None,
    })
}
