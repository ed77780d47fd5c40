//! Pending sessions: a block's writes fixed and readable before its trie
//! update has run, so a node executes block n+1 on block n's values while
//! block n's root is computed and written on another thread.
//!
//! A pending session keeps its session (writes, reads, base) until its
//! update runs, once: when [`Pending::finish`] or [`Pending::commit`] is
//! called or a session built on it needs its root. It then becomes an
//! [`Overlay`], and everything an overlay does (commit, forks, sessions on
//! it) is the overlay's. What this module owns is what sessions built on
//! pending ones read: the writes of the pending sessions below them, over
//! the newest state of the chain whose root is known. It may not touch the
//! trie or the stores.

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::overlay::{Base, Overlay};
use super::{Session, Shared};
use crate::trie::KeyPath;
use crate::update::Unwritten;
use crate::Error;

/// A session ended without its trie update ([`Session::into_pending`]):
/// its writes are fixed and sessions build on them
/// ([`crate::Db::begin_session_on_pending`]); its root and witness come
/// once its update has run ([`Pending::finish`], or [`Pending::commit`],
/// which also makes it durable). Cheap to clone; `Send + Sync`, so another
/// thread may commit it while the next block executes on it
/// (`examples/pipeline.rs`).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let db = pagetrie::Db::open(pagetrie::Options::new(dir.path()))?;
/// let block = db.begin_session();
/// block.write([1; 32], Some(vec![1]));
/// let pending = block.into_pending()?;
/// // Its root is computed and made durable on another thread...
/// let committing = pending.clone();
/// let writer = std::thread::spawn(move || committing.commit());
/// // ...while the next block reads its writes.
/// let next = db.begin_session_on_pending(&pending)?;
/// assert_eq!(next.read(&[1; 32])?, Some(vec![1]));
/// next.write([2; 32], Some(vec![2]));
/// let committed = writer.join().expect("no panic")?;
/// assert_eq!(committed.witness().verify_update(&committed.prev_root())?, committed.root());
/// assert_eq!(next.prev_root()?, committed.root());
/// let out = next.commit_and_prove()?;
/// assert_eq!(db.root()?, out.root);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Pending {
    node: Arc<PendingNode>,
}

struct PendingNode {
    /// The session, until its update runs; the update holds the lock.
    session: Mutex<Option<Session>>,
    /// Its overlay, once its update ran.
    done: OnceLock<Overlay>,
    /// What sessions on it read through while its update has not run; let
    /// go once it ran, so a pipeline does not keep its whole history.
    link: Mutex<Option<Link>>,
}

/// A pending session's place in its chain.
struct Link {
    /// Its writes, as a view's values.
    own: Unwritten,
    under: Under,
}

/// What a pending session builds on.
enum Under {
    Pending(Pending),
    /// A state whose root is known, pinned.
    Known(Base),
}

/// What a session builds on: a state whose root is known, or a pending one.
pub(super) enum Footing {
    Known(Base),
    Pending {
        parent: Pending,
        /// The writes of the pending sessions down to `below`, newest over.
        view: Unwritten,
        /// The newest state below them whose root is known, pinned.
        below: Base,
    },
}

impl Footing {
    /// The value of `key` before the session's own writes.
    pub(super) fn read(&self, shared: &Shared, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        match self {
            Footing::Known(base) => base.read(shared, key),
            Footing::Pending { view, below, .. } => {
                shared.store.check_usable()?;
                match view.values.get(key) {
                    Some(value) => Ok(value.as_ref().map(|(_, v)| v.to_vec())),
                    None => below.read(shared, key),
                }
            }
        }
    }

    /// The base whose root is known: a pending parent's update runs first
    /// if it has not.
    pub(super) fn resolve(&self) -> Result<Resolved<'_>, Error> {
        match self {
            Footing::Known(base) => Ok(Resolved::Borrowed(base)),
            Footing::Pending { parent, .. } => Ok(Resolved::Owned(parent.finish()?.base())),
        }
    }

    /// Like [`Footing::resolve`], by value.
    pub(super) fn into_base(self) -> Result<Base, Error> {
        match self {
            Footing::Known(base) => Ok(base),
            Footing::Pending { parent, .. } => Ok(parent.finish()?.base()),
        }
    }
}

/// A footing's base, resolved.
pub(super) enum Resolved<'a> {
    Borrowed(&'a Base),
    Owned(Base),
}

impl std::ops::Deref for Resolved<'_> {
    type Target = Base;
    fn deref(&self) -> &Base {
        match self {
            Resolved::Borrowed(base) => base,
            Resolved::Owned(base) => base,
        }
    }
}

