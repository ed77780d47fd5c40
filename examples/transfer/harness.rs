//! The transfer workload's harness, engine-neutral: its flags, the pagetrie
//! run, the workloads loop with its progress bar or JSON lines, the summary
//! and the table. The example (`examples/transfer`) runs pagetrie with it;
//! the side-by-side crate (`compare/`) includes it and adds NOMT.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pagetrie::{Db, ImportProgress, Options};
use serde_json::{json, Value};

use crate::probe;
use crate::table::table;
use crate::versions;
use crate::workload::{self, Config, Opened, WorkloadStats};

/// Any error, sent across threads.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The workload's flags, which every engine takes.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Accounts in the database: 2^N.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=40))]
    pub accounts_log2: u32,
    /// Workloads (blocks) to run.
    #[arg(long, default_value_t = 20)]
    pub workloads: usize,
    /// Transfers per workload.
    #[arg(long, default_value_t = 25_000)]
    pub transfers: usize,
    /// Percent of transfers whose receiver is a fresh account.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(0..=100))]
    pub fresh: u64,
    /// Database directory, kept and reused when it holds the same accounts
    /// [default: a temporary directory, deleted at the end].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Commit workers (NOMT: commit concurrency); pagetrie's default.
    #[arg(long, default_value_t = pagetrie::Options::default_commit_workers())]
    pub workers: usize,
    /// Execution threads sharing one session.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Transfers ahead whose keys are hinted with warm_up (NOMT: warm-up on).
    #[arg(long, default_value_t = 0)]
    pub lookahead: usize,
    /// Trie page cache in MiB (NOMT: page cache).
    #[arg(long, default_value_t = 1024)]
    pub page_cache_mib: usize,
    /// Value cache in MiB (NOMT: leaf cache).
    #[arg(long, default_value_t = 256)]
    pub value_cache_mib: usize,
    /// Drop the OS page cache before each workload (needs root).
    #[arg(long)]
    pub cold: bool,
    /// Execute each workload on the writes of the one before while that
    /// one's trie update and commit run on another thread (pagetrie's
    /// pending sessions; side by side, NOMT executes on the overlay of the
    /// one before and commits that one after, as its API allows: an overlay
    /// needs its root, and NOMT holds commits back while a session is live).
    #[arg(long)]
    pub pipeline: bool,
    /// One JSON object per workload, then a summary, instead of the table.
    #[arg(long)]
    pub json: bool,
    /// pagetrie: commits kept readable, provable and restorable
    /// (`Options::history`).
    #[arg(long, default_value_t = 64)]
    pub history: usize,
    /// pagetrie: after the workloads, time `read_at` and `prove_at` 1 and up
    /// to 60 commits back and rollbacks of 1 and 10 commits (which leave the
    /// database 11 commits back), and report the history's size.
    #[arg(long)]
    pub versions: bool,
    /// pagetrie: hold a session begun before the first workload across all
    /// of them (an RPC's snapshot), and report the RAM kept for it and
    /// whether it still reads at the end.
    #[arg(long)]
    pub hold_snapshot: bool,
    /// pagetrie: RAM old values kept for snapshots may take
    /// (`Options::snapshot_budget_mib`).
    #[arg(long, default_value_t = 512)]
    pub snapshot_budget_mib: usize,
    /// pagetrie: share of the pages and buckets files kept free for long
    /// runs (`Options::spare_space_percent`; its default if not given).
    #[arg(long)]
    pub spare_space_percent: Option<u8>,
    /// pagetrie: move blocks out of sparse regions so that commits write
    /// whole regions (`Options::clean_regions`).
    #[arg(long)]
    pub clean_regions: bool,
    /// pagetrie: longest gap of cached pages a commit writes again to join
    /// two runs (`Options::rewrite_gap_blocks`; its default if not given).
    #[arg(long)]
    pub rewrite_gap_blocks: Option<u32>,
    /// pagetrie: fill the page cache before open returns
    /// (`Options::warm_at_open`), as NOMT's authors prepopulate its upper
    /// levels at open; otherwise a thread fills it beside the first workloads.
    #[arg(long)]
    pub warm_at_open: bool,
    /// Read the database's files through before opening it. A virtual disk
    /// that keeps what was read or written lately (this machine's) then
    /// serves them as fast as whatever ran before had its own
    /// (`pagetrie-compare` does it for both engines in its primed runs, `--disk`).
    #[arg(long)]
    pub read_through: bool,
}

impl RunArgs {
    pub fn config(&self) -> Config {
        Config {
            transfers: self.transfers,
            fresh_percent: self.fresh,
            threads: self.threads.max(1),
            lookahead: self.lookahead,
        }
    }
}

