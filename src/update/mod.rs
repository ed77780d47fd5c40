//! The trie update (docs/design.md section 7): from a session's sorted changes to
//! the new root, the page changes and the witness.
//!
//! Owns what pages contain: which subtrees are stored (those with at least
//! [`STORE_MIN_LEAVES`] leaves), what every cell and bitmap bit holds, and how a
//! subtree is updated, rebuilt from the value store, and proven. Workers split the
//! root page's 64 children between them; the root page is finished last, on the
//! caller's thread.
//!
//! May not write anything: it reads the committed state through the stores and
//! hands its page changes back; the Db commits them with the value changes.

#[cfg(test)]
mod tests;
mod unwritten;
mod worker;

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::trie::page::{cell, Page, NODES_PER_PAGE};
use crate::trie::page_id::{PageId, PAGE_DEPTH};
use crate::trie::proof::MultiProof;
use crate::trie::{KeyPath, Node, NodeKind};
use crate::Error;

pub(crate) use unwritten::Unwritten;
pub(crate) use worker::{Change, Tree, STORE_MIN_LEAVES};
use worker::{ChildDone, Old, Pos, Work, Worker};

/// The depth of the subtrees a trie of `keys` keys leaves unstored as a
/// rule: the first page boundary where a subtree holds fewer than
/// [`STORE_MIN_LEAVES`] keys on average (a denser or sparser part of the
/// key space may differ).
pub(crate) fn unstored_depth(keys: usize) -> usize {
    let mut depth = PAGE_DEPTH;
    while keys.checked_shr(depth as u32).unwrap_or(0) as u64 >= STORE_MIN_LEAVES {
        depth += PAGE_DEPTH;
    }
    depth
}

/// Page changes: `Some` stores a page, `None` deletes it.
pub(crate) use crate::page_store::PageChanges;

/// Takes page changes as soon as a part of the trie is done with them, so
/// that they can be written while the rest is computed. Called from the
/// workers' threads; the parts are disjoint.
pub(crate) type PageSink<'s> = dyn Fn(PageChanges) -> Result<(), Error> + Sync + 's;

/// What a commit does to the trie.
pub(crate) struct TrieUpdate {
    pub(crate) root: Node,
    /// Pages to store or delete, those not handed to a sink.
    pub(crate) pages: PageChanges,
    /// The proof of `keys` against the previous root.
    pub(crate) proof: MultiProof,
}

/// Applies `changes` (sorted, each key once) to the committed trie with root
/// `prev_root`, proving `keys` (sorted, distinct) against it, on `workers`
/// threads. With a `sink`, the workers hand it each root child's page changes
/// as they finish it.
pub(crate) fn update_trie(
    tree: Tree<'_>,
    prev_root: &Node,
    changes: &[Change],
    keys: &[KeyPath],
    workers: usize,
    sink: Option<&PageSink<'_>>,
) -> Result<TrieUpdate, Error> {
    let old = match tree.page(&PageId::ROOT)? {
        Some(page) => Old::Page { page, taken: false },
        // Too few leaves for a page: not worth a read of every bucket unless
        // the store says so, or unwritten changes may have shrunk the trie.
        None if tree.unwritten.is_some() || (tree.values.len() as u64) < STORE_MIN_LEAVES => {
            let all = tree.entries_with_prefix(&[0; 32], 0)?;
            if all.len() as u64 >= STORE_MIN_LEAVES {
                return Err(Error::corrupt("the root page is missing"));
            }
            let root = crate::trie::build_subtree(&all, 0, &mut crate::trie::Discard);
            if root != *prev_root {
                return Err(Error::corrupt("the value store disagrees with the root"));
            }
            Old::Entries(all)
        }
        None => return Err(Error::corrupt("the root page is missing")),
    };
    let mut main = Worker::new(tree);
    if let Old::Page { page, .. } = &old {
        if workers > 1 {
            run_children(tree, page, changes, keys, workers, sink, &mut main)?;
        }
    }
    let mut proof = MultiProof::default();
    // Room at once for the children's proofs and what the root page adds (at
    // most one entry a cell), not a doubling buffer's copies of a witness of
    // tens of MB, whose freed halves glibc keeps.
    if !main.done.is_empty() {
        let (terminals, siblings) = main.done.values().fold((0, 0), |(t, s), d| {
            (t + d.proof.terminals.len(), s + d.proof.siblings.len())
        });
        proof.terminals.reserve_exact(terminals + NODES_PER_PAGE);
        proof.siblings.reserve_exact(siblings + NODES_PER_PAGE);
    }
    if keys.is_empty() {
        proof.siblings.push(*prev_root);
    }
    let work = Work { keys, changes };
    let root = match main.walk(PageId::ROOT, old, work, &mut proof)? {
        Some(updated) => updated.node,
        None => *prev_root,
    };
    Ok(TrieUpdate {
        root,
        pages: main.pages,
        proof,
    })
}

