//! The crate's one error type.

use core::fmt;

use crate::trie::KeyPath;

/// Everything that can go wrong in pagetrie.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A key path occurred twice where each must be unique.
    DuplicateKey(KeyPath),
    /// Input that must be sorted by key path was not.
    Unsorted,
    /// A proof does not hash to the root it was checked against.
    RootMismatch,
    /// A proof does not reach this key's path, so it says nothing about the key.
    KeyNotCovered(KeyPath),
    /// A proven value differs from the expected one.
    ValueMismatch(KeyPath),
    /// Path proofs disagree where their paths overlap.
    InconsistentProofs,
    /// Proof bytes or structure that no honest prover produces.
    MalformedProof(&'static str),
    /// A state-sync chunk that no honest exporter produces: entries out of
    /// order or outside its range, or a range cut where chunks are not.
    MalformedChunk(&'static str),
    /// A restore was given a chunk that does not start where the state
    /// restored so far ends.
    ChunkOutOfOrder {
        /// Where the next chunk must start; `None` when the state is complete.
        expected: Option<KeyPath>,
    },
    /// A restore was finished before its last chunk was applied.
    RestoreIncomplete {
        /// Where the next chunk must start.
        next_start: KeyPath,
    },
    /// A value longer than the store accepts ([`crate::MAX_VALUE_LEN`] bytes); the
    /// field is its length.
    ValueTooLarge(usize),
    /// Stored data failed a check (checksum, magic, bounds).
    Corrupt {
        /// The check that failed.
        what: &'static str,
        /// The file, where known: `pages`, `buckets`, `overflow`, `meta`,
        /// `slots0` or `slots1`.
        file: Option<&'static str>,
        /// The 4 KiB block of that file, where known.
        block: Option<u64>,
    },
    /// The crate broke one of its own rules; nothing was committed (a commit
    /// refused this way may have written blocks to free slots, which nothing
    /// uses). Please report it.
    Internal(&'static str),
    /// A session was committed after another commit moved the root it started
    /// from; its writes were not applied.
    StaleSession,
    /// A session, overlay or iterator began on a commit whose replaced
    /// values were dropped to keep the RAM that snapshots hold within
    /// [`crate::Options::snapshot_budget_mib`]: it can no longer read its
    /// state. Nothing changed; begin a new one on a newer root.
    SnapshotTooOld,
    /// An operation that reads the committed state without holding commits
    /// back ([`crate::Db::prove_at`]) was spoiled by a commit landing during
    /// each of its attempts. Nothing changed; try again (between commits,
    /// for one that takes long).
    Busy,
    /// Another handle holds the database directory.
    Locked,
    /// A root that is not among the retained ones ([`crate::Db::roots`]):
    /// older than the history window, rolled back, or never committed.
    UnknownRoot,
    /// [`crate::Db::rollback`] was asked to go further back than the history
    /// holds; nothing was changed.
    RollbackTooFar {
        /// The commits asked for.
        requested: usize,
        /// The commits the history holds.
        retained: usize,
    },
    /// The database was written in a format this build does not read (format 2
    /// wrote every block twice, through a log; format 3 writes copy-on-write).
    /// Nothing was changed: build the database again (for example with
    /// [`crate::Db::import`] from the node's own state).
    UnsupportedFormat {
        /// The format version the database's meta record names.
        found: u32,
        /// The format version this build reads and writes.
        supported: u32,
    },
    /// An [`crate::Options`] value out of range; nothing was opened.
    InvalidOptions {
        /// The option, as its builder method is named.
        field: &'static str,
        /// What is wrong with its value.
        reason: &'static str,
    },
    /// [`crate::Db::import`] was pointed at a path that already holds something.
    DirectoryNotEmpty,
    /// An earlier write failed; the database refuses all operations until reopened,
    /// and reopening yields its last durable state.
    Poisoned,
    /// An I/O error: what was being done, on which file, and the operating
    /// system's error ([`core::error::Error::source`] returns it). From a
    /// commit: the commit was not applied, and reopening finds the state
    /// before it.
    #[cfg(feature = "std")]
    Io {
        /// What was being done: "reading", "writing", "syncing", ...
        doing: &'static str,
        /// The file's name in the database directory, or the path, where known.
        file: Option<alloc::string::String>,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A commit failed after it became durable (the inner error says how):
    /// reopening finds it applied. The handle is poisoned.
    #[cfg(feature = "std")]
    CommitDurable(alloc::boxed::Box<Error>),
    /// A commit's slot map write failed, and erasing it failed too: reopening
    /// finds either the state before the commit or after it (compare
    /// [`crate::Db::root`]). The handle is poisoned. Needs two failures of the
    /// disk in a row; a full disk alone never causes it.
    #[cfg(feature = "std")]
    CommitInDoubt(alloc::boxed::Box<Error>),
    /// An uncommitted overlay this commit builds on, committed first, failed:
    /// this commit's own writes were not applied, nor those of any overlay
    /// between them. `source` is that ancestor's error and says what became
    /// of the ancestor ([`Error::CommitDurable`]: it is durable;
    /// [`Error::CommitInDoubt`]: it may be; anything else: it was not
    /// applied). A refusal the two share passes through unwrapped:
    /// [`Error::StaleSession`] (another fork won) and [`Error::Poisoned`].
    #[cfg(feature = "std")]
    AncestorFailed {
        /// The root of the overlay whose commit failed.
        root: crate::trie::Node,
        /// Its error.
        source: alloc::boxed::Box<Error>,
    },
    /// The trie update or commit of the pending session
    /// ([`crate::Pending`]) this builds on failed earlier; the call that ran
    /// it got its error, which says whether that commit is durable
    /// ([`Error::CommitDurable`], [`Error::CommitInDoubt`]). Nothing changed
    /// in this call; begin a new session on a known state.
    PendingFailed,
}

#[cfg(feature = "std")]
impl From<std::io::Error> for Error {
    fn from(source: std::io::Error) -> Error {
        Error::Io {
            doing: "I/O",
            file: None,
            source,
        }
    }
}

impl Error {
    /// A failed check on stored data, before its place is known.
    #[cfg(feature = "std")]
    pub(crate) const fn corrupt(what: &'static str) -> Error {
        Error::Corrupt {
            what,
            file: None,
            block: None,
        }
    }

    /// `self`, placed at `block` of `file` if it is corruption not yet placed.
    #[cfg(feature = "std")]
    pub(crate) fn at(self, file: &'static str, block: u64) -> Error {
        match self {
            Error::Corrupt {
                what,
                file: None,
                block: None,
            } => Error::Corrupt {
                what,
                file: Some(file),
                block: Some(block),
            },
            other => other,
        }
    }

    /// `self`, an error of committing the ancestor whose root is `root`, as
    /// its descendant reports it.
    #[cfg(feature = "std")]
    pub(crate) fn of_ancestor(self, root: crate::trie::Node) -> Error {
        match self {
            Error::StaleSession | Error::Poisoned | Error::AncestorFailed { .. } => self,
            source => Error::AncestorFailed {
                root,
                source: alloc::boxed::Box::new(source),
            },
        }
    }

    /// An I/O error while `doing` something to `file`.
    #[cfg(feature = "std")]
    pub(crate) fn io(doing: &'static str, file: &str, source: std::io::Error) -> Error {
        Error::Io {
            doing,
            file: Some(file.into()),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::DuplicateKey(k) => write!(f, "duplicate key path {}", Hex(k)),
            Error::Unsorted => f.write_str("input not sorted by key path"),
            Error::RootMismatch => f.write_str("proof does not match the root"),
            Error::KeyNotCovered(k) => write!(f, "proof does not cover key path {}", Hex(k)),
            Error::ValueMismatch(k) => write!(f, "proven value differs for key path {}", Hex(k)),
            Error::InconsistentProofs => f.write_str("path proofs disagree where they overlap"),
            Error::MalformedProof(why) => write!(f, "malformed proof: {why}"),
            Error::MalformedChunk(why) => write!(f, "malformed state-sync chunk: {why}"),
            Error::ChunkOutOfOrder {
                expected: Some(start),
            } => write!(f, "the restore needs a chunk starting at {}", Hex(start)),
            Error::ChunkOutOfOrder { expected: None } => {
                f.write_str("the restore is complete and takes no more chunks")
            }
            Error::RestoreIncomplete { next_start } => write!(
                f,
                "the restore is not complete: the next chunk starts at {}",
                Hex(next_start)
            ),
            Error::ValueTooLarge(len) => write!(
                f,
                "value of {len} bytes exceeds the limit of {} bytes",
                crate::MAX_VALUE_LEN
            ),
            Error::Corrupt { what, file, block } => {
                f.write_str("corrupt data")?;
                if let Some(file) = file {
                    write!(f, " in {file}")?;
                }
                if let Some(block) = block {
                    write!(f, " at block {block}")?;
                }
                write!(f, ": {what}")
            }
            Error::Internal(what) => write!(f, "internal error (please report): {what}"),
            Error::StaleSession => f.write_str(
                "session is stale: another commit landed after it began; begin a new session",
            ),
            Error::SnapshotTooOld => f.write_str(
                "snapshot too old: the values it needs were dropped to keep snapshots within their RAM budget; begin a new session",
            ),
            Error::Busy => f.write_str(
                "commits landed during every attempt; nothing changed: try again",
            ),
            Error::Locked => f.write_str("database directory is in use by another handle"),
            Error::UnknownRoot => {
                f.write_str("root is not retained: older than the history window, rolled back, or never committed")
            }
            Error::RollbackTooFar {
                requested,
                retained,
            } => write!(
                f,
                "cannot roll back {requested} commits: the history holds {retained}; nothing was changed"
            ),
            Error::UnsupportedFormat { found, supported } => write!(
                f,
                "database format {found} is not supported (this build reads format {supported}); \
                 nothing was changed"
            ),
            Error::InvalidOptions { field, reason } => {
                write!(f, "option {field}: {reason}; nothing was opened")
            }
            Error::DirectoryNotEmpty => {
                f.write_str("import target exists and is not an empty directory")
            }
            Error::Poisoned => f.write_str("a write failed earlier; reopen the database"),
            Error::PendingFailed => f.write_str(
                "the pending session this builds on failed to finish earlier; begin a new session",
            ),
            #[cfg(feature = "std")]
            Error::Io {
                doing,
                file,
                source,
            } => match file {
                Some(file) => write!(f, "{doing} {file}: {source}"),
                None => write!(f, "{doing}: {source}"),
            },
            #[cfg(feature = "std")]
            Error::CommitDurable(e) => {
                write!(f, "the commit is durable, but then failed ({e}); reopen")
            }
            #[cfg(feature = "std")]
            Error::CommitInDoubt(e) => write!(
                f,
                "the commit failed ({e}) and could not be undone: reopen to learn if it was applied"
            ),
            #[cfg(feature = "std")]
            Error::AncestorFailed { root, source } => write!(
                f,
                "this block was not applied: committing the uncommitted overlay it builds on \
                 (root {}) failed first ({source})",
                Hex(root)
            ),
        }
    }
}

impl core::error::Error for Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            #[cfg(feature = "std")]
            Error::Io { source, .. } => Some(source),
            #[cfg(feature = "std")]
            Error::CommitDurable(e) | Error::CommitInDoubt(e) => Some(&**e),
            #[cfg(feature = "std")]
            Error::AncestorFailed { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}
