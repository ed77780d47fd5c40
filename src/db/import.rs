//! Bulk import: a new database from a stream of entries in any order.
//!
//! The entries are first set aside in 256 spill files by their key's first byte
//! (a file too big for the memory budget is split again by the next byte), then
//! each file is sorted in RAM and committed in key order, in chunks as large as
//! the budget allows. Committing ascending key ranges writes every bucket and
//! page about once, instead of once per block.
//!
//! Crash safety comes from building in a build directory beside the target
//! and renaming it into place at the end ([`BuildDir`]): a kill leaves either
//! no database at the path or a complete one (a stale build directory is
//! cleared by the next import).

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use super::build_dir::BuildDir;
use super::{Db, Options, Reads};
use crate::trie::KeyPath;
use crate::Error;

/// How far an import has come, reported through its callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImportProgress {
    /// Entries read from the input and set aside so far.
    Reading {
        /// Entries read.
        entries: u64,
    },
    /// Entries committed to the new database so far, of all that were read.
    Writing {
        /// Entries committed.
        entries: u64,
        /// Entries read in all.
        total: u64,
    },
}

type Pair = (KeyPath, Vec<u8>);

/// Spill files: 256 by key byte.
const FANOUT: usize = 256;
/// Reading progress is reported this often.
const REPORT_EVERY: u64 = 1 << 16;

impl Db {
    /// Builds a new database at `options.path` from `entries` (any order, each key
    /// once) and opens it. Much faster than committing the entries block by block:
    /// they are sorted within [`Options::import_memory_mib`] of RAM (plus the
    /// caches) and written in key order.
    ///
    /// The path must not exist or be an empty directory
    /// ([`Error::DirectoryNotEmpty`] otherwise). A duplicate key fails the import
    /// with [`Error::DuplicateKey`]; a failed or killed import leaves nothing at
    /// the path.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("db");
    /// use pagetrie::{Db, Options};
    ///
    /// let accounts = (0u64..10_000).map(|i| {
    ///     (pagetrie::trie::hash_value(&i.to_be_bytes()), 1000u64.to_be_bytes().to_vec())
    /// });
    /// let db = Db::import(Options::new(&path), accounts, |_progress| {})?;
    /// assert_eq!(db.metrics().keys_stored, 10_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn import(
        options: Options,
        entries: impl IntoIterator<Item = Pair>,
        mut progress: impl FnMut(ImportProgress),
    ) -> Result<Db, Error> {
        options.validate()?;
        let build_dir = BuildDir::lock(&options.path, "importing")?;
        build_dir.clear()?;
        if let Err(e) = build(&options, &build_dir, entries, &mut progress) {
            build_dir.discard();
            return Err(e);
        }
        build_dir.publish()?;
        Db::open(options)
    }
}

fn build(
    options: &Options,
    build_dir: &BuildDir,
    entries: impl IntoIterator<Item = Pair>,
    progress: &mut impl FnMut(ImportProgress),
) -> Result<(), Error> {
    let spill = build_dir.dir().join("spill");
    fs::create_dir_all(&spill)?;
    let total = partition(entries.into_iter().map(Ok), &spill, 0, |n| {
        if n.is_multiple_of(REPORT_EVERY) {
            progress(ImportProgress::Reading { entries: n })
        }
    })?;
    progress(ImportProgress::Reading { entries: total });

    // The build's commits are no versions anyone rolls back to.
    // Its chunk commits are long by design: none is logged as slow.
    let db = Db::open(Options {
        path: build_dir.db_path(),
        history: 0,
        slow_commit_threshold: std::time::Duration::MAX,
        ..options.clone()
    })?;
    let budget = super::options::mib_bytes(options.import_memory_mib) as u64;
    let mut chunk: Vec<Pair> = Vec::new();
    let mut chunk_bytes = 0u64;
    let mut written = 0u64;
    let mut commit = |chunk: &mut Vec<Pair>| -> Result<(), Error> {
        written += chunk.len() as u64;
        // Collected in place: the chunk's buffer becomes the writes'.
        let writes = std::mem::take(chunk)
            .into_iter()
            .map(|(k, v)| (k, Some(v)))
            .collect();
        let head = db.shared.snapshots.head();
        db.shared.commit(head, writes, Reads::default(), false)?;
        progress(ImportProgress::Writing {
            entries: written,
            total,
        });
        Ok(())
    };
    for_each_sorted(&spill, 0, budget, &mut |sorted| {
        for entry in sorted {
            chunk_bytes += entry_cost(&entry);
            chunk.push(entry);
            // The sorted file, the chunk and the commit's buckets and pages
            // share the budget.
            if chunk_bytes >= budget / 4 {
                commit(&mut chunk)?;
                chunk_bytes = 0;
            }
        }
        Ok(())
    })?;
    if !chunk.is_empty() {
        commit(&mut chunk)?;
    }
    drop(db);
    fs::remove_dir_all(&spill)?;
    Ok(())
}

