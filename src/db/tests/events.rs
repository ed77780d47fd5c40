//! What an operator reads: the `tracing` events open, commits, folds and the
//! snapshots' budget emit.

use std::fmt::Debug;
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::{span, Event, Metadata};

use super::super::prefetch::Hint;
use super::overwrite;
use crate::{Db, Options};

thread_local! {
    /// The events of this thread while a [`during`] runs on it.
    static SEEN: std::cell::RefCell<Option<Vec<String>>> = const { std::cell::RefCell::new(None) };
}

/// The test binary's subscriber: every event, as "LEVEL message", to the
/// emitting thread's [`SEEN`] if a [`during`] runs there. Global, not a
/// thread's default: a callsite another test's thread registers while no
/// thread-scoped subscriber is alive caches "never", and this thread's
/// events from it were lost.
struct Collect;

/// Runs `f` and returns the events it emitted on this thread.
fn during<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(Collect);
    });
    // Callsites registered before the collector cached "never".
    tracing::callsite::rebuild_interest_cache();
    SEEN.with(|seen| *seen.borrow_mut() = Some(Vec::new()));
    let out = f();
    let events = SEEN.with(|seen| seen.borrow_mut().take().unwrap_or_default());
    (out, events)
}

impl tracing::Subscriber for Collect {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, event: &Event<'_>) {
        struct Message(String);
        impl Visit for Message {
            fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        let line = format!("{} {}", event.metadata().level(), message.0);
        SEEN.with(|seen| {
            if let Some(seen) = seen.borrow_mut().as_mut() {
                seen.push(line);
            }
        });
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

fn has(events: &[String], text: &str) -> bool {
    events.iter().any(|e| e.contains(text))
}

#[test]
fn open_folds_slow_commits_and_a_discarded_catalog_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new(dir.path())
        .fold_in_background(false)
        .catalog_fold_blocks(1)
        .slow_commit_threshold(Duration::ZERO);
    let (db, events) = during(|| Db::open(options.clone()).unwrap());
    assert!(has(&events, "INFO opened"), "{events:?}");
    let ((), events) = during(|| {
        for fill in 0..4 {
            overwrite(&db, fill);
        }
    });
    assert!(has(&events, "WARN slow commit"), "{events:?}");
    assert!(has(&events, "INFO catalog folded"), "{events:?}");
    drop(db);
    // Reopened without its catalog: open reads every block, and says so.
    std::fs::remove_file(dir.path().join("catalog")).unwrap();
    let (db, events) = during(|| Db::open(options.clone()).unwrap());
    assert!(has(&events, "WARN catalog missing"), "{events:?}");
    assert!(!db.metrics().opened_from_catalog);
    // Fast commits say nothing.
    drop(db);
    let options = options.slow_commit_threshold(Duration::from_secs(3600));
    let db = Db::open(options).unwrap();
    let ((), events) = during(|| overwrite(&db, 9));
    assert!(!has(&events, "slow commit"), "{events:?}");
}

#[test]
fn dropped_hints_and_expired_snapshots_are_logged_once_per_commit() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new(dir.path())
        .history(0)
        .snapshot_budget_mib(1)
        .prefetch_hints(10);
    let db = Db::open(options).unwrap();
    overwrite(&db, 0);
    let old = db.begin_session();
    let hints: Vec<Hint> = (0..1000u32)
        .map(|i| Hint {
            key: *blake3::hash(&i.to_le_bytes()).as_bytes(),
            bucket: true,
        })
        .collect();
    let ((), events) = during(|| {
        db.shared.prefetch(hints);
        for fill in 1..8 {
            overwrite(&db, fill);
        }
    });
    let dropped: Vec<_> = events
        .iter()
        .filter(|e| e.contains("hints dropped"))
        .collect();
    assert_eq!(dropped.len(), 1, "{events:?}");
    let expired: Vec<_> = events
        .iter()
        .filter(|e| e.contains("SnapshotTooOld"))
        .collect();
    assert_eq!(expired.len(), 1, "{events:?}");
    assert!(old.read(&[1; 32]).is_err());
}
