//! The same workload on NOMT (`--engine nomt`), the system pagetrie is
//! measured against: same accounts, same transfers, witness on. NOMT has no
//! bulk import, so its accounts go in by commits of 2^20 at a time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nomt::hasher::Blake3Hasher;
use nomt::{KeyReadWrite, Nomt, SessionParams, WitnessMode};
use parking_lot::Mutex;

/// Any error, NOMT's included.
use crate::harness::BoxError;
use crate::workload::{
    account_key, execute_transfers, on_threads, os_io_bytes, plan_transfers, Accounts, Config,
    WorkloadStats,
};

/// NOMT's settings, mapped from pagetrie's where they have a counterpart.
pub struct NomtSettings {
    pub commit_concurrency: usize,
    /// The page cache below the upper levels.
    pub page_cache_mib: usize,
    pub leaf_cache_mib: usize,
    /// Page warm-up while sessions run: on when the workload sends hints.
    pub warm_up: bool,
    /// Page levels below the root kept in RAM for good.
    pub upper_levels: usize,
    /// Whether open reads the upper levels in.
    pub prepopulate: bool,
    /// Hash-table buckets, used when the database is created.
    pub buckets: u32,
    /// Commits NOMT can roll back (its rollback log); 0 turns it off.
    pub rollback: u32,
}

/// Pages the authors' benchmark keeps in RAM for good: three levels below
/// the root, read in at open.
pub const AUTHORS_UPPER_LEVELS: usize = 3;

/// Levels below the root that pagetrie pins (its root page, the 64 below it
/// and their 4096): NOMT's default of two upper levels holds the same.
const PAGETRIE_PINNED_BELOW_ROOT: usize = 2;

/// Keys below which a page's subtree is elided, in both engines.
const PAGE_THRESHOLD: u64 = 20;

/// Pages stored at page depth `depth` (64^depth pages there) of a trie of
/// `keys` keys spread uniformly: those whose subtree holds at least
/// [`PAGE_THRESHOLD`] keys (a Poisson tail), and all at depths 0 and 1,
/// which are never elided.
fn stored_at(keys: f64, depth: i32) -> f64 {
    let pages = 64f64.powi(depth);
    if depth <= 1 {
        return pages;
    }
    let lambda = keys / pages;
    let (mut term, mut below) = ((-lambda).exp(), 0.0);
    for k in 0..PAGE_THRESHOLD {
        below += term;
        term *= lambda / (k + 1) as f64;
    }
    pages * (1.0 - below).max(0.0)
}

/// Pages a trie of `keys` keys stores, at every depth.
pub fn stored_pages(keys: u64) -> u64 {
    let keys = keys as f64;
    (0..=42).map(|depth| stored_at(keys, depth)).sum::<f64>() as u64
}

/// Hash-table buckets for a trie that grows to `keys` keys: NOMT's table is
/// sized at creation and grows only offline, and its authors warn that it slows
/// past 0.9 full; sized for at most half full.
pub fn buckets_for(keys: u64) -> u32 {
    (2 * stored_pages(keys) + 1000).min(u32::MAX as u64) as u32
}

/// NOMT's page cache (MiB) that holds, with its `upper_levels` kept in RAM,
/// as many trie pages as pagetrie's `page_cache_mib` and pinned levels do,
/// for a trie of `keys` keys; at least 16 MiB (what remains for pages
/// below the upper levels when those levels alone outgrow the budget).
pub fn fair_page_cache_mib(page_cache_mib: usize, keys: u64, upper_levels: usize) -> usize {
    let extra_mib = upper_levels_mib(keys, upper_levels).ceil() as usize;
    page_cache_mib.saturating_sub(extra_mib).max(16)
}

/// MiB of trie pages NOMT holds for good with `upper_levels`, for a trie of
/// `keys` keys, beyond the levels pagetrie pins too.
pub fn upper_levels_mib(keys: u64, upper_levels: usize) -> f64 {
    ((PAGETRIE_PINNED_BELOW_ROOT + 1)..=upper_levels)
        .map(|depth| stored_at(keys as f64, depth as i32))
        .sum::<f64>()
        * 4096.0
        / (1u64 << 20) as f64
}

type Db = Nomt<Blake3Hasher>;

