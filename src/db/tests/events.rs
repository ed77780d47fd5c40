//! What an operator reads: the `tracing` events open, commits, folds and the
//! snapshots' budget emit.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{span, Event, Metadata};

use super::super::prefetch::Hint;
use crate::{Db, Options};

/// Every event on the thread it is the default on, as "LEVEL message".
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<String>>>);

impl Collect {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock())
    }

    /// Runs `f` with this collector as the thread's subscriber, and returns
    /// the events it saw.
    fn during<T>(&self, f: impl FnOnce() -> T) -> (T, Vec<String>) {
        let out = tracing::subscriber::with_default(self.clone(), f);
        (out, self.take())
    }
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
        self.0.lock().push(line);
    }
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

fn has(events: &[String], text: &str) -> bool {
    events.iter().any(|e| e.contains(text))
}

fn commit(db: &Db, fill: u8) {
    let session = db.begin_session();
    for i in 0..16u8 {
        session.write([i; 32], Some(vec![fill; 100]));
    }
    session.commit().unwrap();
}

#[test]
fn open_folds_slow_commits_and_a_discarded_catalog_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let log = Collect::default();
    let options = Options::new(dir.path())
        .fold_in_background(false)
        .catalog_fold_blocks(1)
        .slow_commit_threshold(Duration::ZERO);
    let (db, events) = log.during(|| Db::open(options.clone()).unwrap());
    assert!(has(&events, "INFO opened"), "{events:?}");
    let ((), events) = log.during(|| {
        for fill in 0..4 {
            commit(&db, fill);
        }
    });
    assert!(has(&events, "WARN slow commit"), "{events:?}");
    assert!(has(&events, "INFO catalog folded"), "{events:?}");
    drop(db);
    // Reopened without its catalog: open reads every block, and says so.
    std::fs::remove_file(dir.path().join("catalog")).unwrap();
    let (db, events) = log.during(|| Db::open(options.clone()).unwrap());
    assert!(has(&events, "WARN catalog missing"), "{events:?}");
    assert!(!db.metrics().opened_from_catalog);
    // Fast commits say nothing.
    drop(db);
    let options = options.slow_commit_threshold(Duration::from_secs(3600));
    let db = Db::open(options).unwrap();
    let ((), events) = log.during(|| commit(&db, 9));
    assert!(!has(&events, "slow commit"), "{events:?}");
}

#[test]
fn dropped_hints_and_expired_snapshots_are_logged_once_per_commit() {
    let dir = tempfile::tempdir().unwrap();
    let log = Collect::default();
    let options = Options::new(dir.path())
        .history(0)
        .snapshot_budget_mib(1)
        .prefetch_hints(10);
    let db = Db::open(options).unwrap();
    let big = |fill: u8| {
        let session = db.begin_session();
        for i in 0..64u8 {
            session.write([i; 32], Some(vec![fill; 4096]));
        }
        session.commit().unwrap();
    };
    big(0);
    let old = db.begin_session();
    let hints: Vec<Hint> = (0..1000u32)
        .map(|i| Hint {
            key: *blake3::hash(&i.to_le_bytes()).as_bytes(),
            bucket: true,
        })
        .collect();
    let ((), events) = log.during(|| {
        db.shared.prefetch(hints);
        for fill in 1..8 {
            big(fill);
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
