//! The transfer workload of docs/design.md section 9, shared by `examples/transfer`
//! and `benches/transfer.rs`.
//!
//! Accounts `0..2^n` have key `blake3(id as u64 big-endian)` and an 8-byte
//! big-endian balance, initially 1000. A workload is one block of transfers: each
//! reads a sender (uniform among existing accounts) and a receiver (a fresh id for
//! `fresh_percent` of transfers, else uniform among existing accounts), writes
//! sender - 1 and receiver + 1, and the block ends with `commit_and_prove`.

#![allow(dead_code)] // The bench uses part of it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pagetrie::{Db, Error, ImportProgress, Metrics, Options, Pending, Session};

/// The key of account `id`.
pub fn account_key(id: u64) -> [u8; 32] {
    *blake3::hash(&id.to_be_bytes()).as_bytes()
}

/// The shape of each workload.
#[derive(Clone, Debug)]
pub struct Config {
    pub transfers: usize,
    pub fresh_percent: u64,
    /// Execution threads sharing the session.
    pub threads: usize,
    /// `warm_up` hints are issued this many transfers ahead.
    pub lookahead: usize,
}

/// The database directory's layout: `dir/db` and `dir/state`, which records the
/// account count and the next fresh id so a reused database never gets an id twice.
pub struct Accounts {
    state_path: PathBuf,
    pub log2: u32,
    /// Ids below this exist.
    pub next_id: u64,
    rng: u64,
}