/// RAM an entry takes while sorted and committed.
fn entry_cost(entry: &Pair) -> u64 {
    (std::mem::size_of::<Pair>() + entry.1.len()) as u64 + 64
}

/// Spills `entries` into `dir/00`..`dir/ff` by key byte `depth`; returns how many.
fn partition(
    entries: impl IntoIterator<Item = Result<Pair, Error>>,
    dir: &Path,
    depth: usize,
    mut counted: impl FnMut(u64),
) -> Result<u64, Error> {
    let mut files = (0..FANOUT)
        .map(|b| {
            Ok(BufWriter::with_capacity(
                1 << 16,
                File::create(dir.join(format!("{b:02x}")))?,
            ))
        })
        .collect::<io::Result<Vec<_>>>()?;
    let mut n = 0u64;
    for entry in entries {
        let (key, value) = entry?;
        crate::check_value_len(value.len())?;
        let file = &mut files[key[depth] as usize];
        file.write_all(&key)?;
        file.write_all(&(value.len() as u32).to_le_bytes())?;
        file.write_all(&value)?;
        n += 1;
        counted(n);
    }
    for file in files {
        file.into_inner().map_err(|e| e.into_error())?;
    }
    Ok(n)
}

/// Calls `f` with every spill file's entries in key order, splitting files larger
/// over a quarter of `budget` by the next key byte first.
fn for_each_sorted(
    dir: &Path,
    depth: usize,
    budget: u64,
    f: &mut impl FnMut(Vec<Pair>) -> Result<(), Error>,
) -> Result<(), Error> {
    for b in 0..FANOUT {
        let path = dir.join(format!("{b:02x}"));
        let len = fs::metadata(&path)?.len();
        if len > budget / 4 && depth + 1 == 32 {
            // Keys agreeing in 31 bytes: at most 256 are distinct, so a file this
            // big repeats one. Find it without loading the file.
            let mut seen = std::collections::HashSet::new();
            for entry in SpillReader::open(&path)? {
                let key = entry?.0;
                if !seen.insert(key) {
                    return Err(Error::DuplicateKey(key));
                }
            }
        }
        if len > budget / 4 && depth + 1 < 32 {
            let sub = dir.join(format!("{b:02x}.split"));
            fs::create_dir(&sub)?;
            let entries = SpillReader::open(&path)?.map(|e| e.map_err(Error::from));
            partition(entries, &sub, depth + 1, |_| {})?;
            fs::remove_file(&path)?;
            for_each_sorted(&sub, depth + 1, budget, f)?;
            fs::remove_dir_all(&sub)?;
            continue;
        }
        let mut entries = SpillReader::open(&path)?.collect::<Result<Vec<_>, _>>()?;
        fs::remove_file(&path)?;
        entries.sort_unstable_by_key(|e| e.0);
        if let Some(pair) = entries.windows(2).find(|p| p[0].0 == p[1].0) {
            return Err(Error::DuplicateKey(pair[0].0));
        }
        f(entries)?;
    }
    Ok(())
}

/// Entries read back from a spill file.
struct SpillReader(BufReader<File>);

impl SpillReader {
    fn open(path: &Path) -> io::Result<SpillReader> {
        Ok(SpillReader(BufReader::with_capacity(
            1 << 16,
            File::open(path)?,
        )))
    }
}

impl Iterator for SpillReader {
    type Item = io::Result<Pair>;

    fn next(&mut self) -> Option<io::Result<Pair>> {
        let mut key = [0u8; 32];
        match self.0.read_exact(&mut key) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return None,
            Err(e) => return Some(Err(e)),
            Ok(()) => {}
        }
        let mut len = [0u8; 4];
        let mut read = || -> io::Result<Pair> {
            self.0.read_exact(&mut len)?;
            let len = u32::from_le_bytes(len) as usize;
            // Written by this import, so never over the limit unless damaged:
            // checked before the allocation.
            if crate::check_value_len(len).is_err() {
                return Err(io::Error::other(
                    "a value over the limit in an import spill",
                ));
            }
            let mut value = vec![0u8; len];
            self.0.read_exact(&mut value)?;
            Ok((key, value))
        };
        Some(read())
    }
}
