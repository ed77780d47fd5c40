//! `--engine both`: builds each database, runs the rounds in processes of
//! their own (every contender, every disk state, the order alternating),
//! checks the roots agree and prints each state's rounds, medians, spread
//! and ratios.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::harness::{bar, BoxError, RunArgs};
use crate::table::table;
use crate::{engine_name, nomt_engine, nomt_settings, probe, DiskState, Engine};

/// How [`both`] runs its rounds.
pub(crate) struct Plan {
    pub(crate) rounds: usize,
    /// NOMT's plain defaults instead of its authors' benchmark's settings.
    pub(crate) plain: bool,
    /// NOMT's commit concurrencies, one database and one run a round each.
    pub(crate) concurrency: Vec<usize>,
    pub(crate) disk: Vec<DiskState>,
    pub(crate) evict_gib: u64,
}

/// One database a round runs: pagetrie's, or NOMT's at a commit concurrency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    Pagetrie,
    Nomt(usize),
}

impl Contender {
    fn name(self) -> String {
        match self {
            Contender::Pagetrie => "pagetrie".into(),
            Contender::Nomt(c) => format!("nomt c={c}"),
        }
    }

    /// The directory its run gets: pagetrie's and the first NOMT's are
    /// `dir` itself (so a directory built before is reused); each other
    /// concurrency's NOMT a copy of the first's.
    fn dir(self, dir: &Path, first: usize) -> PathBuf {
        match self {
            Contender::Nomt(c) if c != first => dir.join(format!("nomt-commit-concurrency-{c}")),
            _ => dir.to_path_buf(),
        }
    }
}