/// What one engine's run measured.
pub struct Run {
    pub stats: Vec<WorkloadStats>,
    pub initial_root: [u8; 32],
    /// Import (or NOMT's fill by commits), if the database was built now.
    pub import: Option<Duration>,
    pub import_peak_rss: Option<u64>,
    pub open: Duration,
    pub db_bytes: u64,
    /// Peak RSS over the workloads.
    pub peak_rss: u64,
    /// The disk's read latency on the database's files before the open
    /// (after a build) and after the last commit ([`probe`]).
    pub disk_read: [Option<probe::Latency>; 2],
    /// Bytes `--read-through` read before the open, and how long it took.
    pub read_through: Option<(u64, Duration)>,
    /// pagetrie only.
    pub direct_io: Option<bool>,
    /// pagetrie only: whether open read the catalog instead of every block.
    pub opened_from_catalog: Option<bool>,
    /// pagetrie with `--versions` only.
    pub versions: Option<Value>,
}

/// The database directory: `--dir`, else a temporary one (deleted when the
/// returned guard drops).
pub fn database_dir(args: &RunArgs) -> Result<(PathBuf, Option<tempfile::TempDir>), BoxError> {
    match &args.dir {
        Some(dir) => Ok((dir.clone(), None)),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("pagetrie-transfer-")
                .tempdir()?;
            Ok((temp.path().to_path_buf(), Some(temp)))
        }
    }
}

/// Prints one engine's run: a JSON summary line, or the table.
pub fn report(args: &RunArgs, engine: &str, run: &Run) -> Result<(), BoxError> {
    let summary = summary(args, run);
    if args.json {
        println!("{}", json!({ "summary": summary }));
    } else {
        table(args, &[(engine, &summary)]);
    }
    std::io::stdout().flush()?;
    Ok(())
}

pub fn run_pagetrie(args: &RunArgs, dir: &Path) -> Result<Run, BoxError> {
    let options = |path: &Path| {
        let options = Options::new(path);
        let options = match args.spare_space_percent {
            Some(percent) => options.spare_space_percent(percent),
            None => options,
        };
        let options = match args.rewrite_gap_blocks {
            Some(blocks) => options.rewrite_gap_blocks(blocks),
            None => options,
        };
        options
            .clean_regions(args.clean_regions)
            .page_cache_mib(args.page_cache_mib)
            .value_cache_mib(args.value_cache_mib)
            .commit_workers(args.workers)
            .history(args.history)
            .snapshot_budget_mib(args.snapshot_budget_mib)
            .warm_at_open(args.warm_at_open)
    };
    let quiet = args.json;
    let db_dir = dir.join("db");
    let read_through = read_through(args, &db_dir)?;
    // Before the open: the warmer then reads beside the first workloads.
    let mut disk_before = probe::disk_read_latency(&db_dir, probe::READS);
    let (db, mut accounts, opened) =
        workload::open_or_import(dir, args.accounts_log2, options, |p| {
            if quiet {
                return;
            }
            let line = match p {
                ImportProgress::Reading { entries } => format!("reading {entries} accounts"),
                ImportProgress::Writing { entries, total } => bar(
                    entries as f64 / total.max(1) as f64,
                    &format!("writing {entries}/{total}"),
                ),
                _ => String::new(),
            };
            eprint!("\rimport: {line}   ");
        })?;
    let (db, import, open) = match opened {
        Opened::Reused(open) => (db, None, open),
        // A database just built is measured as a node finds it after a
        // restart: opened anew.
        Opened::Imported(took) => {
            drop(db);
            disk_before = probe::disk_read_latency(&db_dir, probe::READS);
            let start = Instant::now();
            let db = Db::open(options(&db_dir))?;
            (db, Some(took), start.elapsed())
        }
    };
    // The import's peak RSS is reported apart from the workloads'.
    let import_peak_rss = import.map(|_| workload::peak_rss_bytes());
    announce(args, import, dir);
    let initial_root = db.root()?;
    let direct_io = Some(db.metrics().direct_io);
    let opened_from_catalog = Some(db.metrics().opened_from_catalog);
    let mut pipeline = workload::Pipeline::default();
    let held = args.hold_snapshot.then(|| db.begin_session());
    let mut most_kept = 0;
    let stats = workloads(args, |config| {
        let stats = match (config, args.pipeline) {
            (Some(config), true) => pipeline.run(&db, &mut accounts, config)?,
            (Some(config), false) => Some(workload::run_workload(&db, &mut accounts, config)?),
            // The last commit belongs to the last workload's time.
            (None, _) => {
                let start = Instant::now();
                let mut last = pipeline.wait()?;
                if let Some(last) = &mut last {
                    last.total += start.elapsed();
                }
                last
            }
        };
        most_kept = most_kept.max(db.metrics().retained_version_bytes);
        Ok(stats)
    })?;
    if let Some(held) = held {
        let read = match held.read(&[0; 32]) {
            Ok(_) => "still reads".to_string(),
            Err(e) => format!("fails: {e}"),
        };
        eprintln!(
            "held snapshot: at most {:.1} MiB kept for snapshots after a workload (budget {} MiB); its read {read}",
            most_kept as f64 / (1 << 20) as f64,
            args.snapshot_budget_mib,
        );
    }
    let disk_after = probe::disk_read_latency(&db_dir, probe::READS);
    let db_bytes = workload::dir_bytes(&db_dir);
    // The workloads', before --versions rebuilds old tries.
    let peak_rss = workload::peak_rss_bytes();
    let versions = match args.versions {
        true => Some(versions::measure(&db, &db_dir, &accounts, quiet)?),
        false => None,
    };
    Ok(Run {
        stats,
        initial_root,
        import,
        import_peak_rss,
        open,
        db_bytes,
        peak_rss,
        disk_read: [disk_before, disk_after],
        read_through,
        direct_io,
        opened_from_catalog,
        versions,
    })
}