impl Accounts {
    /// The state of a database just filled with `2^log2` accounts.
    pub fn fresh(state_path: PathBuf, log2: u32) -> Accounts {
        Accounts {
            state_path,
            log2,
            next_id: 1 << log2,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// Durably, so that after a crash no id committed before is handed out again.
    pub fn save(&self) -> std::io::Result<()> {
        let text = format!("accounts_log2 {}\nnext_id {}\n", self.log2, self.next_id);
        let tmp = self.state_path.with_extension("tmp");
        let mut file = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut file, text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, &self.state_path)?;
        if let Some(dir) = self.state_path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// The state of the database whose state file is `state_path`, if it
    /// holds `2^log2` accounts.
    pub fn load(state_path: &Path, log2: u32) -> Option<Accounts> {
        let text = std::fs::read_to_string(state_path).ok()?;
        let mut fields = text.lines().map(|l| l.split_once(' '));
        let stored_log2: u32 = fields.next()??.1.parse().ok()?;
        let next_id: u64 = fields.next()??.1.parse().ok()?;
        (stored_log2 == log2).then(|| Accounts {
            state_path: state_path.to_path_buf(),
            log2,
            next_id,
            rng: next_id | 1,
        })
    }

    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}

/// How [`open_or_import`] came by its database.
#[derive(Clone, Copy, Debug)]
pub enum Opened {
    /// Built anew by an import that took this long.
    Imported(Duration),
    /// Found in place and opened in this long.
    Reused(Duration),
}

/// Opens the accounts database in `dir`, importing `2^log2` accounts first
/// unless `dir` already holds exactly that.
pub fn open_or_import(
    dir: &Path,
    log2: u32,
    options: impl Fn(&Path) -> Options,
    mut progress: impl FnMut(ImportProgress),
) -> Result<(Db, Accounts, Opened), Error> {
    let db_path = dir.join("db");
    let state_path = dir.join("state");
    if let Some(accounts) = Accounts::load(&state_path, log2) {
        if db_path.exists() {
            let start = Instant::now();
            let db = Db::open(options(&db_path))?;
            return Ok((db, accounts, Opened::Reused(start.elapsed())));
        }
    }
    clear(dir, &db_path, &state_path)?;
    let start = Instant::now();
    let balance = 1000u64.to_be_bytes();
    let entries = (0..1u64 << log2).map(|id| (account_key(id), balance.to_vec()));
    let db = Db::import(options(&db_path), entries, &mut progress)?;
    let took = start.elapsed();
    let accounts = Accounts::fresh(state_path, log2);
    accounts.save()?;
    Ok((db, accounts, Opened::Imported(took)))
}

/// Removes a database and its state file before a new one is built in `dir`;
/// the state first, so a stale one never describes the next database.
pub fn clear(dir: &Path, db_path: &Path, state_path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(state_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    match std::fs::remove_dir_all(db_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::create_dir_all(dir)
}

/// What one workload did.
#[derive(Clone, Debug, Default)]
pub struct WorkloadStats {
    /// Begin session to durable commit.
    pub total: Duration,
    pub commit_and_prove: Duration,
    /// The part of `commit_and_prove` before durability: root and witness;
    /// `None` where the engine computes them in the same call that makes
    /// the commit durable (pagetrie's `commit_and_prove`, which overlaps the
    /// writes with the trie update).
    pub finish: Option<Duration>,
    /// Sum and count of `Session::read` latencies.
    pub read_time: Duration,
    pub reads: u64,
    pub account_updates: u64,
    pub witness_bytes: u64,
    /// Metrics deltas over the workload.
    pub ssd_reads: u64,
    pub bytes_written: u64,
    /// Pages and buckets the cleaner moved.
    pub blocks_moved: u64,
    /// Pages written again where they lie, joining runs.
    pub blocks_rewritten: u64,
    /// Blocks written and the runs of consecutive blocks they formed.
    pub blocks_written: u64,
    pub write_runs: u64,
    /// Page lookups, and pages read from disk (by lookups or the prefetcher).
    pub page_lookups: u64,
    pub page_loads: u64,
    /// Bucket reads, and buckets read from disk (by reads or ahead of them).
    pub bucket_lookups: u64,
    pub bucket_loads: u64,
    /// The commit's phases: trie update and witness, planning, durable write.
    pub phases: [Duration; 3],
    /// Bytes the process read from and wrote to storage (/proc/self/io), for
    /// comparing engines by one measure.
    pub os_read_bytes: u64,
    pub os_write_bytes: u64,
    /// The root after the workload.
    pub root: [u8; 32],
}

/// The next workload's transfers `(sender, receiver)`, recorded durably so no
/// fresh id is handed out twice, even after a crash.
///
/// With several execution threads, both accounts of a transfer are of one
/// class (id modulo the thread count), and [`on_threads`] gives each class
/// to one thread: no two threads touch one account, so the final state is
/// the same whatever the interleaving, and two engines' roots can be
/// compared. With one thread the plan is as it always was.
pub fn plan_transfers(
    accounts: &mut Accounts,
    config: &Config,
) -> std::io::Result<Vec<(u64, u64)>> {
    let existing = accounts.next_id;
    let classes = config.threads.max(1) as u64;
    // `id` moved into `class`, staying below `existing`.
    let into_class = |id: u64, class: u64| {
        let moved = id - id % classes + class;
        if moved < existing {
            moved
        } else {
            moved.saturating_sub(classes)
        }
    };
    let transfers = (0..config.transfers)
        .map(|_| {
            let sender = accounts.next_random() % existing;
            if accounts.next_random() % 100 < config.fresh_percent {
                accounts.next_id += 1;
                let receiver = accounts.next_id - 1;
                (into_class(sender, receiver % classes), receiver)
            } else {
                let receiver = accounts.next_random() % existing;
                (sender, into_class(receiver, sender % classes))
            }
        })
        .collect();
    accounts.save()?;
    Ok(transfers)
}

/// Storage bytes read and written by this process so far (Linux; zeros
/// elsewhere).
pub fn os_io_bytes() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("read_bytes:"), field("write_bytes:"))
}

/// Runs `execute` on `threads` threads, each over the transfers of one
/// class of senders (id modulo `threads`, in plan order; see
/// [`plan_transfers`]); returns the summed read time and read count.
pub fn on_threads<E: Send>(
    transfers: &[(u64, u64)],
    threads: usize,
    execute: impl Fn(&[(u64, u64)]) -> Result<(Duration, u64), E> + Sync,
) -> Result<(Duration, u64), E> {
    let classes = threads.max(1);
    let mut slices: Vec<Vec<(u64, u64)>> = vec![Vec::new(); classes];
    for &(from, to) in transfers {
        slices[(from % classes as u64) as usize].push((from, to));
    }
    let results: Vec<Result<(Duration, u64), E>> = std::thread::scope(|s| {
        let handles: Vec<_> = slices
            .iter()
            .map(|slice| {
                let execute = &execute;
                s.spawn(move || execute(slice))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an execution thread panicked"))
            .collect()
    });
    let (mut time, mut reads) = (Duration::ZERO, 0);
    for result in results {
        let (t, r) = result?;
        time += t;
        reads += r;
    }
    Ok((time, reads))
}

/// One thread's transfers against `read`, `write` and `warm_up`; returns the
/// time spent in reads and their number.
pub fn execute_transfers<E>(
    transfers: &[(u64, u64)],
    lookahead: usize,
    warm_up: impl Fn(&[u8; 32]),
    mut read: impl FnMut(&[u8; 32]) -> Result<Option<Vec<u8>>, E>,
    mut write: impl FnMut([u8; 32], Vec<u8>),
) -> Result<(Duration, u64), E> {
    let warm = |i: usize| {
        if let Some(&(from, to)) = transfers.get(i) {
            warm_up(&account_key(from));
            warm_up(&account_key(to));
        }
    };
    (0..lookahead).for_each(warm);
    let (mut read_time, mut reads) = (Duration::ZERO, 0);
    let mut balance = |key: &[u8; 32]| -> Result<u64, E> {
        let start = Instant::now();
        let value = read(key)?;
        read_time += start.elapsed();
        reads += 1;
        Ok(value
            .and_then(|v| v.try_into().ok())
            .map_or(0, u64::from_be_bytes))
    };
    for (i, &(from, to)) in transfers.iter().enumerate() {
        if lookahead > 0 {
            warm(i + lookahead);
        }
        let (from, to) = (account_key(from), account_key(to));
        let sender = balance(&from)?;
        let receiver = balance(&to)?;
        write(from, sender.wrapping_sub(1).to_be_bytes().to_vec());
        write(to, receiver.wrapping_add(1).to_be_bytes().to_vec());
    }
    Ok((read_time, reads))
}

fn delta(before: &Metrics, after: &Metrics, stats: &mut WorkloadStats) {
    stats.ssd_reads = after.reads_issued - before.reads_issued;
    stats.bytes_written = after.bytes_written - before.bytes_written;
    stats.blocks_moved = after.blocks_moved - before.blocks_moved;
    stats.blocks_rewritten = after.blocks_rewritten - before.blocks_rewritten;
    stats.blocks_written = after.writes_issued - before.writes_issued;
    stats.write_runs = after.write_runs - before.write_runs;
    let misses = after.page_cache_misses - before.page_cache_misses;
    stats.page_lookups = after.page_cache_hits - before.page_cache_hits + misses;
    stats.page_loads = misses + (after.pages_prefetched - before.pages_prefetched);
    let misses = after.value_cache_misses - before.value_cache_misses;
    stats.bucket_lookups = after.value_cache_hits - before.value_cache_hits + misses;
    stats.bucket_loads = misses + (after.buckets_prefetched - before.buckets_prefetched);
    stats.phases = [
        after.commit_trie_ns - before.commit_trie_ns,
        after.commit_plan_ns - before.commit_plan_ns,
        after.commit_write_ns - before.commit_write_ns,
    ]
    .map(Duration::from_nanos);
}

/// Runs one workload.
pub fn run_workload(
    db: &Db,
    accounts: &mut Accounts,
    config: &Config,
) -> Result<WorkloadStats, Error> {
    let (mut stats, session, before, os_before) = execute(db, None, accounts, config)?;
    let commit_start = Instant::now();
    let output = session.commit_and_prove()?;
    stats.commit_and_prove = commit_start.elapsed();
    stats.total += stats.commit_and_prove;
    stats.witness_bytes = output.witness.encoded_len() as u64;
    stats.account_updates = output.witness.writes.len() as u64;
    stats.root = output.root;
    account(db, &before, os_before, &mut stats);
    Ok(stats)
}

/// Plans a workload's transfers and executes them in a session on `parent`
/// (the database if `None`); returns the session with its figures so far,
/// and the metrics and OS counters from before it.
fn execute(
    db: &Db,
    parent: Option<&Pending>,
    accounts: &mut Accounts,
    config: &Config,
) -> Result<(WorkloadStats, Session, Metrics, (u64, u64)), Error> {
    let transfers = plan_transfers(accounts, config)?;
    let before = db.metrics();
    let os_before = os_io_bytes();
    let start = Instant::now();
    let session = match parent {
        Some(parent) => db.begin_session_on_pending(parent)?,
        None => db.begin_session(),
    };
    let (read_time, reads) = on_threads(&transfers, config.threads, |slice| {
        execute_transfers(
            slice,
            config.lookahead,
            |k| session.warm_up(k),
            |k| session.read(k),
            |k, v| session.write(k, Some(v)),
        )
    })?;
    let stats = WorkloadStats {
        read_time,
        reads,
        total: start.elapsed(),
        ..WorkloadStats::default()
    };
    Ok((stats, session, before, os_before))
}

/// Adds the disk and cache figures since `before` and `os_before` to `stats`.
fn account(db: &Db, before: &Metrics, os_before: (u64, u64), stats: &mut WorkloadStats) {
    let os_after = os_io_bytes();
    stats.os_read_bytes = os_after.0 - os_before.0;
    stats.os_write_bytes = os_after.1 - os_before.1;
    delta(before, &db.metrics(), stats);
}

/// Workloads as a pipeline: each executes on the writes of the one before
/// ([`pagetrie::Pending`]) while that one's trie update and commit run on
/// another thread.
#[derive(Default)]
pub struct Pipeline {
    parent: Option<Pending>,
    /// The workload in flight: its figures so far, and its update and commit.
    in_flight: Option<(
        WorkloadStats,
        std::thread::JoinHandle<Result<Committed, Error>>,
    )>,
}

/// What a pipelined workload's update and commit gave.
struct Committed {
    took: Duration,
    root: [u8; 32],
    witness_bytes: u64,
    account_updates: u64,
}

impl Pipeline {
    /// Runs one workload: executes it on the previous one's writes, waits
    /// for the previous update and commit, and starts its own. Returns the
    /// previous workload, now committed. A workload's `total` is the time
    /// of the call that executed it (execution and that wait); its
    /// `commit_and_prove` is its own update and commit, beside the next
    /// workload's execution.
    pub fn run(
        &mut self,
        db: &Db,
        accounts: &mut Accounts,
        config: &Config,
    ) -> Result<Option<WorkloadStats>, Error> {
        let start = Instant::now();
        let (mut stats, session, before, os_before) =
            execute(db, self.parent.as_ref(), accounts, config)?;
        let pending = session.into_pending()?;
        let previous = self.wait()?;
        let committing = pending.clone();
        let handle = std::thread::spawn(move || {
            let started = Instant::now();
            let overlay = committing.commit()?;
            Ok(Committed {
                took: started.elapsed(),
                root: overlay.root(),
                witness_bytes: overlay.witness().encoded_len() as u64,
                account_updates: overlay.witness().writes.len() as u64,
            })
        });
        self.parent = Some(pending);
        stats.total = start.elapsed();
        account(db, &before, os_before, &mut stats);
        self.in_flight = Some((stats, handle));
        Ok(previous)
    }

    /// Waits for the workload in flight, if any, and returns it committed.
    pub fn wait(&mut self) -> Result<Option<WorkloadStats>, Error> {
        let Some((mut stats, handle)) = self.in_flight.take() else {
            return Ok(None);
        };
        let c = handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        stats.commit_and_prove = c.took;
        stats.root = c.root;
        stats.witness_bytes = c.witness_bytes;
        stats.account_updates = c.account_updates;
        Ok(Some(stats))
    }
}

/// Drops the OS page cache; false if not permitted.
pub fn drop_os_cache() -> bool {
    std::process::Command::new("sync")
        .status()
        .is_ok_and(|s| s.success())
        && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// Bytes the files under `path` take (allocated blocks, so preallocated
/// space counts and holes do not).
pub fn dir_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.blocks() * 512,
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Restarts the peak resident set count, so that the workloads' peak is not the
/// import's (Linux; false where unavailable).
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The process's peak resident set, from /proc (0 where unavailable).
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}
