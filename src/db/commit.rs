//! The order of a commit, in two halves: `finish` updates the trie on the
//! session's base and builds the witness, with nothing written; `apply` plans
//! both stores, commits one batch and publishes. `apply` runs under the
//! writer lock and checks the session is still current; `finish` checks it
//! under the lock before and after, and runs beside commits of the chain of
//! overlays it builds on. A commit that does both holds the lock across them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

use super::history::{self, Chain, Head, Undo, KEPT_PAGE_LEVEL};
use super::metrics::CommitTimers;
use super::prefetch::Hint;
use super::{CommitOutput, KeyedValues, Reads, Shared};
use crate::page_store::PagePlan;
use crate::store::{Batch, Target};
use crate::trie::page_id::PageId;
use crate::trie::proof::{MultiProof, Witness};
use crate::trie::{hash_value, KeyPath, Node, ValueHash, TERMINATOR};
use crate::update::{update_trie, Change, PageChanges, PageSink, Tree, TrieUpdate, Unwritten};
use crate::value_store::ValuePlan;
use crate::Error;

/// A commit's batch being assembled under the writer lock: the stores'
/// plans, and the batch to which they stage their writes, started as staged.
pub(super) struct Building {
    values: ValuePlan,
    staging: SharedBatch,
}

/// The part of a [`Building`] both the value planner and the trie's workers
/// stage into, from their threads.
pub(super) struct SharedBatch {
    pages: PagePlan,
    batch: Batch,
}

/// A session's trie update on its base, not yet written.
pub(crate) struct Prepared {
    /// The state it applies to: the head when it commits.
    base: Head,
    pub(crate) root: Node,
    writes: KeyedValues,
    pub(super) pages: PageChanges,
    pub(crate) witness: Witness,
    prove: bool,
    pub(super) step: Step,
}

/// What a commit does to the history.
#[derive(Clone, Copy)]
pub(super) enum Step {
    /// Keeps the old values of the keys it writes.
    Keep,
    /// Takes the state back this many commits, whose undos it drops.
    Rollback(usize),
}

/// What a trie update takes from a session, made once so that an update
/// run again takes it as it is: the changes with their value hashes, the
/// keys its witness proves (sorted, each once) and the value hashes the
/// session saw.
pub(super) struct UpdateInput {
    pub(super) changes: Vec<Change>,
    keys: Vec<KeyPath>,
    seen: Vec<(KeyPath, ValueHash)>,
}

impl UpdateInput {
    /// With `prove`, the witness proves the written keys as well as the read.
    pub(super) fn new(
        writes: &KeyedValues,
        reads: Reads,
        prove: bool,
    ) -> Result<UpdateInput, Error> {
        for (_, value) in writes {
            crate::check_value_len(value.as_ref().map_or(0, Vec::len))?;
        }
        let changes = writes
            .iter()
            .map(|(k, v)| (*k, v.as_deref().map(hash_value)))
            .collect();
        let Reads { mut keys, seen } = reads;
        if prove {
            keys.extend(writes.iter().map(|(k, _)| *k));
            keys.sort_unstable();
            keys.dedup();
        } else {
            keys.clear();
        }
        Ok(UpdateInput {
            changes,
            keys,
            seen,
        })
    }
}

impl Prepared {
    pub(super) fn new(
        base: Head,
        writes: KeyedValues,
        changes: Vec<Change>,
        trie: TrieUpdate,
        prove: bool,
    ) -> Prepared {
        Prepared {
            base,
            root: trie.root,
            writes,
            pages: trie.pages,
            witness: Witness {
                proof: trie.proof,
                writes: changes,
            },
            prove,
            step: Step::Keep,
        }
    }

    /// What its commit returns.
    pub(super) fn into_output(self) -> CommitOutput {
        CommitOutput {
            prev_root: self.base.root,
            root: self.root,
            witness: self.witness,
        }
    }

    /// The root it was computed on.
    pub(crate) fn prev_root(&self) -> Node {
        self.base.root
    }

    /// Its changes, for an overlay's view: the values with their hashes, and
    /// the pages, shared.
    pub(super) fn unwritten(&self) -> Unwritten {
        let mut u = Unwritten::default();
        for ((key, value), (_, hash)) in self.writes.iter().zip(&self.witness.writes) {
            let entry = match (value, hash) {
                (Some(v), Some(h)) => Some((*h, Arc::from(v.as_slice()))),
                _ => None,
            };
            u.values.insert(*key, entry);
        }
        for change in &self.pages {
            u.pages.insert(change.id, change.page.clone());
        }
        u
    }
}