/// Where NOMT's database and its state file live under `dir`.
pub fn paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("nomt"), dir.join("nomt-state"))
}

fn open(path: &Path, s: &NomtSettings) -> Result<Db, BoxError> {
    let mut o = nomt::Options::new();
    o.path(path);
    o.commit_concurrency(s.commit_concurrency.max(1));
    o.io_workers(3);
    o.page_cache_size(s.page_cache_mib);
    o.leaf_cache_size(s.leaf_cache_mib);
    o.page_cache_upper_levels(s.upper_levels);
    o.prepopulate_page_cache(s.prepopulate);
    o.warm_up(s.warm_up);
    o.hashtable_buckets(s.buckets);
    o.rollback(s.rollback > 0);
    if s.rollback > 0 {
        o.max_rollback_log_len(s.rollback);
    }
    Ok(Nomt::open(o)?)
}

/// Opens NOMT's accounts database under `dir`, filling it with `2^log2`
/// accounts first unless it already holds exactly that; returns it with the
/// fill time (`None` if reused) and the time of the open alone.
pub fn open_or_fill(
    dir: &Path,
    log2: u32,
    settings: &NomtSettings,
    mut progress: impl FnMut(u64, u64),
) -> Result<(Db, Accounts, Option<Duration>, Duration), BoxError> {
    let (db_path, state_path) = paths(dir);
    if let Some(accounts) = Accounts::load(&state_path, log2) {
        if db_path.exists() {
            let start = Instant::now();
            let db = open(&db_path, settings)?;
            return Ok((db, accounts, None, start.elapsed()));
        }
    }
    crate::workload::clear(dir, &db_path, &state_path)?;
    let start = Instant::now();
    let db = open(&db_path, settings)?;
    let total = 1u64 << log2;
    let balance = 1000u64.to_be_bytes().to_vec();
    let mut ids: Vec<u64> = (0..total).collect();
    for chunk in ids.chunks_mut(1 << 20) {
        let mut writes: Vec<_> = chunk
            .iter()
            .map(|&id| (account_key(id), KeyReadWrite::Write(Some(balance.clone()))))
            .collect();
        writes.sort_unstable_by_key(|w| w.0);
        let session = db.begin_session(SessionParams::default());
        session.finish(writes)?.commit(&db)?;
        progress(chunk[chunk.len() - 1] + 1, total);
    }
    drop(db);
    let filled = start.elapsed();
    let accounts = Accounts::fresh(state_path, log2);
    accounts.save()?;
    let start = Instant::now();
    let db = open(&db_path, settings)?;
    Ok((db, accounts, Some(filled), start.elapsed()))
}

/// The root NOMT commits to.
pub fn root(db: &Db) -> [u8; 32] {
    db.root().into_inner()
}

/// Runs one workload: reads through a NOMT session (which does not see its own
/// writes, so a map shared by the threads keeps them, as pagetrie's session
/// does), then finish and commit with a witness.
pub fn run_workload(
    db: &Db,
    accounts: &mut Accounts,
    config: &Config,
) -> Result<WorkloadStats, BoxError> {
    // Planned before the clock starts, as pagetrie's unpipelined run is.
    let transfers = plan_transfers(accounts, config)?;
    let start = Instant::now();
    let (mut stats, session_finished, witness) = execute(db, None, &transfers, config)?;
    let commit_start = Instant::now();
    session_finished.commit(db)?;
    stats.commit_and_prove = stats.finish.unwrap_or_default() + commit_start.elapsed();
    stats.total = start.elapsed();
    drop(witness);
    finish_stats(db, &mut stats);
    Ok(stats)
}

/// NOMT pipelined as its API allows: each workload executes on the overlay
/// of the one before, which is committed once this one is finished. NOMT
/// holds a commit back while any session is live, so the commit cannot run
/// beside the next workload's execution as pagetrie's does.
#[derive(Default)]
pub struct Pipeline {
    parent: Option<nomt::Overlay>,
}

