//! Restore: a new database from chunks of a state whose root the node trusts,
//! sent by peers it does not.
//!
//! Each chunk is verified against the root before anything of it is stored,
//! then committed to a database in a build directory beside the path. A
//! small progress file, replaced atomically after each commit, records the
//! root and where the next chunk starts. A kill between the commit and the
//! progress write leaves the progress one chunk behind; applying that chunk
//! again writes the same values, so resuming from the progress is always
//! right. The database moves to the path only when the finished state's root
//! matches (as with [`Db::import`]).

use super::build_dir::BuildDir;
use super::{Db, Options, Reads};
use crate::io::Dir;
use crate::trie::{KeyPath, Node};
use crate::{Chunk, Error};

const PROGRESS: &str = "progress";
const MAGIC: &[u8; 8] = b"ptrestor";
/// Magic, root, tag and next start, checksum.
const PROGRESS_LEN: usize = 8 + 32 + 1 + 32 + 8;

/// A restore in progress: feed it chunks in order with [`Restore::apply`],
/// then [`Restore::finish`] it.
pub struct Restore {
    db: Db,
    build_dir: BuildDir,
    /// The build directory, for the progress file.
    progress: Dir,
    options: Options,
    root: Node,
    /// Where the next chunk starts; `None` when the state is complete.
    next: Option<KeyPath>,
}

impl Db {
    /// Starts (or, after a kill, resumes) building a database at
    /// `options.path` from chunks of the state whose root is `root`, as
    /// [`Db::export`] makes them.
    ///
    /// The path must not exist or be an empty directory
    /// ([`Error::DirectoryNotEmpty`] otherwise). The work lives in
    /// `<path>.restoring` until [`Restore::finish`]: calling `restore` again
    /// with the same path and root resumes it at [`Restore::next_start`];
    /// with another root, it starts over. A second restore to the same path
    /// at once fails with [`Error::Locked`]. A peer whose committed root is
    /// still `root` makes the chunks from there with [`Db::export_from`].
    pub fn restore(options: Options, root: Node) -> Result<Restore, Error> {
        // Before anything: a resume that fails to open starts over, which
        // would throw away the work for an option out of range.
        options.validate()?;
        let build_dir = BuildDir::lock(&options.path, "restoring")?;
        // The chunks' commits are no versions anyone rolls back to.
        let db_options = Options {
            path: build_dir.db_path(),
            history: 0,
            ..options.clone()
        };
        let progress = Dir::new(build_dir.dir());
        #[cfg(any(test, feature = "fault-injection"))]
        let progress = progress.with_faults(options.faults.clone());
        let resumed = read_progress(&progress)
            .filter(|(r, _)| *r == root && build_dir.db_path().is_dir())
            .and_then(|(_, next)| Some((Db::open(db_options.clone()).ok()?, next)));
        let (db, next) = match resumed {
            Some(resumed) => resumed,
            // Nothing to resume, another root, or work that does not open:
            // start over.
            None => {
                build_dir.clear()?;
                let db = Db::open(db_options)?;
                let next = Some([0; 32]);
                write_progress(&progress, &root, next.as_ref())?;
                (db, next)
            }
        };
        Ok(Restore {
            db,
            build_dir,
            progress,
            options,
            root,
            next,
        })
    }
}

impl Restore {
    /// Where the next chunk must start; `None` when the state is complete.
    pub fn next_start(&self) -> Option<KeyPath> {
        self.next
    }

    /// The root being restored.
    pub fn root(&self) -> Node {
        self.root
    }

    /// Verifies `chunk` against the root and that it starts at
    /// [`Restore::next_start`], then stores it, durably.
    ///
    /// A chunk refused ([`Error::ChunkOutOfOrder`], or any error of
    /// [`Chunk::verify`]) stores nothing; the chunks applied before stay, and
    /// the restore goes on with the right chunk. An I/O error may leave the
    /// chunk stored or not: call [`Db::restore`] again to resume.
    pub fn apply(&mut self, chunk: &Chunk) -> Result<(), Error> {
        if Some(*chunk.start()) != self.next {
            return Err(Error::ChunkOutOfOrder {
                expected: self.next,
            });
        }
        chunk.verify(&self.root)?;
        if !chunk.entries().is_empty() {
            let writes = chunk
                .entries()
                .iter()
                .map(|(k, v)| (*k, Some(v.clone())))
                .collect();
            let shared = &self.db.shared;
            shared.commit(shared.snapshots.head(), writes, Reads::default(), false)?;
        }
        write_progress(&self.progress, &self.root, chunk.end())?;
        self.next = chunk.end().copied();
        Ok(())
    }

    /// Checks the finished state's root, moves the database to the path and
    /// opens it there. Fails with [`Error::RestoreIncomplete`] before the last
    /// chunk (the restore stays resumable), and with [`Error::RootMismatch`]
    /// if the state built differs from the root, which verified chunks
    /// cannot cause (the next [`Db::restore`] then starts over).
    pub fn finish(self) -> Result<Db, Error> {
        if let Some(next_start) = self.next {
            return Err(Error::RestoreIncomplete { next_start });
        }
        if self.db.root()? != self.root {
            // Not worth resuming: the next restore starts over.
            let _ = self.progress.remove(PROGRESS);
            return Err(Error::RootMismatch);
        }
        drop(self.db);
        self.build_dir.publish()?;
        Db::open(self.options)
    }
}

/// The root and next start a restore recorded, if its progress file is whole.
fn read_progress(dir: &Dir) -> Option<(Node, Option<KeyPath>)> {
    let bytes = dir.read(PROGRESS).ok()??;
    let bytes = bytes.get(..PROGRESS_LEN)?;
    if &bytes[..8] != MAGIC {
        return None;
    }
    let (body, sum) = bytes.split_at(PROGRESS_LEN - 8);
    if twox_hash::XxHash3_64::oneshot(body).to_le_bytes() != sum {
        return None;
    }
    let root: Node = body[8..40].try_into().ok()?;
    let next: KeyPath = body[41..73].try_into().ok()?;
    match body[40] {
        0 => Some((root, None)),
        1 => Some((root, Some(next))),
        _ => None,
    }
}

/// Replaces the progress file durably: the old one or the new one survives
/// a crash, never a mix.
fn write_progress(dir: &Dir, root: &Node, next: Option<&KeyPath>) -> Result<(), Error> {
    let mut bytes = Vec::with_capacity(PROGRESS_LEN);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(root);
    bytes.push(next.is_some() as u8);
    bytes.extend_from_slice(next.unwrap_or(&[0; 32]));
    let sum = twox_hash::XxHash3_64::oneshot(&bytes);
    bytes.extend_from_slice(&sum.to_le_bytes());
    dir.write_whole(PROGRESS, &bytes)
}
