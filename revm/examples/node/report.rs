//! What the node prints: a line (or a JSON object) per block, and the means
//! over the run.

use std::time::Duration;

use pagetrie::Db;
use serde_json::json;

use crate::Args;

/// One block's figures.
pub struct BlockFigures {
    pub number: u64,
    pub txs: usize,
    pub reverted: usize,
    pub gas: u64,
    pub execute: Duration,
    pub commit: Duration,
    /// Disk reads pagetrie issued executing and committing it.
    pub disk_reads: u64,
    pub root: pagetrie::Node,
    /// The witness `commit_and_prove` returned, encoded.
    pub witness_bytes: usize,
    /// What a stateless verifier is sent: the witness's multi-proof and the
    /// values read.
    pub shipped_bytes: usize,
    /// Decoding the shipped bytes and re-executing from them.
    pub reexecute: Option<Duration>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

pub fn imported(args: &Args, took: Duration, db: &Db) -> Result<(), pagetrie::Error> {
    let root = db.root()?;
    let keys = db.metrics().keys_stored;
    if args.json {
        let line = json!({
            "accounts_log2": args.accounts_log2,
            "keys": keys,
            "import_s": took.as_secs_f64(),
            "root": hex(&root),
        });
        println!("{line}");
    } else {
        println!(
            "imported 2^{} accounts ({keys} keys) in {:.1} s, root {}",
            args.accounts_log2,
            took.as_secs_f64(),
            hex(&root[..8])
        );
        println!(
            "{:>5} {:>6} {:>5} {:>11} {:>9} {:>9} {:>7} {:>16} {:>9} {:>9} {:>9}",
            "block",
            "txs",
            "revert",
            "gas",
            "exec ms",
            "commit ms",
            "reads",
            "root",
            "wit MiB",
            "ship MiB",
            "reexec ms"
        );
    }
    Ok(())
}

pub fn block(args: &Args, f: &BlockFigures) {
    if args.json {
        let line = json!({
            "block": f.number,
            "txs": f.txs,
            "reverted": f.reverted,
            "gas": f.gas,
            "execute_ms": ms(f.execute),
            "commit_ms": ms(f.commit),
            "disk_reads": f.disk_reads,
            "root": hex(&f.root),
            "witness_bytes": f.witness_bytes,
            "shipped_bytes": f.shipped_bytes,
            "reexecute_ms": f.reexecute.map(ms),
        });
        println!("{line}");
    } else {
        let reexecute = f.reexecute.map_or("-".into(), |d| format!("{:.1}", ms(d)));
        println!(
            "{:>5} {:>6} {:>5} {:>11} {:>9.1} {:>9.1} {:>7} {:>16} {:>9.2} {:>9.2} {:>9}",
            f.number,
            f.txs,
            f.reverted,
            f.gas,
            ms(f.execute),
            ms(f.commit),
            f.disk_reads,
            hex(&f.root[..8]),
            mib(f.witness_bytes),
            mib(f.shipped_bytes),
            reexecute
        );
    }
}

pub fn summary(args: &Args, run: &[BlockFigures]) {
    let n = run.len().max(1) as f64;
    let mean = |f: &dyn Fn(&BlockFigures) -> f64| run.iter().map(f).sum::<f64>() / n;
    let txs = mean(&|b| b.txs as f64);
    let gas = mean(&|b| b.gas as f64);
    let execute = mean(&|b| ms(b.execute));
    let commit = mean(&|b| ms(b.commit));
    let reads = mean(&|b| b.disk_reads as f64);
    let witness = mean(&|b| b.witness_bytes as f64);
    let shipped = mean(&|b| b.shipped_bytes as f64);
    let reexecute = (!args.no_verify).then(|| mean(&|b| b.reexecute.map_or(0.0, ms)));
    if args.json {
        let line = json!({
            "blocks": run.len(),
            "mean_txs": txs,
            "mean_gas": gas,
            "mean_execute_ms": execute,
            "mean_commit_ms": commit,
            "mean_disk_reads": reads,
            "mean_witness_bytes": witness,
            "mean_shipped_bytes": shipped,
            "mean_reexecute_ms": reexecute,
            "final_root": run.last().map(|b| hex(&b.root)),
        });
        println!("{line}");
    } else {
        println!(
            "mean of {} blocks: {txs:.0} txs, {gas:.0} gas, execute {execute:.1} ms, commit_and_prove {commit:.1} ms, \
             {reads:.0} disk reads, witness {:.2} MiB, shipped {:.2} MiB{}",
            run.len(),
            witness / (1 << 20) as f64,
            shipped / (1 << 20) as f64,
            reexecute.map_or(String::new(), |r| format!(", stateless re-execution {r:.1} ms")),
        );
    }
}
