//! Counters a running database keeps, for tuning and for the benchmarks.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a database's counters since it was opened ([`crate::Db::metrics`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Block reads issued to the disk (pages, buckets, overflow, slot maps at open).
    pub reads_issued: u64,
    /// Block writes issued to the disk (blocks, slot maps and meta records).
    pub writes_issued: u64,
    /// Bytes written to the disk.
    pub bytes_written: u64,
    /// Runs of consecutive blocks those writes formed as they were handed
    /// to the disk: `writes_issued / write_runs` is the mean run, the
    /// length the disk may take as one request.
    pub write_runs: u64,
    /// Page lookups answered from RAM.
    pub page_cache_hits: u64,
    /// Page lookups that read the disk.
    pub page_cache_misses: u64,
    /// Pages the prefetcher read into the cache (lookups of them then hit).
    pub pages_prefetched: u64,
    /// Prefetch hints sent and not yet acted on (at most
    /// [`crate::Options::prefetch_hints`]).
    pub hints_queued: u64,
    /// Prefetch hints dropped because that many were queued; a key hinted
    /// again after a drop counts once for each drop.
    pub hints_dropped: u64,
    /// Bucket reads answered from RAM.
    pub value_cache_hits: u64,
    /// Bucket reads that went to the disk.
    pub value_cache_misses: u64,
    /// Buckets read into the cache ahead of the reads wanting them (hints'
    /// prefetches, a commit's load of the buckets it changes); a read of one
    /// still cached then hits.
    pub buckets_prefetched: u64,
    /// Commits made.
    pub commits: u64,
    /// Sessions alive now.
    pub live_sessions: u64,
    /// Commits whose replaced values are kept in RAM because a live session
    /// began before them.
    pub retained_versions: u64,
    /// Bytes those kept values take beyond what the history keeps of them
    /// (bounded by the oldest live session, and by
    /// [`crate::Options::snapshot_budget_mib`]).
    pub retained_version_bytes: u64,
    /// Commits the history reaches back ([`crate::Options::history`]).
    pub history_commits: u64,
    /// RAM the history's old values take.
    pub history_bytes: u64,
    /// Total time updating the trie and building witnesses (zero with metrics off).
    pub commit_trie_ns: u64,
    /// Total time planning the stores' block writes (zero with metrics off).
    /// In [`crate::Session::commit_and_prove`] the value plan runs on its own
    /// thread beside the trie update, so this and `commit_trie_ns` overlap.
    pub commit_plan_ns: u64,
    /// Total time in the durable write: the blocks, the slot map, the meta
    /// record and their syncs (zero with metrics off).
    pub commit_write_ns: u64,
    /// Serialized bytes of the witnesses `commit_and_prove` returned
    /// ([`crate::Witness::encoded_len`]).
    pub witness_bytes: u64,
    /// Pages and buckets the cleaner moved out of sparse regions, so that
    /// commits find wholly free regions to write in long runs; counted in
    /// `writes_issued` and `bytes_written` too.
    pub blocks_moved: u64,
    /// Pages commits wrote again, unchanged, where they lie, to join their
    /// writes into longer runs ([`crate::Options::rewrite_gap_blocks`]);
    /// counted in `writes_issued` and `bytes_written` too.
    pub blocks_rewritten: u64,
    /// Trie pages stored.
    pub pages_stored: u64,
    /// Keys stored.
    pub keys_stored: u64,
    /// RAM taken by the page index and the value directory with its fingerprints.
    pub ram_index_bytes: u64,
    /// Value-store buckets in use.
    pub buckets: u64,
    /// Whether open indexed the pages and buckets from the catalog's notes
    /// (false: it read every block, as after a damaged or missing catalog).
    pub opened_from_catalog: bool,
    /// Whether the data files bypass the OS page cache (O_DIRECT; not on tmpfs).
    pub direct_io: bool,
    /// Whether I/O runs on io_uring.
    pub io_uring: bool,
    /// Why io_uring is not used, when it was wanted and could not be set up.
    pub io_fallback: Option<String>,
}

/// The commit's counters: commits, phase timers, witness bytes.
#[derive(Default)]
pub(crate) struct CommitTimers {
    pub(crate) commits: AtomicU64,
    pub(crate) trie_ns: AtomicU64,
    pub(crate) plan_ns: AtomicU64,
    pub(crate) write_ns: AtomicU64,
    pub(crate) witness_bytes: AtomicU64,
    pub(crate) blocks_moved: AtomicU64,
    pub(crate) blocks_rewritten: AtomicU64,
}

impl CommitTimers {
    pub(crate) fn add(counter: &AtomicU64, since: Option<std::time::Instant>) {
        if let Some(t) = since {
            counter.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }
}
