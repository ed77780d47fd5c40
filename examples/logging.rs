//! What pagetrie tells a node's operator, through `tracing`: a subscriber
//! prints the events of an open, a few commits with a catalog fold, a slow
//! commit, dropped prefetch hints and a reopen without the catalog.
//!
//! ```text
//! cargo run --release --example logging
//! RUST_LOG=pagetrie=debug cargo run --release --example logging
//! ```

use std::time::Duration;

use pagetrie::{Db, Options};
use tracing_subscriber::EnvFilter;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The node's own subscriber; pagetrie only emits events. `RUST_LOG`
    // filters them (info and above by default).
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_target(true)
        .init();

    let dir = tempfile::tempdir()?;
    let options = Options::new(dir.path())
        // Folds after every commit's log, so one shows up at once.
        .catalog_fold_blocks(1)
        .fold_in_background(false)
        .prefetch_hints(16)
        // Every commit counts as slow here, to show the warning.
        .slow_commit_threshold(Duration::ZERO);
    let db = Db::open(options.clone())?;
    for block in 0..3u32 {
        let session = db.begin_session();
        // More hints than the queue takes: the rest are dropped, and the
        // next commit says how many.
        for i in 0..100u32 {
            session.warm_up(blake3::hash(&(block * 100 + i).to_le_bytes()).as_bytes());
        }
        for i in 0..1000u32 {
            let key = *blake3::hash(&(block * 1000 + i).to_le_bytes()).as_bytes();
            session.write(key, Some(i.to_le_bytes().to_vec()));
        }
        session.commit()?;
    }
    drop(db);
    // Without its catalog, the next open reads every block and warns.
    std::fs::remove_file(dir.path().join("catalog"))?;
    let db = Db::open(options)?;
    let root: String = db.root()?.iter().map(|b| format!("{b:02x}")).collect();
    println!("reopened at root {root}");
    Ok(())
}