/// With `--read-through`, reads the files under `db_dir` through (none
/// yet before a build) and says how many bytes that took how long.
pub fn read_through(args: &RunArgs, db_dir: &Path) -> std::io::Result<Option<(u64, Duration)>> {
    if !args.read_through {
        return Ok(None);
    }
    let start = Instant::now();
    let bytes = probe::read_through(db_dir)?;
    Ok(Some((bytes, start.elapsed())))
}

pub fn announce(args: &RunArgs, import: Option<Duration>, dir: &Path) {
    if args.json {
        return;
    }
    match import {
        Some(t) => eprintln!(
            "\rbuilt: 2^{} accounts in {:.1} s{:40}",
            args.accounts_log2,
            t.as_secs_f64(),
            ""
        ),
        None => eprintln!(
            "reusing the 2^{} accounts in {}",
            args.accounts_log2,
            dir.display()
        ),
    }
}

/// Runs the workloads, printing each (JSON) or a progress bar as it is
/// done: `run` runs the next and returns the one it completed, if any (a
/// pipeline completes each a call late); called once more with `None`, it
/// completes what is left.
pub fn workloads(
    args: &RunArgs,
    mut run: impl FnMut(Option<&Config>) -> Result<Option<WorkloadStats>, BoxError>,
) -> Result<Vec<WorkloadStats>, BoxError> {
    workload::reset_peak_rss();
    let cold_ok = !args.cold || workload::drop_os_cache();
    if !cold_ok {
        eprintln!("warning: cannot drop the OS page cache (needs root); --cold has no effect");
    }
    let config = args.config();
    let mut runs = Vec::new();
    for i in 0..=args.workloads {
        if args.cold && cold_ok && i < args.workloads {
            workload::drop_os_cache();
        }
        let Some(s) = run((i < args.workloads).then_some(&config))? else {
            continue;
        };
        let i = runs.len();
        if args.json {
            println!(
                "{}",
                json!({
                    "workload": i,
                    "root": hex(&s.root),
                    "workload_ms": ms(s.total),
                    "commit_and_prove_ms": ms(s.commit_and_prove),
                    "finish_ms": s.finish.map(ms),
                    "mean_read_ns": mean_ns(s.read_time, s.reads),
                    "ssd_reads": s.ssd_reads,
                    "account_updates": s.account_updates,
                    "bytes_written": s.bytes_written,
                    "os_read_bytes": s.os_read_bytes,
                    "os_write_bytes": s.os_write_bytes,
                    "witness_bytes": s.witness_bytes,
                    "page_lookups": s.page_lookups,
                    "page_loads": s.page_loads,
                    "bucket_lookups": s.bucket_lookups,
                    "bucket_loads": s.bucket_loads,
                })
            );
            std::io::stdout().flush()?;
        } else {
            let label = format!(
                "workload {}/{}: {:.0} ms",
                i + 1,
                args.workloads,
                ms(s.total)
            );
            eprint!("\r{}", bar((i + 1) as f64 / args.workloads as f64, &label));
        }
        runs.push(s);
    }
    if !args.json {
        eprintln!();
    }
    Ok(runs)
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn mean_ns(total: Duration, n: u64) -> f64 {
    total.as_nanos() as f64 / n.max(1) as f64
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn bar(fraction: f64, label: &str) -> String {
    let filled = (fraction.clamp(0.0, 1.0) * 30.0) as usize;
    format!(
        "[{}{}] {label}",
        "#".repeat(filled),
        ".".repeat(30 - filled)
    )
}

/// The run's figures, as JSON; fields an engine does not measure are null.
pub fn summary(args: &RunArgs, run: &Run) -> Value {
    let runs = &run.stats;
    let n = runs.len().max(1) as f64;
    let mut totals: Vec<f64> = runs.iter().map(|r| ms(r.total)).collect();
    totals.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        totals
            .get(((totals.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let sum = |f: &dyn Fn(&WorkloadStats) -> u64| runs.iter().map(f).sum::<u64>();
    let mean_ms =
        |f: &dyn Fn(&WorkloadStats) -> Duration| runs.iter().map(|r| ms(f(r))).sum::<f64>() / n;
    let updates = sum(&|r| r.account_updates).max(1) as f64;
    let pagetrie = run.direct_io.is_some();
    let only_pagetrie = |v: Value| if pagetrie { v } else { Value::Null };
    let (lookups, loads) = (sum(&|r| r.page_lookups), sum(&|r| r.page_loads));
    let (bucket_lookups, bucket_loads) = (sum(&|r| r.bucket_lookups), sum(&|r| r.bucket_loads));
    let mut summary = json!({
        "engine": if pagetrie { "pagetrie" } else { "nomt" },
        "accounts_log2": args.accounts_log2,
        "workloads": runs.len(),
        "roots": runs.iter().map(|r| hex(&r.root)).collect::<Vec<_>>(),
        "initial_root": hex(&run.initial_root),
        "mean_workload_ms": totals.iter().sum::<f64>() / n,
        "p50_workload_ms": pct(0.5),
        "p99_workload_ms": pct(0.99),
        "mean_read_ns": mean_ns(runs.iter().map(|r| r.read_time).sum(), sum(&|r| r.reads)),
        "mean_commit_and_prove_ms": mean_ms(&|r| r.commit_and_prove),
        "mean_finish_ms": runs
            .iter()
            .map(|r| r.finish.map(ms))
            .sum::<Option<f64>>()
            .map(|total| total / n),
        "mean_trie_ms": only_pagetrie(json!(mean_ms(&|r| r.phases[0]))),
        "mean_plan_ms": only_pagetrie(json!(mean_ms(&|r| r.phases[1]))),
        "mean_write_ms": only_pagetrie(json!(mean_ms(&|r| r.phases[2]))),
        "reads_per_update": only_pagetrie(json!(sum(&|r| r.ssd_reads) as f64 / updates)),
        "os_read_bytes_per_workload": sum(&|r| r.os_read_bytes) as f64 / n,
        "os_write_bytes_per_workload": sum(&|r| r.os_write_bytes) as f64 / n,
        "os_write_bytes_per_update": sum(&|r| r.os_write_bytes) as f64 / updates,
        "blocks_moved_per_workload": only_pagetrie(json!(sum(&|r| r.blocks_moved) as f64 / n)),
        "blocks_rewritten_per_workload": only_pagetrie(json!(sum(&|r| r.blocks_rewritten) as f64 / n)),
        "blocks_per_write_run": only_pagetrie(json!(sum(&|r| r.blocks_written) as f64 / sum(&|r| r.write_runs).max(1) as f64)),
        "bytes_written_per_workload": only_pagetrie(json!(sum(&|r| r.bytes_written) as f64 / n)),
        "witness_bytes_per_workload": only_pagetrie(json!(sum(&|r| r.witness_bytes) as f64 / n)),
        // A page or bucket read ahead of its lookup counts as a miss of it.
        "page_cache_hit_rate": only_pagetrie(json!(1.0 - (loads as f64 / lookups.max(1) as f64).min(1.0))),
        "value_cache_hit_rate": only_pagetrie(json!(1.0 - (bucket_loads as f64 / bucket_lookups.max(1) as f64).min(1.0))),
        "db_bytes": run.db_bytes,
        "db_bytes_per_account": run.db_bytes as f64 / (1u64 << args.accounts_log2) as f64,
        "peak_rss_bytes": run.peak_rss,
        "read_through_bytes": run.read_through.map(|(b, _)| b),
        "read_through_s": run.read_through.map(|(_, t)| t.as_secs_f64()),
        "import_s": run.import.map(|d| d.as_secs_f64()),
        "import_peak_rss_bytes": run.import_peak_rss,
        "open_s": run.open.as_secs_f64(),
        "direct_io": run.direct_io,
        "opened_from_catalog": run.opened_from_catalog,
        "history": only_pagetrie(json!(args.history)),
        "versions": run.versions,
    });
    // The probes' figures; beside the fields above they pass json!'s
    // recursion limit.
    for (when, probe) in ["before", "after"].into_iter().zip(&run.disk_read) {
        let ns = |pick: fn(&probe::Latency) -> Duration| {
            json!(probe.as_ref().map(|l| pick(l).as_nanos() as f64))
        };
        summary[format!("disk_read_{when}_ns")] = ns(|l| l.median);
        summary[format!("disk_read_{when}_mean_ns")] = ns(|l| l.mean);
        summary[format!("disk_read_{when}_p90_ns")] = ns(|l| l.p90);
    }
    summary
}
