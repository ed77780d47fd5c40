//! Building blocks before they are durable: two competing blocks on one parent
//! block, the winner committed (its parent first) and the loser refused; then a
//! chain of overlays, and what a read through its tip costs.
//!
//! `cargo run --release --example overlays -- [--accounts N] [--chain N] [--writes N]`

use std::time::Instant;

use clap::Parser;
use pagetrie::trie::hash_value;
use pagetrie::{Db, Error, Options, Overlay};

/// Competing blocks on overlays, and reads through a chain of them.
#[derive(Parser, Debug)]
struct Args {
    /// Accounts in the database before the blocks.
    #[arg(long, default_value_t = 100_000)]
    accounts: u64,
    /// Overlays in the chain.
    #[arg(long, default_value_t = 64)]
    chain: usize,
    /// Accounts each overlay of the chain writes.
    #[arg(long, default_value_t = 1000)]
    writes: u64,
    /// Reads timed through the chain's tip, and through the database.
    #[arg(long, default_value_t = 100_000)]
    reads: u64,
}

/// One way to read an account.
type Reader<'a> = dyn Fn(&[u8; 32]) -> Result<Option<Vec<u8>>, Error> + 'a;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn key(i: u64) -> [u8; 32] {
    hash_value(&i.to_be_bytes())
}

fn balance(value: Option<Vec<u8>>) -> u64 {
    value.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap_or_default()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let db = Db::open(Options::new(dir.path()))?;
    let session = db.begin_session();
    for i in 0..args.accounts {
        session.write(key(i), Some(1000u64.to_le_bytes().to_vec()));
    }
    session.commit()?;
    println!(
        "{} accounts committed, root {}",
        args.accounts,
        hex(&db.root()?)
    );

    // Block 1: consensus has not decided yet, but block 2 must be built on it.
    let block = db.begin_session();
    let paid = balance(block.read(&key(1))?) + 500;
    block.write(key(1), Some(paid.to_le_bytes().to_vec()));
    let finished = block.finish()?;
    println!("block 1: root {} (in memory only)", hex(&finished.root()));
    let parent = finished.into_overlay();

    // Two proposals for block 2, both on block 1.
    let proposal = |to: u64| -> Result<Overlay, Error> {
        let session = db.begin_session_on(&parent);
        let from = balance(session.read(&key(1))?);
        session.write(key(1), Some((from - 100).to_le_bytes().to_vec()));
        let to_balance = balance(session.read(&key(to))?) + 100;
        session.write(key(to), Some(to_balance.to_le_bytes().to_vec()));
        Ok(session.finish()?.into_overlay())
    };
    let a = proposal(2)?;
    let b = proposal(3)?;
    println!(
        "block 2a: root {}; block 2b: root {}",
        hex(&a.root()),
        hex(&b.root())
    );
    assert_eq!(a.witness().verify_update(&parent.root())?, a.root());
    println!(
        "  account 1 reads {} in both; account 2 reads {} in 2a and {} in 2b",
        balance(a.read(&key(1))?),
        balance(a.read(&key(2))?),
        balance(b.read(&key(2))?)
    );

    // Consensus picks 2a: committing it commits block 1 first.
    a.commit()?;
    println!(
        "committed 2a: block 1 committed {}, root {}",
        parent.is_committed()?,
        hex(&db.root()?)
    );
    match b.commit() {
        Err(Error::StaleSession) => {
            println!("2b refused: its parent is no longer the committed root")
        }
        other => return Err(format!("2b: expected a refusal, got {other:?}").into()),
    }
    drop((a, b, parent));

    // A chain of overlays, as when many blocks wait for finality.
    let started = Instant::now();
    let mut chain: Vec<Overlay> = Vec::new();
    for n in 0..args.chain as u64 {
        let session = match chain.last() {
            Some(tip) => db.begin_session_on(tip),
            None => db.begin_session(),
        };
        for i in 0..args.writes {
            let k = (n * args.writes + i) % args.accounts;
            session.write(key(k), Some((n + 1).to_le_bytes().to_vec()));
        }
        chain.push(session.finish()?.into_overlay());
    }
    println!(
        "chain of {} overlays of {} writes each built in {:.2?}",
        args.chain,
        args.writes,
        started.elapsed()
    );
    let tip = chain.last().ok_or("an empty chain")?;
    let time_reads = |read: &Reader| {
        let started = Instant::now();
        for r in 0..args.reads {
            read(&key(r.wrapping_mul(0x9e37_79b9) % args.accounts))?;
        }
        Ok::<_, Error>(started.elapsed().as_nanos() as f64 / args.reads as f64 / 1000.0)
    };
    let through_tip = time_reads(&|k| tip.read(k))?;
    let through_db = time_reads(&|k| db.read(k))?;
    println!(
        "mean read: {through_tip:.2} us through the tip of the chain, {through_db:.2} us from the database"
    );
    let started = Instant::now();
    tip.commit()?;
    println!(
        "committed the tip (and the {} below it) in {:.2?}: root {}",
        args.chain - 1,
        started.elapsed(),
        hex(&db.root()?)
    );
    Ok(())
}
