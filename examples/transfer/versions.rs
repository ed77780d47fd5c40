//! `--versions`: after the workloads, the cost of the history window:
//! `read_at` and `prove_at` one commit back and far back, rollbacks of 1 and
//! 10 commits, and the history's disk and RAM.

use std::path::Path;
use std::time::{Duration, Instant};

use pagetrie::{Db, Error};
use serde_json::{json, Value};

use crate::workload::{account_key, Accounts};

/// Reads timed at each depth.
const READS: usize = 2000;
/// Keys per proof.
const PROVED: usize = 100;

/// Measures the history of `db` (in `db_path`), whose accounts `accounts`
/// describes; rolls back 11 commits on the way. Prints what it measured
/// unless `quiet`, and returns it.
pub fn measure(db: &Db, db_path: &Path, accounts: &Accounts, quiet: bool) -> Result<Value, Error> {
    let roots = db.roots()?;
    let far = (roots.len() - 1).min(60);
    let mut rng = accounts.next_id | 1;
    let mut key = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        account_key(rng % accounts.next_id)
    };
    let history_bytes = std::fs::metadata(db_path.join("history")).map_or(0, |m| m.len());
    let mut out = json!({
        "retained_roots": roots.len(),
        "history_file_bytes": history_bytes,
        "history_bytes_per_account": history_bytes as f64 / (1u64 << accounts.log2) as f64,
        "history_ram_bytes": db.metrics().history_bytes,
    });
    // Reads alternate between the depths, so that a busy moment of the disk
    // does not land on one alone.
    let depths: Vec<usize> = [1, far].into_iter().filter(|&d| d > 0).collect();
    let mut read_time = vec![Duration::ZERO; depths.len()];
    for _ in 0..2 {
        for (i, &depth) in depths.iter().enumerate() {
            let start = Instant::now();
            for _ in 0..READS / 2 {
                db.read_at(&roots[depth], &key())?;
            }
            read_time[i] += start.elapsed();
        }
    }
    for (i, &depth) in depths.iter().enumerate() {
        let root = roots[depth];
        let read = read_time[i] / READS as u32;
        let keys: Vec<[u8; 32]> = (0..PROVED).map(|_| key()).collect();
        let start = Instant::now();
        let proof = db.prove_at(&root, &keys)?;
        let prove = start.elapsed();
        proof.verify(&root)?;
        out[format!("read_at_{depth}_back_us")] = json!(us(read));
        out[format!("prove_at_{depth}_back_ms")] = json!(ms(prove));
        if !quiet {
            eprintln!(
                "versions: {depth} back: read_at {:.1} us (mean of {READS}), prove_at {PROVED} keys {:.1} ms",
                us(read),
                ms(prove)
            );
        }
    }
    for depth in [1, 10] {
        if depth >= db.roots()?.len() {
            continue;
        }
        let before = db.metrics();
        let start = Instant::now();
        db.rollback(depth)?;
        let took = start.elapsed();
        let after = db.metrics();
        let phase = |a: u64, b: u64| ms(Duration::from_nanos(a - b));
        let phases = [
            phase(after.commit_trie_ns, before.commit_trie_ns),
            phase(after.commit_plan_ns, before.commit_plan_ns),
            phase(after.commit_write_ns, before.commit_write_ns),
        ];
        out[format!("rollback_{depth}_ms")] = json!(ms(took));
        out[format!("rollback_{depth}_trie_plan_write_ms")] = json!(phases);
        if !quiet {
            eprintln!(
                "versions: rollback of {depth}: {:.1} ms (trie {:.0}, plan {:.0}, write {:.0} ms)",
                ms(took),
                phases[0],
                phases[1],
                phases[2]
            );
        }
    }
    if !quiet {
        eprintln!(
            "versions: {} roots retained; history file {:.1} MB ({:.2} B per account), {:.1} MB of RAM",
            roots.len(),
            history_bytes as f64 / 1e6,
            out["history_bytes_per_account"].as_f64().unwrap_or(0.0),
            db.metrics().history_bytes as f64 / 1e6
        );
    }
    Ok(out)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