impl Shared {
    /// Takes the writer lock and checks that `base` is still the head.
    pub(super) fn writer_at(&self, base: Head) -> Result<(MutexGuard<'_, ()>, Head), Error> {
        let writer = self.writer.lock();
        self.store.check_usable()?;
        let head = self.snapshots.head();
        if head != base {
            return Err(Error::StaleSession);
        }
        Ok((writer, head))
    }

    /// Commits `writes` (sorted by key, each key once) on top of `base`, the
    /// committed head; with `prove`, the witness proves `reads` and the
    /// written keys against its root.
    pub(super) fn commit(
        &self,
        base: Head,
        writes: KeyedValues,
        reads: Reads,
        prove: bool,
    ) -> Result<CommitOutput, Error> {
        let (writer, head) = self.writer_at(base)?;
        let started = Instant::now();
        let busy = self.store.io().busy();
        let workers = self.options.commit_workers;
        let (mut prepared, building) =
            self.prepare_and_plan(head, writes, reads, prove, workers)?;
        let pages = std::mem::take(&mut prepared.pages);
        self.apply(&prepared, pages, Some(building))?;
        drop((busy, writer));
        self.report_commit(head.seqno + 1, started);
        Ok(prepared.into_output())
    }

    /// [`Shared::finish`]'s update with the commit's batch: the values are
    /// planned on another thread meanwhile, and both stores' blocks start to
    /// be written as they are planned. The caller holds the writer lock.
    pub(super) fn prepare_and_plan(
        &self,
        head: Head,
        writes: KeyedValues,
        reads: Reads,
        prove: bool,
        workers: usize,
    ) -> Result<(Prepared, Building), Error> {
        let seqno = head.seqno + 1;
        let input = UpdateInput::new(&writes, reads, prove)?;
        // The buckets the changes fall in, read ahead on a thread of their
        // own, queued before any write: the plan and the workers' queries of
        // the keys' elided subtrees wait for the one they need as it
        // arrives, while the others are being read. Left to the workers, at
        // 2^24 they were some 800 lone reads a commit, each queued behind
        // the commit's writes; read in full before the workers started, the
        // CPUs idled for 70 to 90 ms a commit (250 on a cold disk).
        let subtree_depth = crate::update::unstored_depth(self.values.len());
        let load = self.values.start_load(&writes, subtree_depth);
        let staging = Mutex::new(self.begin_staging(seqno));
        let (trie, values) = std::thread::scope(|s| {
            // Not started: the load ends unread and readers read for themselves.
            let _loader = std::thread::Builder::new()
                .name("pagetrie-load".into())
                .spawn_scoped(s, move || load.run());
            let planner = std::thread::Builder::new()
                .name("pagetrie-plan".into())
                .spawn_scoped(s, || self.plan_values(seqno, &writes, &staging));
            let trie = self.update(head, &input, None, workers, Some(&staging));
            let values = match planner {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(e) => Err(Error::io("starting", "the value planner", e)),
            };
            (trie, values)
        });
        let prepared = Prepared::new(head, writes, input.changes, trie?, prove);
        let building = Building {
            values: values?,
            staging: staging.into_inner(),
        };
        Ok((prepared, building))
    }

    /// [`Shared::apply`] under the writer lock, if `prepared`'s base is still
    /// the head; a refusal leaves `prepared` committable.
    pub(super) fn commit_prepared(&self, prepared: &Prepared) -> Result<(), Error> {
        let writer = self.writer_at(prepared.base)?;
        let started = Instant::now();
        let busy = self.store.io().busy();
        self.apply(prepared, prepared.pages.clone(), None)?;
        drop((busy, writer));
        self.report_commit(prepared.base.seqno + 1, started);
        Ok(())
    }

    /// After a commit landed, outside the writer lock: hands idle free
    /// blocks back to the kernel, and
    /// tells the operator what it met: a commit slower than
    /// [`crate::Options::slow_commit_threshold`], hints dropped since the
    /// last commit.
    fn report_commit(&self, seqno: u64, started: Instant) {
        crate::block::release_idle();
        let took = started.elapsed();
        if took >= self.options.slow_commit_threshold {
            tracing::warn!(seqno, ms = took.as_millis() as u64, "slow commit");
        }
        let dropped = self.hints.dropped_since_report();
        if dropped > 0 {
            tracing::warn!(
                dropped,
                limit = self.options.prefetch_hints,
                "prefetch hints dropped since the last commit: the queue was full"
            );
        }
    }

