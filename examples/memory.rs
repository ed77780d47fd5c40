//! RAM that grows with what a caller does stays within its bounds: measured
//! as a user would, from the process's resident set.
//!
//! ```text
//! cargo run --release --example memory            # the three bounds below
//! cargo run --release --example memory -- DIR     # open DIR: peak RSS and time
//! ```
//!
//! 1. One session hints 4,000,000 distinct keys: the session remembers its
//!    hints in a filter of fixed size, and the queue drops what it cannot take.
//! 2. One session reads one key 10,000,000 times: the read log holds the key
//!    once.
//! 3. A 256 MiB value is written, read back and the copy read dropped: the
//!    blocks it passed through go back to the kernel once they sit unused
//!    for a while, so RSS returns near where it was while the node goes on
//!    committing blocks. (Overwriting or deleting it instead keeps the old
//!    value in the history, within `Options::history_budget_mib`.)

use std::time::{Duration, Instant};

use pagetrie::{Db, Options};

/// The process's resident set (VmRSS) or its peak (VmHWM), in MiB.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn rss() -> f64 {
    status_mib("VmRSS:")
}

fn key(i: u64) -> [u8; 32] {
    *blake3::hash(&i.to_le_bytes()).as_bytes()
}

/// A small block: the node going on while the last test's RAM settles.
fn small_commit(db: &Db, n: u64) -> Result<(), pagetrie::Error> {
    let session = db.begin_session();
    for i in 0..100 {
        session.write(key((1 << 40) | (n * 100 + i)), Some(vec![n as u8; 64]));
    }
    session.commit().map(drop)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = std::env::args().nth(1) {
        let started = Instant::now();
        let db = Db::open(Options::new(&dir))?;
        let took = started.elapsed();
        println!(
            "open of {dir}: {:.0} ms, peak RSS {:.0} MiB, RSS {:.0} MiB, {} commits of history",
            took.as_secs_f64() * 1e3,
            status_mib("VmHWM:"),
            rss(),
            db.roots()?.len() - 1
        );
        return Ok(());
    }

    let dir = tempfile::tempdir()?;
    let db = Db::open(Options::new(dir.path()))?;
    let session = db.begin_session();
    session.write(key(0), Some(vec![7; 100]));
    session.commit()?;
    let mut n = 0;

    let before = rss();
    let session = db.begin_session();
    for i in 0..4_000_000 {
        session.warm_up(&key(i));
    }
    let grown = rss() - before;
    drop(session);
    println!(
        "1. a session that hinted 4,000,000 distinct keys: RSS grew {grown:.1} MiB (bound: 64)"
    );

    let before = rss();
    let session = db.begin_session();
    for _ in 0..10_000_000 {
        session.read(&key(0))?;
    }
    let grown = rss() - before;
    session.commit()?;
    println!(
        "2. a session that read one key 10,000,000 times: RSS grew {grown:.1} MiB (bound: 64)"
    );

    let before = rss();
    let value = vec![0x5a; 256 << 20];
    let session = db.begin_session();
    session.write(key(1), Some(value));
    session.commit()?;
    let back = db.read(&key(1))?.map_or(0, |v| v.len());
    let dropped = rss();
    // The node goes on: a small block a second for 25 s, two idle periods
    // of the block pool.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(25) {
        std::thread::sleep(Duration::from_secs(1));
        n += 1;
        small_commit(&db, n)?;
    }
    let after = rss();
    println!(
        "3. a 256 MiB value written, read back ({back} bytes) and dropped: RSS {before:.0} MiB before, \
         {dropped:.0} when the value read is dropped, {after:.0} after 25 s of blocks \
         ({:+.1} MiB; bound: 64)",
        after - before
    );
    Ok(())
}
