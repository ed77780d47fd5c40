//! The transfer workload side by side: pagetrie and NOMT on the same
//! accounts and transfers; after every workload the two roots must be equal,
//! since both commit to the same trie. A crate of its own so that the
//! library's build and tests never compile NOMT.
//!
//! Fair by default: NOMT is opened as its authors' benchmark opens it (three
//! upper page levels read in at open) with its page cache shrunk so both
//! hold as many trie pages in RAM (both budgets are printed;
//! `--nomt-defaults` keeps NOMT's plain defaults), its hash table sized for
//! the pages the trie will store at most half full; each database is built
//! in a process of its own, and `--rounds` rounds of workloads alternate
//! which engine goes first, each run a process that opens its database
//! once (the open measured is the process's first), with each round and the
//! medians shown. Before each run the engine's files are read through, so
//! that a virtual disk keeping what was read lately serves both engines
//! alike (`--no-prime` skips it), and the disk's lone read on them is
//! probed before the open and after the last commit, beside the run's
//! read latency.
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
#[path = "../../examples/transfer/versions.rs"]
mod versions;
#[path = "../../examples/transfer/workload.rs"]
mod workload;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use clap::{Parser, ValueEnum};
use harness::{bar, table, BoxError, Run, RunArgs};
use nomt_engine::NomtSettings;
use serde_json::{json, Value};

/// Which database runs the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Engine {
    Pagetrie,
    Nomt,
    /// Pagetrie, then NOMT, each in a child process; a table with ratios.
    Both,
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
    /// alternating (pagetrie, NOMT, NOMT, pagetrie, ...); the table shows
    /// each round and the medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// NOMT with its plain defaults (two upper page levels, none read in at
    /// open, the page cache at `--page-cache-mib`) instead of as its
    /// authors' benchmark opens it (three upper levels read in at open, and
    /// the page cache shrunk so both engines hold as many trie pages in RAM).
    #[arg(long)]
    nomt_defaults: bool,
    /// With both engines: do not pass `--read-through` to the rounds' runs,
    /// which read their engine's files through before the open. That evens
    /// out a virtual disk answering data read or written lately several
    /// times faster than the rest (here 90 against 260 us a 4 KiB read, on
    /// one engine's files and the other's at the same minute), which
    /// otherwise favours whichever engine wrote or read last.
    #[arg(long)]
    no_prime: bool,
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
        no_prime,
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
    if engine == Engine::Both {
        return both(&args, rounds.max(1), nomt_defaults, !no_prime);
    }
    if engine == Engine::Nomt {
        let (dir, _temp) = harness::database_dir(&args)?;
        let run = run_nomt(&args, &dir, nomt_defaults, total)?;
        return harness::report(&args, engine_name(engine), &run);
    }
    let (dir, _temp) = harness::database_dir(&args)?;
    let run = harness::run_pagetrie(&args, &dir)?;
    harness::report(&args, engine_name(engine), &run)
}

/// NOMT's settings for this run: as its authors' benchmark opens it, with
/// its page cache sized so it holds as many trie pages in RAM as pagetrie,
/// or (`plain`) its defaults; its hash table sized for `workloads` in all.
fn nomt_settings(args: &RunArgs, plain: bool, workloads: usize) -> NomtSettings {
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
        commit_concurrency: args.workers,
        page_cache_mib,
        leaf_cache_mib: args.value_cache_mib,
        warm_up: args.lookahead > 0,
        upper_levels,
        prepopulate,
        buckets: nomt_engine::buckets_for(keys),
    }
}

fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Nomt => "nomt",
        _ => "pagetrie",
    }
}
fn run_nomt(args: &RunArgs, dir: &Path, plain: bool, total: usize) -> Result<Run, BoxError> {
    let settings = nomt_settings(args, plain, total);
    if !args.json {
        eprintln!(
            "nomt: {} upper page levels{} ({:.0} MiB beyond pagetrie's pinned ones), page cache {} MiB, {} hash-table buckets",
            settings.upper_levels,
            if settings.prepopulate { " read in at open" } else { "" },
            nomt_engine::upper_levels_mib(1 << args.accounts_log2, settings.upper_levels),
            settings.page_cache_mib,
            settings.buckets
        );
    }
    let quiet = args.json;
    let db_dir = nomt_engine::paths(dir).0;
    let read_through = harness::read_through(args, &db_dir)?;
    let mut disk_before = probe::disk_read_latency(&db_dir, probe::READS);
    let (db, mut accounts, import, open) =
        nomt_engine::open_or_fill(dir, args.accounts_log2, &settings, |done, total| {
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
    let mut stats = harness::workloads(args, |config| match args.pipeline {
        true => pipeline.run(&db, &mut accounts, config),
        false => nomt_engine::run_workload(&db, &mut accounts, config),
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
/// Builds each engine's database in a process of its own, then runs
/// `rounds` rounds of the workloads, each engine's in a process of its own,
/// alternating which goes first; checks the roots agree after every
/// workload and prints each round, the medians and the ratios.
fn both(args: &RunArgs, rounds: usize, plain: bool, prime: bool) -> Result<(), BoxError> {
    let temp = tempfile::Builder::new()
        .prefix("pagetrie-transfer-")
        .tempdir()?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let settings = nomt_settings(args, plain, rounds * args.workloads);
    let keys = 1u64 << args.accounts_log2;
    let budgets = format!(
        "trie pages in RAM: pagetrie {} MiB cache + 3 pinned levels; nomt {} MiB cache + {} upper levels ({:.0} MiB beyond pagetrie's pinned ones){}",
        args.page_cache_mib,
        settings.page_cache_mib,
        settings.upper_levels,
        nomt_engine::upper_levels_mib(keys, settings.upper_levels),
        if plain { ", NOMT's plain defaults" } else { ", as NOMT's authors' benchmark opens it" }
    );
    eprintln!("{budgets}");
    // The builds, apart: a process's peak RSS then counts only workloads.
    let mut built = Vec::new();
    for engine in [Engine::Pagetrie, Engine::Nomt] {
        eprintln!("building {}...", engine_name(engine));
        built.push(child(
            args,
            engine,
            &dir,
            0,
            plain,
            rounds * args.workloads,
        )?);
    }
    let round_args = RunArgs {
        read_through: prime || args.read_through,
        ..args.clone()
    };
    let mut runs: [Vec<Value>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order = match round % 2 {
            0 => [Engine::Pagetrie, Engine::Nomt],
            _ => [Engine::Nomt, Engine::Pagetrie],
        };
        for engine in order {
            eprintln!("round {}: {}...", round + 1, engine_name(engine));
            let summary = child(
                &round_args,
                engine,
                &dir,
                args.workloads,
                plain,
                rounds * args.workloads,
            )?;
            runs[(engine == Engine::Nomt) as usize].push(summary);
        }
        let (p, n) = (&runs[0][round], &runs[1][round]);
        let disagree = p["initial_root"] != n["initial_root"] || p["roots"] != n["roots"];
        if disagree {
            return Err(format!(
                "ROOT MISMATCH in round {}: pagetrie and NOMT disagree (initial {} vs {}); a reused --dir must hold the same state for both",
                round + 1, p["initial_root"], n["initial_root"]
            )
            .into());
        }
    }
    let mut medians = [median(&runs[0]), median(&runs[1])];
    for (m, b) in medians.iter_mut().zip(&built) {
        m["import_s"] = b["import_s"].clone();
        m["import_peak_rss_bytes"] = b["import_peak_rss_bytes"].clone();
    }
    if args.json {
        println!(
            "{}",
            json!({ "pagetrie": medians[0], "nomt": medians[1], "rounds": { "pagetrie": runs[0], "nomt": runs[1] }, "budgets": budgets })
        );
        return Ok(());
    }
    println!("{budgets}");
    println!("  round  first     pagetrie workload / commit     nomt workload / commit     ratios");
    for (round, (p, n)) in runs[0].iter().zip(&runs[1]).enumerate() {
        let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        println!(
            "  {:>5}  {:<8}  {:>9.0} / {:>6.0} ms           {:>9.0} / {:>6.0} ms       {:.2}x / {:.2}x",
            round + 1,
            if round % 2 == 0 { "pagetrie" } else { "nomt" },
            f(p, "mean_workload_ms"),
            f(p, "mean_commit_and_prove_ms"),
            f(n, "mean_workload_ms"),
            f(n, "mean_commit_and_prove_ms"),
            f(p, "mean_workload_ms") / f(n, "mean_workload_ms").max(1e-9),
            f(p, "mean_commit_and_prove_ms") / f(n, "mean_commit_and_prove_ms").max(1e-9),
        );
    }
    println!("medians of {rounds} rounds (each a process that opened the database anew):");
    table(args, &[("pagetrie", &medians[0]), ("nomt", &medians[1])]);
    // Execution threads own disjoint accounts, so roots agree at any count.
    println!(
        "  roots: equal after all {} workloads of every round ({})",
        args.workloads,
        medians[0]["roots"]
            .as_array()
            .and_then(|r| r.last())
            .and_then(Value::as_str)
            .unwrap_or("none")
    );
    Ok(())
}

/// Each numeric field's median over `runs`; other fields from the last run.
fn median(runs: &[Value]) -> Value {
    let mut out = runs.last().cloned().unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut out {
        for (key, value) in fields.iter_mut() {
            let mut xs: Vec<f64> = runs.iter().filter_map(|r| r[key].as_f64()).collect();
            if xs.len() == runs.len() && value.is_number() {
                xs.sort_by(f64::total_cmp);
                let mid = xs.len() / 2;
                *value = match xs.len() % 2 {
                    1 => json!(xs[mid]),
                    _ => json!((xs[mid - 1] + xs[mid]) / 2.0),
                };
            }
        }
    }
    out
}

/// Runs this program with `engine`, `workloads` workloads and `--json`;
/// returns its summary.
fn child(
    args: &RunArgs,
    engine: Engine,
    dir: &Path,
    workloads: usize,
    plain: bool,
    total: usize,
) -> Result<Value, BoxError> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["--engine", engine_name(engine), "--json"])
        .args(["--accounts-log2", &args.accounts_log2.to_string()])
        .args(["--workloads", &workloads.to_string()])
        .args(["--transfers", &args.transfers.to_string()])
        .args(["--fresh", &args.fresh.to_string()])
        .args(["--workers", &args.workers.to_string()])
        .args(["--threads", &args.threads.to_string()])
        .args(["--lookahead", &args.lookahead.to_string()])
        .args(["--page-cache-mib", &args.page_cache_mib.to_string()])
        .args(["--value-cache-mib", &args.value_cache_mib.to_string()])
        .args(["--history", &args.history.to_string()])
        .args([
            "--snapshot-budget-mib",
            &args.snapshot_budget_mib.to_string(),
        ])
        .args(["--nomt-total-workloads", &total.to_string()])
        .args(args.warm_at_open.then_some("--warm-at-open"))
        .args(args.read_through.then_some("--read-through"))
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped());
    if args.cold {
        command.arg("--cold");
    }
    if plain {
        command.arg("--nomt-defaults");
    }
    if args.pipeline {
        command.arg("--pipeline");
    }
    let mut child = command.spawn()?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let mut summary = None;
    for line in BufReader::new(stdout).lines() {
        let value: Value = serde_json::from_str(&line?)?;
        if let Some(i) = value["workload"].as_u64() {
            eprint!(
                "\r{}",
                bar(
                    (i + 1) as f64 / workloads.max(1) as f64,
                    &format!(
                        "workload {}/{}: {:.0} ms",
                        i + 1,
                        workloads,
                        value["workload_ms"].as_f64().unwrap_or(0.0)
                    )
                )
            );
        } else if !value["summary"].is_null() {
            summary = Some(value["summary"].clone());
        }
    }
    eprintln!();
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the {} run failed: {status}", engine_name(engine)).into());
    }
    summary.ok_or_else(|| "no summary from the child".into())
}