    /// A multi-proof of `keys` at the head.
    pub(super) fn prove_head(&self, keys: &[KeyPath]) -> Result<MultiProof, Error> {
        let _writer = self.writer.lock();
        self.store.check_usable()?;
        self.prove_locked(self.snapshots.head(), keys, None)
    }

    /// Loads into the caches what proving `keys` at the head reads, without
    /// the writer lock, so that a proof under it later holds commits back
    /// only briefly: the prefetcher reads many blocks at a time, and a proof
    /// taken now and thrown away waits for the rest (a commit landing
    /// meanwhile may make it fail; the caches keep only committed blocks).
    pub(super) fn load_paths(&self, keys: &[KeyPath]) {
        self.prefetch(keys.iter().map(|&key| Hint { key, bucket: true }).collect());
        let _ = self.prove_locked(self.snapshots.head(), keys, None);
    }

    /// The caller holds the writer lock, and the stores under `unwritten`
    /// show `head`.
    pub(super) fn prove_locked(
        &self,
        head: Head,
        keys: &[KeyPath],
        unwritten: Option<&Unwritten>,
    ) -> Result<MultiProof, Error> {
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        let trie = update_trie(
            self.tree(unwritten),
            &head.root,
            &[],
            &keys,
            self.options.commit_workers,
            None,
        )?;
        Ok(trie.proof)
    }

    pub(super) fn tree<'a>(&'a self, unwritten: Option<&'a Unwritten>) -> Tree<'a> {
        Tree {
            pages: &self.pages,
            values: &self.values,
            unwritten,
            seen: &[],
            take_pages: false,
        }
    }

    fn clock(&self) -> Option<Instant> {
        self.options.metrics.then(Instant::now)
    }

