//! The user's yardstick (docs/design.md section 9): blocks of account transfers, each
//! committed with a witness, on a database of `2^n` accounts built by bulk import.
//!
//! ```sh
//! cargo run --release --example transfer                       # 2^20 accounts, 20 workloads
//! cargo run --release --example transfer -- --accounts-log2 24 --dir /data/pt24 --cold
//! ```
//!
//! Flags: `--accounts-log2 N` (20), `--workloads K` (20), `--transfers T` (25000),
//! `--fresh P` (25), `--dir PATH` (a temporary directory, deleted at the end; an
//! explicit one is kept and reused when it holds the same accounts), `--workers W`
//! (commit workers; one per CPU), `--threads E` (1), `--lookahead L` (0),
//! `--page-cache-mib M` and `--value-cache-mib M` (`Options`' defaults), `--cold` (drop the OS
//! page cache before each workload; needs root), `--json` (one JSON object per
//! workload, then a summary).

mod workload;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use pagetrie::{ImportProgress, Options};
use workload::{Config, WorkloadStats};

struct Args {
    log2: u32,
    workloads: usize,
    config: Config,
    dir: Option<PathBuf>,
    workers: Option<usize>,
    page_cache_mib: Option<usize>,
    value_cache_mib: Option<usize>,
    cold: bool,
    json: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        log2: 20,
        workloads: 20,
        config: Config {
            transfers: 25_000,
            fresh_percent: 25,
            threads: 1,
            lookahead: 0,
        },
        dir: None,
        workers: None,
        page_cache_mib: None,
        value_cache_mib: None,
        cold: false,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--accounts-log2" => args.log2 = number(value()?)?.clamp(1, 40) as u32,
            "--workloads" => args.workloads = number(value()?)? as usize,
            "--transfers" => args.config.transfers = number(value()?)? as usize,
            "--fresh" => args.config.fresh_percent = number(value()?)?.min(100),
            "--dir" => args.dir = Some(PathBuf::from(value()?)),
            "--workers" => args.workers = Some(number(value()?)? as usize),
            "--threads" => args.config.threads = number(value()?)?.max(1) as usize,
            "--lookahead" => args.config.lookahead = number(value()?)? as usize,
            "--page-cache-mib" => args.page_cache_mib = Some(number(value()?)? as usize),
            "--value-cache-mib" => args.value_cache_mib = Some(number(value()?)? as usize),
            "--cold" => args.cold = true,
            "--json" => args.json = true,
            "--help" | "-h" => {
                println!("see the top of examples/transfer/main.rs for the flags");
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag {other}; try --help")),
        }
    }
    Ok(args)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    let temp;
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("pagetrie-transfer-")
                .tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let options = |path: &std::path::Path| {
        let mut o = Options::new(path);
        if let Some(mib) = args.page_cache_mib {
            o = o.page_cache_mib(mib);
        }
        if let Some(mib) = args.value_cache_mib {
            o = o.value_cache_mib(mib);
        }
        if let Some(w) = args.workers {
            o = o.commit_workers(w);
        }
        o
    };

    let quiet = args.json;
    let (db, mut accounts, import) = workload::open_or_import(&dir, args.log2, options, |p| {
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
    if !quiet {
        match import {
            Some(t) => eprintln!(
                "\rimport: 2^{} accounts in {:.1} s{:40}",
                args.log2,
                t.as_secs_f64(),
                ""
            ),
            None => eprintln!("reusing the 2^{} accounts in {}", args.log2, dir.display()),
        }
    }
    // Peak RSS is reported for the workloads; the import's is reported apart.
    let import_peak = import.map(|_| workload::peak_rss_bytes());
    workload::reset_peak_rss();
    let cold_ok = !args.cold || workload::drop_os_cache();
    if !cold_ok {
        eprintln!("warning: cannot drop the OS page cache (needs root); --cold has no effect");
    }

    let mut runs: Vec<WorkloadStats> = Vec::new();
    for i in 0..args.workloads {
        if args.cold && cold_ok {
            workload::drop_os_cache();
        }
        let stats = workload::run_workload(&db, &mut accounts, &args.config)?;
        if args.json {
            println!(
                "{{\"workload\":{i},\"workload_ms\":{:.3},\"commit_and_prove_ms\":{:.3},\"mean_read_ns\":{:.0},\"ssd_reads\":{},\"account_updates\":{},\"bytes_written\":{},\"witness_bytes\":{},\"page_lookups\":{},\"page_loads\":{}}}",
                ms(stats.total),
                ms(stats.commit_and_prove),
                mean_ns(stats.read_time, stats.reads),
                stats.ssd_reads,
                stats.account_updates,
                stats.bytes_written,
                stats.witness_bytes,
                stats.page_lookups,
                stats.page_loads
            );
        } else {
            eprint!(
                "\r{}",
                bar(
                    (i + 1) as f64 / args.workloads as f64,
                    &format!(
                        "workload {}/{}: {:.0} ms",
                        i + 1,
                        args.workloads,
                        ms(stats.total)
                    )
                )
            );
        }
        runs.push(stats);
    }
    if !quiet {
        eprintln!();
    }
    let mut s = Summary::of(&runs, workload::db_bytes(&dir), import);
    s.import_peak_rss_bytes = import_peak;
    s.direct_io = db.metrics().direct_io;
    if args.json {
        println!("{}", s.json());
    } else {
        s.table(&args);
    }
    std::io::stdout().flush()?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mean_ns(total: Duration, n: u64) -> f64 {
    total.as_nanos() as f64 / n.max(1) as f64
}

fn bar(fraction: f64, label: &str) -> String {
    let filled = (fraction.clamp(0.0, 1.0) * 30.0) as usize;
    format!(
        "[{}{}] {label}",
        "#".repeat(filled),
        ".".repeat(30 - filled)
    )
}

struct Summary {
    mean_workload_ms: f64,
    p50_workload_ms: f64,
    p99_workload_ms: f64,
    mean_read_ns: f64,
    mean_commit_and_prove_ms: f64,
    /// Trie update and witness, planning, durable write.
    mean_phase_ms: [f64; 3],
    reads_per_update: f64,
    bytes_written_per_workload: f64,
    witness_bytes_per_workload: f64,
    page_cache_hit_rate: f64,
    db_bytes: u64,
    peak_rss_bytes: u64,
    import_s: Option<f64>,
    import_peak_rss_bytes: Option<u64>,
    /// Whether the data files bypass the OS page cache: if not, "SSD reads" may
    /// be served from it.
    direct_io: bool,
}

impl Summary {
    fn of(runs: &[WorkloadStats], db_bytes: u64, import: Option<Duration>) -> Summary {
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
        let (lookups, loads) = (sum(&|r| r.page_lookups), sum(&|r| r.page_loads));
        Summary {
            mean_workload_ms: totals.iter().sum::<f64>() / n,
            p50_workload_ms: pct(0.5),
            p99_workload_ms: pct(0.99),
            mean_read_ns: mean_ns(runs.iter().map(|r| r.read_time).sum(), sum(&|r| r.reads)),
            mean_commit_and_prove_ms: runs.iter().map(|r| ms(r.commit_and_prove)).sum::<f64>() / n,
            mean_phase_ms: [0, 1, 2].map(|i| runs.iter().map(|r| ms(r.phases[i])).sum::<f64>() / n),
            reads_per_update: sum(&|r| r.ssd_reads) as f64
                / sum(&|r| r.account_updates).max(1) as f64,
            bytes_written_per_workload: sum(&|r| r.bytes_written) as f64 / n,
            witness_bytes_per_workload: sum(&|r| r.witness_bytes) as f64 / n,
            // A page the prefetcher loaded counts as a miss of its lookup.
            page_cache_hit_rate: 1.0 - (loads as f64 / lookups.max(1) as f64).min(1.0),
            db_bytes,
            peak_rss_bytes: workload::peak_rss_bytes(),
            import_s: import.map(|d| d.as_secs_f64()),
            import_peak_rss_bytes: None,
            direct_io: false,
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"summary\":true,\"mean_workload_ms\":{:.3},\"p50_workload_ms\":{:.3},\"p99_workload_ms\":{:.3},\"mean_read_ns\":{:.0},\"mean_commit_and_prove_ms\":{:.3},\"mean_trie_ms\":{:.3},\"mean_plan_ms\":{:.3},\"mean_write_ms\":{:.3},\"reads_per_update\":{:.4},\"bytes_written_per_workload\":{:.0},\"witness_bytes_per_workload\":{:.0},\"page_cache_hit_rate\":{:.4},\"db_bytes\":{},\"peak_rss_bytes\":{},\"import_s\":{},\"import_peak_rss_bytes\":{},\"direct_io\":{}}}",
            self.mean_workload_ms,
            self.p50_workload_ms,
            self.p99_workload_ms,
            self.mean_read_ns,
            self.mean_commit_and_prove_ms,
            self.mean_phase_ms[0],
            self.mean_phase_ms[1],
            self.mean_phase_ms[2],
            self.reads_per_update,
            self.bytes_written_per_workload,
            self.witness_bytes_per_workload,
            self.page_cache_hit_rate,
            self.db_bytes,
            self.peak_rss_bytes,
            self.import_s.map_or("null".to_string(), |s| format!("{s:.2}")),
            self.import_peak_rss_bytes
                .map_or("null".to_string(), |b| b.to_string()),
            self.direct_io
        )
    }

    fn table(&self, args: &Args) {
        let accounts = 1u64 << args.log2;
        let mib = |b: f64| b / (1 << 20) as f64;
        println!(
            "transfer workload: 2^{} accounts, {} workloads of {} transfers ({}% fresh), {} thread(s), lookahead {}{}",
            args.log2,
            args.workloads,
            args.config.transfers,
            args.config.fresh_percent,
            args.config.threads,
            args.config.lookahead,
            if args.cold { ", cold OS cache" } else { "" }
        );
        let rows = [
            ("mean workload", format!("{:.1} ms", self.mean_workload_ms)),
            (
                "p50 / p99 workload",
                format!(
                    "{:.1} / {:.1} ms",
                    self.p50_workload_ms, self.p99_workload_ms
                ),
            ),
            ("mean read latency", format!("{:.0} ns", self.mean_read_ns)),
            (
                "mean commit_and_prove",
                format!(
                    "{:.1} ms ({:.0}% of the workload)",
                    self.mean_commit_and_prove_ms,
                    100.0 * self.mean_commit_and_prove_ms / self.mean_workload_ms.max(1e-9)
                ),
            ),
            (
                "  trie+witness / plan / write",
                format!(
                    "{:.1} / {:.1} / {:.1} ms",
                    self.mean_phase_ms[0], self.mean_phase_ms[1], self.mean_phase_ms[2]
                ),
            ),
            (
                "SSD reads per account update",
                format!("{:.3}", self.reads_per_update),
            ),
            (
                "bytes written per workload",
                format!("{:.1} MiB", mib(self.bytes_written_per_workload)),
            ),
            (
                "witness per workload",
                format!("{:.1} MiB", mib(self.witness_bytes_per_workload)),
            ),
            (
                "page cache hit rate",
                format!("{:.1}%", 100.0 * self.page_cache_hit_rate),
            ),
            (
                "database on disk",
                format!(
                    "{:.1} MiB ({:.1} bytes per account)",
                    mib(self.db_bytes as f64),
                    self.db_bytes as f64 / accounts as f64
                ),
            ),
            (
                "peak RSS (workloads)",
                format!("{:.1} MiB", mib(self.peak_rss_bytes as f64)),
            ),
            (
                "import",
                match (self.import_s, self.import_peak_rss_bytes) {
                    (Some(s), Some(peak)) => {
                        format!("{s:.1} s (peak RSS {:.1} MiB)", mib(peak as f64))
                    }
                    _ => "reused".to_string(),
                },
            ),
            (
                "direct I/O",
                if self.direct_io {
                    "yes: SSD reads are disk reads".to_string()
                } else {
                    "no: some SSD reads may be OS cache hits".to_string()
                },
            ),
        ];
        for (name, value) in rows {
            println!("  {name:<30} {value}");
        }
    }
}