/// One child of the root page and what falls under it.
struct RootChild<'c> {
    index: u8,
    work: Work<'c>,
}

/// Proves and updates the root page's children on `workers` threads, leaving
/// the results in `main` for the root page's own pass.
fn run_children(
    tree: Tree<'_>,
    root: &Page,
    changes: &[Change],
    keys: &[KeyPath],
    workers: usize,
    sink: Option<&PageSink<'_>>,
    main: &mut Worker<'_>,
) -> Result<(), Error> {
    let jobs: Vec<RootChild> = (0..64u8)
        // A child whose parent cell is internal is reached by the root page's
        // walk exactly as its own subtree; others lie in a region rebuilt whole.
        .filter(|&i| {
            NodeKind::of(&root.node(cell(PAGE_DEPTH - 1, i as usize / 2))) == NodeKind::Internal
        })
        .map(|index| RootChild {
            index,
            work: Work {
                keys: under(keys, index, |k| k),
                changes: under(changes, index, |c| &c.0),
            },
        })
        .filter(|job| !job.work.is_empty())
        .collect();
    let next = AtomicUsize::new(0);
    type Output = (Vec<(u8, ChildDone)>, PageChanges);
    let outputs: Vec<Result<Output, Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers.min(jobs.len()))
            .map(|_| {
                // Named for profiles: the commit's CPU by thread.
                let builder = std::thread::Builder::new().name("pagetrie-update".into());
                builder.spawn_scoped(s, || {
                    let mut worker = Worker::new(tree);
                    let mut done = Vec::new();
                    while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                        done.push(run_job(&mut worker, root, job)?);
                        if let Some(sink) = sink {
                            if !worker.pages.is_empty() {
                                sink(std::mem::take(&mut worker.pages))?;
                            }
                        }
                    }
                    Ok((done, worker.pages))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|spawned| match spawned {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(e) => Err(Error::io("starting", "a commit worker", e)),
            })
            .collect()
    });
    for output in outputs {
        let (done, pages) = output?;
        main.done.extend(done);
        main.pages.extend(pages);
    }
    Ok(())
}

fn run_job(
    worker: &mut Worker<'_>,
    root: &Page,
    job: &RootChild<'_>,
) -> Result<(u8, ChildDone), Error> {
    let (child, old) = worker.old_child(root, &PageId::ROOT, Pos::bottom(job.index), job.work)?;
    let mut proof = MultiProof::default();
    let updated = worker.walk(child, old, job.work, &mut proof)?;
    Ok((job.index, ChildDone { updated, proof }))
}

/// The part of `sorted` whose keys start with the six bits `index`.
fn under<T>(sorted: &[T], index: u8, key: impl Fn(&T) -> &KeyPath) -> &[T] {
    let start = sorted.partition_point(|t| key(t)[0] >> 2 < index);
    let end = sorted.partition_point(|t| key(t)[0] >> 2 <= index);
    &sorted[start..end]
}