    /// The trie update of `input` on `head` (the stores' state under
    /// `unwritten`) on `workers` threads, with its witness. With `staging`,
    /// the page changes go to its batch, and to the disk, as the workers
    /// finish them.
    pub(super) fn update(
        &self,
        head: Head,
        input: &UpdateInput,
        unwritten: Option<&Unwritten>,
        workers: usize,
        staging: Option<&Mutex<SharedBatch>>,
    ) -> Result<TrieUpdate, Error> {
        let sink = staging
            .map(|staging| move |pages: PageChanges| self.add_pages(&mut staging.lock(), pages));
        let sink = sink.as_ref().map(|s| s as &PageSink<'_>);
        let started = self.clock();
        let tree = Tree {
            seen: &input.seen,
            take_pages: staging.is_some(),
            ..self.tree(unwritten)
        };
        let trie = update_trie(tree, &head.root, &input.changes, &input.keys, workers, sink)?;
        CommitTimers::add(&self.timers.trie_ns, started);
        Ok(trie)
    }

    /// An empty batch for commit `seqno`, with its page plan.
    fn begin_staging(&self, seqno: u64) -> SharedBatch {
        SharedBatch {
            pages: self.pages.begin_plan(seqno),
            // The root is set once known.
            batch: self.store.begin_batch(TERMINATOR),
        }
    }

    /// Plans commit `seqno`'s values, staging them into `staging` and
    /// starting their writes as the plan goes. The caller holds the writer
    /// lock.
    fn plan_values(
        &self,
        seqno: u64,
        writes: &KeyedValues,
        staging: &Mutex<SharedBatch>,
    ) -> Result<ValuePlan, Error> {
        let started = self.clock();
        let early = |plan: &mut ValuePlan| {
            let batch = &mut staging.lock().batch;
            plan.stage(batch);
            self.store.write_early(batch)
        };
        let mut values = self.values.plan(writes, seqno, early)?;
        let batch = &mut staging.lock().batch;
        values.stage(batch);
        self.store.write_early(batch)?;
        CommitTimers::add(&self.timers.plan_ns, started);
        Ok(values)
    }

    /// Plans `pages` into `staging` and starts writing them.
    fn add_pages(&self, staging: &mut SharedBatch, pages: PageChanges) -> Result<(), Error> {
        self.pages.plan(&mut staging.pages, pages)?;
        staging.pages.stage(&mut staging.batch);
        self.store.write_early(&mut staging.batch)
    }

    /// Finishes the batch (begun unless `building` was) with `pages`, the
    /// rest of `prepared`'s page changes, commits it and publishes it. The
    /// caller holds the writer lock and has checked `prepared`'s base is the
    /// head. A refusal leaves `prepared` as it was, to be committed again.
    pub(super) fn apply(
        &self,
        prepared: &Prepared,
        pages: PageChanges,
        building: Option<Building>,
    ) -> Result<(), Error> {
        let Prepared {
            base,
            root,
            ref writes,
            pages: _,
            ref witness,
            prove,
            step,
        } = *prepared;
        let seqno = base.seqno + 1;
        let building = match building {
            Some(building) => building,
            None => {
                let staging = Mutex::new(self.begin_staging(seqno));
                let values = self.plan_values(seqno, writes, &staging)?;
                Building {
                    values,
                    staging: staging.into_inner(),
                }
            }
        };
        let started = self.clock();
        let Building {
            values: mut value_plan,
            staging:
                SharedBatch {
                    pages: mut page_plan,
                    mut batch,
                },
        } = building;
        self.pages.plan(&mut page_plan, pages)?;
        page_plan.stage(&mut batch);
        batch.root = root;
        let previous = std::mem::take(&mut value_plan.previous);
        // The top pages as the commit finds them, for its undo: always
        // cached, and not yet replaced (the publish comes after).
        let mut old_pages = Vec::new();
        if self.options.history > 0 && matches!(step, Step::Keep) {
            let mut kept: Vec<PageId> = page_plan
                .changed()
                .filter(|id| id.level() <= KEPT_PAGE_LEVEL)
                .copied()
                .collect();
            kept.sort_unstable();
            for id in kept {
                old_pages.push((id, self.pages.get(&id)?));
            }
        }
        // After the undo's pages: a page moved is not changed.
        let moved = self.pages.clean(&mut page_plan)? + value_plan.moved;
        page_plan.stage(&mut batch);
        // One undo for the sessions' snapshots and the history.
        let undo = Arc::new(Undo::new(seqno, base.root, root, &previous, old_pages)?);
        drop(previous);
        let chain = self.snapshots.head_and_chain().1;
        let chain = match (self.options.history, step) {
            (0, _) => Chain::default(),
            (_, Step::Keep) => {
                let window = self.options.history_window();
                // An undo the window drops as it is kept leaves no record.
                if window.holds(&undo) {
                    batch.history = Some(undo.encode()?);
                }
                chain.pushed(undo.clone(), window)
            }
            (_, Step::Rollback(depth)) => {
                batch.history = Some(history::rollback_record(depth));
                chain.popped(depth)
            }
        };
        CommitTimers::add(&self.timers.plan_ns, started);

        // A plan that is not committed changed nothing: dropping it is enough.
        let started = self.clock();
        let mut written = self.store.persist(batch)?;
        // The root, new sessions' base and the values readers see move as one:
        // a reader that sees the published values also sees the undo that
        // takes a session pinned before back to its base.
        self.snapshots.install(undo);
        let (cache_update, replaced) = self
            .values
            .publish(value_plan, written.take(Target::Buckets));
        let rewritten = page_plan.rewritten();
        // The bucket cache's share (some 90,000 updates at 2^24) on the CPU
        // the commit's threads have left idle, beside the page store's
        // publish and the frees of the directory's replaced summaries; here
        // if the thread cannot start.
        let cache_update = Mutex::new(Some(cache_update));
        let apply_cache = || {
            let update = cache_update.lock().take();
            if let Some(update) = update {
                update.apply();
            }
        };
        std::thread::scope(|s| {
            let _beside = std::thread::Builder::new()
                .name("pagetrie-publish".into())
                .spawn_scoped(s, apply_cache);
            self.pages.publish(page_plan, written.take(Target::Pages));
            replaced.free();
        });
        apply_cache();
        let keep_from = chain.keep_from(seqno + 1);
        self.snapshots.advance(Head { seqno, root }, chain);
        CommitTimers::add(&self.timers.write_ns, started);
        if self.options.history > 0 {
            self.store.trim_history(keep_from);
        }
        // Last: the fold takes the store's commit lock, which the trim needs.
        self.fold_later();
        self.timers.commits.fetch_add(1, Ordering::Relaxed);
        self.timers
            .blocks_moved
            .fetch_add(moved as u64, Ordering::Relaxed);
        self.timers
            .blocks_rewritten
            .fetch_add(rewritten, Ordering::Relaxed);
        if prove {
            self.timers
                .witness_bytes
                .fetch_add(witness.encoded_len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}