/// Builds pagetrie's and NOMT's databases, each in a process of its own
/// (NOMT's once, copied for each further commit concurrency), then runs
/// `plan.rounds` rounds: in each, for each disk state, every database runs
/// the workloads in a process of its own, the order alternating from round
/// to round. Checks the roots agree after every workload and prints, per
/// disk state, each round, the medians with their spread and the ratios
/// against the faster NOMT.
pub(crate) fn both(args: &RunArgs, plan: &Plan) -> Result<(), BoxError> {
    let temp = tempfile::Builder::new()
        .prefix("pagetrie-transfer-")
        .tempdir()?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let runs_each = plan.rounds * plan.disk.len();
    let total = runs_each * args.workloads;
    let first = plan.concurrency[0];
    let settings = nomt_settings(args, plan.plain, total, first);
    let keys = 1u64 << args.accounts_log2;
    let budgets = format!(
        "trie pages in RAM: pagetrie {} MiB cache + 3 pinned levels; nomt {} MiB cache + {} upper levels ({:.0} MiB beyond pagetrie's pinned ones){}; history: pagetrie {} commits, nomt rollback {}",
        args.page_cache_mib,
        settings.page_cache_mib,
        settings.upper_levels,
        nomt_engine::upper_levels_mib(keys, settings.upper_levels),
        if plan.plain { ", NOMT's plain defaults" } else { ", as NOMT's authors' benchmark opens it" },
        args.history,
        match settings.rollback {
            0 => "off".to_string(),
            n => format!("on ({n} commits)"),
        }
    );
    eprintln!("{budgets}");
    let contenders: Vec<Contender> = std::iter::once(Contender::Pagetrie)
        .chain(plan.concurrency.iter().map(|&c| Contender::Nomt(c)))
        .collect();
    // The builds, apart: a process's peak RSS then counts only workloads.
    let mut built = Vec::new();
    for &who in &contenders[..2] {
        eprintln!("building {}...", who.name());
        built.push(child(
            args,
            who,
            &who.dir(&dir, first),
            0,
            plan.plain,
            total,
        )?);
    }
    for &who in &contenders[2..] {
        let to = who.dir(&dir, first);
        if !to.join("nomt").exists() {
            eprintln!("copying NOMT's database for {}...", who.name());
            let (db, state) = nomt_engine::paths(&dir);
            let (to_db, to_state) = nomt_engine::paths(&to);
            copy_tree(&db, &to_db)?;
            std::fs::copy(state, to_state)?;
        }
    }
    let evict = dir.join("evict");
    if plan.disk.contains(&DiskState::Cold) {
        evict_file(&evict, plan.evict_gib)?;
    }
    // runs[state][contender]: one summary a round.
    let mut runs = vec![vec![Vec::new(); contenders.len()]; plan.disk.len()];
    for round in 0..plan.rounds {
        let mut order: Vec<usize> = (0..contenders.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for (s, &state) in plan.disk.iter().enumerate() {
            let round_args = RunArgs {
                read_through: state == DiskState::Primed || args.read_through,
                ..args.clone()
            };
            for &i in &order {
                let who = contenders[i];
                if state == DiskState::Cold {
                    let bytes = probe::read_through(&evict)?;
                    // A cold run that evicted nothing would run on whatever the disk
                    // served last, favouring one engine.
                    if bytes < plan.evict_gib << 30 {
                        return Err(format!(
                            "evicting read {bytes} bytes of {}, not {} GiB: is evict.bin a regular file?",
                            evict.display(),
                            plan.evict_gib
                        )
                        .into());
                    }
                    eprintln!("evicted: read {} GiB of an unrelated file", bytes >> 30);
                }
                eprintln!("round {} ({state:?}): {}...", round + 1, who.name());
                let at = who.dir(&dir, first);
                let summary = child(&round_args, who, &at, args.workloads, plan.plain, total)?;
                runs[s][i].push(summary);
            }
            let p = &runs[s][0][round];
            for (i, r) in runs[s].iter().enumerate().skip(1) {
                let n = &r[round];
                if p["initial_root"] != n["initial_root"] || p["roots"] != n["roots"] {
                    return Err(format!(
                        "ROOT MISMATCH in round {} ({state:?}): pagetrie and {} disagree (initial {} vs {}); a reused --dir must hold the same state for all",
                        round + 1, contenders[i].name(), p["initial_root"], n["initial_root"]
                    )
                    .into());
                }
            }
        }
    }
    let mut report = Vec::new();
    for (s, state) in plan.disk.iter().enumerate() {
        let mut medians: Vec<Value> = runs[s].iter().map(|r| median(r)).collect();
        for (m, b) in medians
            .iter_mut()
            .zip(built.iter().chain(std::iter::repeat(&built[1])))
        {
            m["import_s"] = b["import_s"].clone();
            m["import_peak_rss_bytes"] = b["import_peak_rss_bytes"].clone();
        }
        report.push((*state, medians));
    }
    if args.json {
        let states: Vec<Value> = report
            .iter()
            .zip(&runs)
            .map(|((state, medians), rounds)| {
                let names: Vec<String> = contenders.iter().map(|c| c.name()).collect();
                json!({ "disk": format!("{state:?}"), "contenders": names, "medians": medians, "rounds": rounds })
            })
            .collect();
        println!("{}", json!({ "states": states, "budgets": budgets }));
        return Ok(());
    }
    println!("{budgets}");
    for ((state, medians), rounds) in report.iter().zip(&runs) {
        print_state(args, *state, &contenders, medians, rounds);
    }
    Ok(())
}

/// One disk state's figures: each round, the medians (pagetrie against the
/// faster NOMT, by median workload) and each contender's spread.
fn print_state(
    args: &RunArgs,
    state: DiskState,
    contenders: &[Contender],
    medians: &[Value],
    rounds: &[Vec<Value>],
) {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    println!("\ndisk {state:?}: workload / commit_and_prove (ms), each round");
    for round in 0..rounds[0].len() {
        let mut line = format!("  round {:>2}:", round + 1);
        for (who, r) in contenders.iter().zip(rounds) {
            line += &format!(
                "  {} {:.0} / {:.0}",
                who.name(),
                f(&r[round], "mean_workload_ms"),
                f(&r[round], "mean_commit_and_prove_ms")
            );
        }
        println!("{line}");
    }
    let faster = (1..contenders.len())
        .min_by(|&a, &b| {
            f(&medians[a], "mean_workload_ms").total_cmp(&f(&medians[b], "mean_workload_ms"))
        })
        .unwrap_or(1);
    println!(
        "medians of {} rounds (each a process that opened its database anew), pagetrie against the faster NOMT ({}):",
        rounds[0].len(),
        contenders[faster].name()
    );
    table(
        args,
        &[("pagetrie", &medians[0]), ("nomt", &medians[faster])],
    );
    println!("  spread over the rounds (min to max):");
    for (who, r) in contenders.iter().zip(rounds) {
        let spread = |k: &str| {
            let xs: Vec<f64> = r.iter().map(|v| f(v, k)).collect();
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{lo:.0} to {hi:.0}")
        };
        println!(
            "    {:<12} workload {} ms, commit {} ms, read {} ns",
            who.name(),
            spread("mean_workload_ms"),
            spread("mean_commit_and_prove_ms"),
            spread("mean_read_ns")
        );
    }
    println!(
        "  roots: equal after all {} workloads of every round ({})",
        args.workloads,
        medians[0]["roots"]
            .as_array()
            .and_then(|r| r.last())
            .and_then(Value::as_str)
            .unwrap_or("none")
    );
}

/// Copies the directory tree `from` to `to`.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Writes `dir/evict.bin`, `gib` GiB of bytes no engine reads, unless it
/// is there at that size: reading it through before a cold run pushes the
/// engines' blocks out of whatever the virtual disk keeps of what it
/// served lately.
fn evict_file(dir: &Path, gib: u64) -> std::io::Result<()> {
    use std::io::Write;
    let path = dir.join("evict.bin");
    let len = gib << 30;
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == len) {
        return Ok(());
    }
    eprintln!("writing {gib} GiB to evict with...");
    std::fs::create_dir_all(dir)?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path)?);
    // Not zeros, which a host might store as holes.
    let mut chunk = vec![0u8; 1 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..(len >> 20) {
        for word in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word.copy_from_slice(&x.to_le_bytes());
        }
        file.write_all(&chunk)?;
    }
    file.into_inner().map_err(|e| e.into_error())?.sync_all()
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

/// Runs this program for `who` on its directory `dir` with `workloads`
/// workloads and `--json`; returns its summary.
fn child(
    args: &RunArgs,
    who: Contender,
    dir: &Path,
    workloads: usize,
    plain: bool,
    total: usize,
) -> Result<Value, BoxError> {
    let (engine, concurrency) = match who {
        Contender::Pagetrie => (Engine::Pagetrie, 1),
        Contender::Nomt(c) => (Engine::Nomt, c),
    };
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["--engine", engine_name(engine), "--json"])
        .args(["--accounts-log2", &args.accounts_log2.to_string()])
        .args(["--workloads", &workloads.to_string()])
        .args(["--transfers", &args.transfers.to_string()])
        .args(["--fresh", &args.fresh.to_string()])
        .args(["--workers", &args.workers.to_string()])
        .args(["--nomt-commit-concurrency", &concurrency.to_string()])
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
        .args(
            args.spare_space_percent
                .map(|p| format!("--spare-space-percent={p}")),
        )
        .args(args.clean_regions.then_some("--clean-regions"))
        .args(
            args.rewrite_gap_blocks
                .map(|b| format!("--rewrite-gap-blocks={b}")),
        )
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
        return Err(format!("the {} run failed: {status}", who.name()).into());
    }
    summary.ok_or_else(|| "no summary from the child".into())
}
