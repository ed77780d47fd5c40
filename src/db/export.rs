//! Export: the committed state as chunks a peer can check against the root.
//!
//! The cut points and their proofs are taken at once, under the writer lock,
//! so every chunk proves against the root committed when the export began;
//! the entries are read afterwards at that pinned root while commits go on.

use super::history::Pin;
use super::range::RangeIter;
use super::{Db, Shared};
use crate::trie::proof::PathProof;
use crate::trie::KeyPath;
use crate::{Chunk, Error, MultiProof};

/// The chunks of one export, in key order.
struct Export {
    entries: RangeIter,
    /// Where each chunk starts: the zero key, then present keys.
    starts: Vec<KeyPath>,
    /// The path of each start.
    paths: Vec<PathProof>,
    next: usize,
}

impl Export {
    fn chunk(&mut self, i: usize) -> Result<Chunk, Error> {
        let start = self.starts[i];
        let end = self.starts.get(i + 1).copied();
        let mut entries = Vec::new();
        self.entries.take_below(end.as_ref(), &mut entries)?;
        let bounds = std::iter::once((start, self.paths[i].clone()))
            .chain(end.map(|end| (end, self.paths[i + 1].clone())));
        let proof = MultiProof::from_path_proofs(bounds)?;
        Chunk::new(start, end, entries, &proof)
    }
}

impl Iterator for Export {
    type Item = Result<Chunk, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let i = self.next;
        if i == self.starts.len() {
            return None;
        }
        let chunk = self.chunk(i);
        // One error ends the export.
        self.next = if chunk.is_ok() {
            i + 1
        } else {
            self.starts.len()
        };
        Some(chunk)
    }
}

impl Db {
    /// The state at the committed root as consecutive chunks of about
    /// `chunk_bytes` of keys and values each, in key order. Each chunk
    /// carries its range and the proof that its entries are exactly the keys
    /// of that range ([`Chunk::verify`]); a second database rebuilds the
    /// state from them with [`Db::restore`].
    ///
    /// Where the chunks are cut, and the proofs of those cuts, are taken when
    /// the export begins. Commits are held back only while the proof (one
    /// multi-proof of every cut) is taken, from blocks loaded before: 49 ms
    /// for 5137 cuts of a 2^27-key state. The entries are read as the
    /// iterator goes, at that root, while commits land: the values they
    /// overwrite stay in RAM until the iterator is dropped, as for a
    /// session. Cuts fall at bucket boundaries and sizes are estimated from a
    /// sample, so chunks vary in size; a value larger than `chunk_bytes`
    /// gets a chunk of its own or shares one.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = pagetrie::Db::open(pagetrie::Options::new(dir.path().join("a")))?;
    /// let session = db.begin_session();
    /// for i in 0..1000u32 {
    ///     session.write(pagetrie::trie::hash_value(&i.to_le_bytes()), Some(vec![7; 40]));
    /// }
    /// session.commit()?;
    /// let root = db.root()?;
    /// let mut restore = pagetrie::Db::restore(pagetrie::Options::new(dir.path().join("b")), root)?;
    /// for chunk in db.export(16 << 10)? {
    ///     let bytes = chunk?.encode(); // sent to the other node
    ///     restore.apply(&pagetrie::Chunk::decode(&bytes)?)?;
    /// }
    /// assert_eq!(restore.finish()?.root()?, root);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn export(
        &self,
        chunk_bytes: usize,
    ) -> Result<impl Iterator<Item = Result<Chunk, Error>> + '_, Error> {
        self.export_from(&[0; 32], chunk_bytes)
    }

    /// The chunks of [`Db::export`] from `start` on: what a restore resumed
    /// at [`Restore::next_start`](crate::Restore::next_start) asks a peer
    /// for, when the peer's committed root is still the one restored. The
    /// chunks after the first are cut where a whole export cuts them.
    ///
    /// `start` must be the zero key or a key present at the committed root,
    /// as every chunk boundary is ([`Error::MalformedChunk`] otherwise).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use pagetrie::{Chunk, Db, Options};
    ///
    /// let db = Db::open(Options::new(dir.path().join("a")))?;
    /// let session = db.begin_session();
    /// for i in 0..2000u32 {
    ///     session.write(pagetrie::trie::hash_value(&i.to_le_bytes()), Some(vec![7; 40]));
    /// }
    /// session.commit()?;
    /// let chunks: Vec<Chunk> = db.export(16 << 10)?.collect::<Result<_, _>>()?;
    /// let target = Options::new(dir.path().join("b"));
    /// let mut restore = Db::restore(target.clone(), db.root()?)?;
    /// restore.apply(&chunks[0])?;
    /// drop(restore); // the node stops here, and later goes on:
    /// let mut restore = Db::restore(target, db.root()?)?;
    /// let next = restore.next_start().expect("more to come");
    /// for chunk in db.export_from(&next, 16 << 10)? {
    ///     restore.apply(&chunk?)?;
    /// }
    /// assert_eq!(restore.finish()?.root()?, db.root()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn export_from(
        &self,
        start: &KeyPath,
        chunk_bytes: usize,
    ) -> Result<impl Iterator<Item = Result<Chunk, Error>> + '_, Error> {
        let shared = &self.shared;
        shared.store.check_usable()?;
        let start = *start;
        let cuts = |shared: &Shared| -> Result<Vec<KeyPath>, Error> {
            // The whole export's cuts, so that both cut the same state alike.
            let mut starts = vec![start];
            let all = shared.values.cut_points(chunk_bytes)?;
            starts.extend(all.into_iter().filter(|cut| *cut > start));
            Ok(starts)
        };
        // The cuts' paths into the caches before holding commits back.
        let early = shared.snapshots.head();
        let tentative = cuts(shared)?;
        shared.load_paths(&tentative);
        let (pin, head, starts, proof) = {
            let _writer = shared.writer.lock();
            let (pin, head) = Pin::head(&shared.snapshots);
            if start != [0; 32] && shared.values.get(&start)?.is_none() {
                return Err(Error::MalformedChunk(
                    "an export starts at the zero key or at a present key",
                ));
            }
            let starts = if head == early {
                tentative
            } else {
                cuts(shared)?
            };
            let proof = shared.prove_locked(head, &starts, None)?;
            (pin, head, starts, proof)
        };
        // Each start's path: starts and terminals both ascend.
        let terminal_paths = proof.paths()?;
        let mut paths = Vec::with_capacity(starts.len());
        let mut t = 0;
        for start in &starts {
            while proof
                .terminals
                .get(t)
                .is_some_and(|term| !term.covers(start))
            {
                t += 1;
            }
            let path = terminal_paths
                .get(t)
                .ok_or(Error::Internal("an export cut outside its proof"))?;
            paths.push(path.clone());
        }
        let entries = RangeIter::pinned(shared, pin, head.seqno, start, None);
        Ok(Export {
            entries,
            starts,
            paths,
            next: 0,
        })
    }
}