impl Pipeline {
    /// Runs one workload on the previous one's overlay, then commits that
    /// overlay. `commit_and_prove` is this workload's finish plus the
    /// previous one's commit.
    pub fn run(
        &mut self,
        db: &Db,
        accounts: &mut Accounts,
        config: &Config,
    ) -> Result<WorkloadStats, BoxError> {
        // Planned inside the clock, as pagetrie's pipelined run is.
        let start = Instant::now();
        let transfers = plan_transfers(accounts, config)?;
        let (mut stats, finished, witness) = execute(db, self.parent.as_ref(), &transfers, config)?;
        let overlay = finished.into_overlay();
        let overlay_root = overlay.root().into_inner();
        let commit_start = Instant::now();
        if let Some(previous) = self.parent.replace(overlay) {
            previous.commit(db)?;
        }
        stats.commit_and_prove = stats.finish.unwrap_or_default() + commit_start.elapsed();
        stats.total = start.elapsed();
        drop(witness);
        finish_stats(db, &mut stats);
        // This workload's root: the one committed is the workload's before.
        stats.root = overlay_root;
        Ok(stats)
    }

    /// Commits the last overlay; returns how long it took.
    pub fn wait(&mut self, db: &Db) -> Result<Duration, BoxError> {
        let start = Instant::now();
        if let Some(last) = self.parent.take() {
            last.commit(db)?;
        }
        Ok(start.elapsed())
    }
}

/// A finished session that can commit, directly or as an overlay.
type Finished = nomt::FinishedSession;

/// Executes one workload's transfers in a session (on `parent`'s overlay if
/// given) and finishes it with a witness (returned, to be dropped outside
/// the timed part); the stats have the execution's figures and the finish
/// time.
fn execute(
    db: &Db,
    parent: Option<&nomt::Overlay>,
    transfers: &[(u64, u64)],
    config: &Config,
) -> Result<(WorkloadStats, Finished, Option<nomt::Witness>), BoxError> {
    let os_before = os_io_bytes();
    let params = SessionParams::default().witness_mode(WitnessMode::read_write());
    let params = match parent {
        Some(parent) => params
            .overlay([parent])
            .map_err(|e| format!("NOMT overlay: {e:?}"))?,
        None => params,
    };
    let session = db.begin_session(params);
    // Sharded by key, so execution threads seldom wait on each other here:
    // this map is the harness's, not NOMT's.
    let access: Vec<Mutex<HashMap<[u8; 32], KeyReadWrite>>> =
        (0..64).map(|_| Mutex::new(HashMap::new())).collect();
    let shard = |k: &[u8; 32]| &access[(k[0] & 63) as usize];
    let (read_time, reads) = on_threads(transfers, config.threads, |slice| {
        execute_transfers(
            slice,
            config.lookahead,
            |k| session.warm_up(*k),
            |k| -> Result<Option<Vec<u8>>, BoxError> {
                if let Some(seen) = shard(k).lock().get(k) {
                    return Ok(seen.last_value().map(<[u8]>::to_vec));
                }
                let value = session.read(*k)?;
                shard(k)
                    .lock()
                    .entry(*k)
                    .or_insert_with(|| KeyReadWrite::Read(value.clone()));
                Ok(value)
            },
            |k, v| match shard(&k).lock().entry(k) {
                std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().write(Some(v)),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(KeyReadWrite::Write(Some(v)));
                }
            },
        )
    })?;
    let mut actuals: Vec<_> = access
        .into_iter()
        .flat_map(|shard| shard.into_inner())
        .collect();
    actuals.sort_unstable_by_key(|a| a.0);
    let account_updates = actuals.iter().filter(|(_, rw)| rw.is_write()).count() as u64;
    let finish_start = Instant::now();
    let mut finished = session.finish(actuals)?;
    let witness = finished.take_witness();
    let stats = WorkloadStats {
        finish: Some(finish_start.elapsed()),
        read_time,
        reads,
        account_updates,
        os_read_bytes: os_before.0,
        os_write_bytes: os_before.1,
        ..WorkloadStats::default()
    };
    Ok((stats, finished, witness))
}

/// Turns the I/O counters `execute` left in `stats` into the workload's,
/// and records the root.
fn finish_stats(db: &Db, stats: &mut WorkloadStats) {
    let os_after = os_io_bytes();
    stats.os_read_bytes = os_after.0 - stats.os_read_bytes;
    stats.os_write_bytes = os_after.1 - stats.os_write_bytes;
    stats.root = root(db);
}
