//! The history: the recent commits [`crate::Options::history`] keeps, and
//! the snapshots live sessions read. One mechanism serves both: each commit
//! keeps an [`Undo`], the old values of the keys it changed (a reverse log;
//! docs/architecture.md says why not old blocks), shared by the two.
//!
//! - The chain ([`Chain`]) of undos, newest last, links each retained root to
//!   the one before it. The value of a key `d` commits back is its value in
//!   the oldest of the newest `d` undos that names it, else its committed
//!   value. A rollback by `k` is an ordinary commit of those values for every
//!   key the newest `k` undos name, after which those undos are gone
//!   ([`back`]: reads, proofs and rollbacks at retained roots).
//! - The snapshots ([`Snapshots`]) keep the undos of commits after the
//!   oldest live session's base, pinned through [`Pin`] only.
//!
//! The store keeps a record per commit (the undo, or how many undos a
//! rollback dropped); open replays them ([`Replay`]). Owns the
//! records' layout, the chain, the window and the pins; knows nothing of
//! blocks, and of pages only the top ones an undo keeps as they were.

mod back;
mod chain;
mod snapshots;
mod undo;

pub(super) use chain::{Chain, Replay, Window};
pub(super) use snapshots::{Head, Pin, Snapshots};
pub(super) use undo::{rollback_record, Undo, KEPT_PAGE_LEVEL};
