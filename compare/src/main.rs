//! The transfer workload side by side: pagetrie and NOMT, each in a child
//! process of its own (so peak RSS is each one's), on the same accounts;
//! after every workload the two roots must be equal, since both commit to
//! the same trie. A crate of its own so that the library's build and tests
//! never compile NOMT.
//!
//! ```sh
//! cargo run --release -p pagetrie-compare                      # both at 2^20, with ratios
//! cargo run --release -p pagetrie-compare -- --engine nomt     # NOMT alone
//! cargo run --release -p pagetrie-compare -- --help            # every flag and its default
//! ```

#[path = "../../examples/transfer/harness.rs"]
mod harness;
mod nomt_engine;
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
}

fn main() -> Result<(), BoxError> {
    let Args { run: args, engine } = Args::parse();
    if args.versions && engine != Engine::Pagetrie {
        return Err("--versions measures pagetrie's history (--engine pagetrie)".into());
    }
    if engine == Engine::Both {
        return both(&args);
    }
    if args.pipeline && engine == Engine::Nomt {
        return Err(
            "--pipeline is pagetrie's (NOMT runs its workloads one after the other)".into(),
        );
    }
    let (dir, _temp) = harness::database_dir(&args)?;
    let run = match engine {
        Engine::Nomt => run_nomt(&args, &dir)?,
        _ => harness::run_pagetrie(&args, &dir)?,
    };
    harness::report(&args, engine_name(engine), &run)
}

fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Nomt => "nomt",
        _ => "pagetrie",
    }
}
fn run_nomt(args: &RunArgs, dir: &Path) -> Result<Run, BoxError> {
    let settings = NomtSettings {
        commit_concurrency: args.workers,
        page_cache_mib: args.page_cache_mib,
        leaf_cache_mib: args.value_cache_mib,
        warm_up: args.lookahead > 0,
    };
    let quiet = args.json;
    let (db, mut accounts, import, open) =
        nomt_engine::open_or_fill(dir, args.accounts_log2, &settings, |done, total| {
            if !quiet {
                let line = bar(done as f64 / total as f64, &format!("{done}/{total}"));
                eprint!("\rfill by commits: {line}   ");
            }
        })?;
    let import_peak_rss = import.map(|_| workload::peak_rss_bytes());
    harness::announce(args, import, dir);
    let initial_root = nomt_engine::root(&db);
    let stats = harness::workloads(args, |config| {
        nomt_engine::run_workload(&db, &mut accounts, config)
    })?;
    Ok(Run {
        stats,
        initial_root,
        import,
        import_peak_rss,
        open,
        db_bytes: workload::dir_bytes(&nomt_engine::paths(dir).0),
        peak_rss: workload::peak_rss_bytes(),
        versions: None,
        direct_io: None,
        opened_from_catalog: None,
    })
}
/// Runs pagetrie, then NOMT, each as a child with `--json`; checks their roots
/// agree after every workload and prints both with the ratios.
fn both(args: &RunArgs) -> Result<(), BoxError> {
    let temp = tempfile::Builder::new()
        .prefix("pagetrie-transfer-")
        .tempdir()?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let mut summaries = Vec::new();
    for engine in [Engine::Pagetrie, Engine::Nomt] {
        eprintln!("running {}...", engine_name(engine));
        summaries.push(child(args, engine, &dir)?);
    }
    let (p, n) = (&summaries[0], &summaries[1]);
    let roots_checked = args.threads <= 1;
    let disagree = p["initial_root"] != n["initial_root"] || p["roots"] != n["roots"];
    if roots_checked && disagree {
        return Err(format!(
            "ROOT MISMATCH: pagetrie and NOMT disagree (initial {} vs {}); a reused --dir must hold the same state for both",
            p["initial_root"], n["initial_root"]
        )
        .into());
    }
    if args.json {
        println!("{}", json!({ "pagetrie": p, "nomt": n }));
    } else {
        table(args, &[("pagetrie", p), ("nomt", n)]);
        match roots_checked {
            true => println!(
                "  roots: equal after all {} workloads ({})",
                args.workloads,
                p["roots"].as_array().and_then(|r| r.last()).and_then(Value::as_str).unwrap_or("none")
            ),
            false => println!("  roots: not compared (execution threads race on shared accounts, so each engine's balances differ)"),
        }
    }
    Ok(())
}

/// Runs this program with `engine` and `--json`; returns its summary.
fn child(args: &RunArgs, engine: Engine, dir: &Path) -> Result<Value, BoxError> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["--engine", engine_name(engine), "--json"])
        .args(["--accounts-log2", &args.accounts_log2.to_string()])
        .args(["--workloads", &args.workloads.to_string()])
        .args(["--transfers", &args.transfers.to_string()])
        .args(["--fresh", &args.fresh.to_string()])
        .args(["--workers", &args.workers.to_string()])
        .args(["--threads", &args.threads.to_string()])
        .args(["--lookahead", &args.lookahead.to_string()])
        .args(["--page-cache-mib", &args.page_cache_mib.to_string()])
        .args(["--value-cache-mib", &args.value_cache_mib.to_string()])
        .args(["--history", &args.history.to_string()])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped());
    if args.cold {
        command.arg("--cold");
    }
    if args.pipeline && engine == Engine::Pagetrie {
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
                    (i + 1) as f64 / args.workloads as f64,
                    &format!(
                        "workload {}/{}: {:.0} ms",
                        i + 1,
                        args.workloads,
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