impl Pending {
    /// `session`'s writes, pending; fails with [`Error::ValueTooLarge`] for a
    /// value over [`crate::MAX_VALUE_LEN`] bytes, as its finish would.
    pub(super) fn new(session: Session) -> Result<Pending, Error> {
        let own = session.writes_as_view()?;
        let under = match &session.footing {
            Footing::Known(base) => Under::Known(base.duplicate()),
            Footing::Pending { parent, .. } => Under::Pending(parent.clone()),
        };
        Ok(Pending {
            node: Arc::new(PendingNode {
                session: Mutex::new(Some(session)),
                done: OnceLock::new(),
                link: Mutex::new(Some(Link { own, under })),
            }),
        })
    }

    /// Runs its trie update unless it ran, and returns it as an overlay: its
    /// root and witness, to commit (here or on any thread) and to build on.
    /// Calls after the first return the same overlay.
    ///
    /// Fails as [`Session::finish`] does; a pending session this one builds
    /// on that is not finished yet is finished first, and its failure is
    /// returned. After a failure, later calls (and sessions built on it) fail
    /// with [`Error::PendingFailed`].
    pub fn finish(&self) -> Result<Overlay, Error> {
        self.run(|session| Ok(session.finish()?.into_overlay()))
    }

    /// Makes it durable, after the pending sessions and overlays it builds
    /// on (running their updates and its own unless they ran), and returns
    /// it as a committed overlay. If its update has not run and the state
    /// it builds on is committed by then (the state its session began on,
    /// or its pending parent's), the update overlaps the writes, as in
    /// [`Session::commit_and_prove`]: the way to commit a pipeline's block.
    ///
    /// Fails as [`Pending::finish`] and [`Overlay::commit`] do. On an
    /// uncommitted parent, a failed commit leaves its overlay, which a later
    /// call commits again; on a committed state the update and the commit
    /// are one step, and its failure fails later calls with
    /// [`Error::PendingFailed`].
    pub fn commit(&self) -> Result<Overlay, Error> {
        // Its writes, for the overlay a commit makes to read its state.
        let own = self.node.link.lock().as_ref().map(|l| l.own.clone());
        let overlay = self.run(|session| session.finish_committing(own.unwrap_or_default()))?;
        overlay.commit()?;
        Ok(overlay)
    }

    /// Turns its session into its overlay with `how`, unless that was done.
    fn run(&self, how: impl FnOnce(Session) -> Result<Overlay, Error>) -> Result<Overlay, Error> {
        let mut session = self.node.session.lock();
        if let Some(overlay) = self.node.done.get() {
            return Ok(overlay.clone());
        }
        // The link goes after the overlay is set, so a session beginning
        // meanwhile finds one or the other (neither: `how` failed, or
        // panicked).
        let _unlink = Unlink(&self.node.link);
        let result = how(session.take().ok_or(Error::PendingFailed)?);
        result.map(|o| self.node.done.get_or_init(|| o).clone())
    }

    /// What a session on it builds on: the writes of the pending sessions
    /// down to the newest state whose root is known, over that state. Does
    /// not wait for an update.
    pub(super) fn footing(&self) -> Result<Footing, Error> {
        if let Some(overlay) = self.node.done.get() {
            return Ok(Footing::Known(overlay.base()));
        }
        let mut views = Vec::new();
        let mut link = self.clone();
        let below = loop {
            if let Some(overlay) = link.node.done.get() {
                break overlay.base();
            }
            let next = {
                let guard = link.node.link.lock();
                let Some(Link { own, under }) = &*guard else {
                    match link.node.done.get() {
                        Some(overlay) => break overlay.base(),
                        None => return Err(Error::PendingFailed),
                    }
                };
                views.push(own.clone());
                match under {
                    Under::Pending(parent) => parent.clone(),
                    Under::Known(base) => break base.duplicate(),
                }
            };
            link = next;
        };
        let mut view = Unwritten::default();
        for own in views.iter().rev() {
            view.extend(own);
        }
        Ok(Footing::Pending {
            parent: self.clone(),
            view,
            below,
        })
    }
}

/// Lets go of a pending session's link when dropped.
struct Unlink<'a>(&'a Mutex<Option<Link>>);

impl Drop for Unlink<'_> {
    fn drop(&mut self) {
        self.0.lock().take();
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match (self.node.done.get(), self.node.link.try_lock().as_deref()) {
            (Some(_), _) => "finished",
            (None, Some(Some(_))) => "waiting",
            (None, Some(None)) => "failed",
            (None, None) => "busy",
        };
        f.debug_struct("Pending")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}
