//! A pipeline of blocks: each block executes on the writes of the one before
//! (`Session::into_pending`) while that one's trie update and commit run on
//! another thread (`Pending::commit`). Checks each block's witness and that
//! the last root is the one the same blocks give committed one by one.
//!
//! `cargo run --release --example pipeline -- [--accounts N] [--blocks N] [--transfers N]`

use std::time::Instant;

use clap::Parser;
use pagetrie::trie::hash_value;
use pagetrie::{Db, Error, Options, Overlay, Pending, Session};

/// Blocks of transfers, pipelined, against the same blocks one by one.
#[derive(Parser, Debug)]
struct Args {
    /// Accounts in the database before the blocks.
    #[arg(long, default_value_t = 100_000)]
    accounts: u64,
    /// Blocks to run.
    #[arg(long, default_value_t = 20)]
    blocks: u64,
    /// Transfers in a block.
    #[arg(long, default_value_t = 5000)]
    transfers: u64,
}

fn key(i: u64) -> [u8; 32] {
    hash_value(&i.to_be_bytes())
}

/// Block `n`: `transfers` moves of one unit between accounts picked by a
/// fixed rule, so both runs execute the same blocks.
fn execute(session: &Session, n: u64, args: &Args) -> Result<(), Error> {
    for t in 0..args.transfers {
        let x = (n * args.transfers + t).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let (from, to) = (key(x % args.accounts), key((x >> 32) % args.accounts));
        let balance = |k| -> Result<u64, Error> {
            let v = session.read(k)?;
            Ok(v.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap_or([0; 8]))))
        };
        let (a, b) = (balance(&from)?, balance(&to)?);
        session.write(from, Some(a.wrapping_sub(1).to_le_bytes().to_vec()));
        let b = if from == to { a.wrapping_sub(1) } else { b };
        session.write(to, Some(b.wrapping_add(1).to_le_bytes().to_vec()));
    }
    Ok(())
}

/// A new database holding the accounts, each with a balance of 1000.
fn open(args: &Args) -> Result<(tempfile::TempDir, Db), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let accounts = (0..args.accounts).map(|i| (key(i), 1000u64.to_le_bytes().to_vec()));
    let db = Db::import(Options::new(dir.path().join("db")), accounts, |_| {})?;
    Ok((dir, db))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();

    // One by one: execute, then commit.
    let (_dir, db) = open(&args)?;
    let start = Instant::now();
    for n in 0..args.blocks {
        let session = db.begin_session();
        execute(&session, n, &args)?;
        session.commit_and_prove()?;
    }
    let one_by_one = start.elapsed();
    let expected = db.root()?;
    drop(db);

    // Pipelined: block n+1 executes while block n's root is computed and
    // written on another thread.
    let (_dir, db) = open(&args)?;
    let start = Instant::now();
    let mut parent: Option<Pending> = None;
    let mut committing: Option<std::thread::JoinHandle<Result<Overlay, Error>>> = None;
    for n in 0..args.blocks {
        let session = match &parent {
            Some(p) => db.begin_session_on_pending(p)?,
            None => db.begin_session(),
        };
        execute(&session, n, &args)?;
        let pending = session.into_pending()?;
        // One commit in flight: the one before must be durable first.
        if let Some(c) = committing.take() {
            let overlay = c.join().map_err(|_| "the commit thread panicked")??;
            overlay.witness().verify_update(&overlay.prev_root())?;
        }
        let block = pending.clone();
        committing = Some(std::thread::spawn(move || block.commit()));
        parent = Some(pending);
    }
    if let Some(c) = committing {
        c.join().map_err(|_| "the commit thread panicked")??;
    }
    let pipelined = start.elapsed();
    let root = db.root()?;

    println!(
        "{} blocks of {} transfers over {} accounts",
        args.blocks, args.transfers, args.accounts
    );
    println!(
        "one by one: {:.1} ms a block; pipelined: {:.1} ms a block",
        one_by_one.as_secs_f64() * 1e3 / args.blocks as f64,
        pipelined.as_secs_f64() * 1e3 / args.blocks as f64
    );
    if root != expected {
        return Err("the pipelined blocks ended at another root".into());
    }
    println!("same root both ways: {}", hex(&root));
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().take(8).map(|b| format!("{b:02x}")).collect()
}
