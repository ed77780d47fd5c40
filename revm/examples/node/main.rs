//! A node on pagetrie with revm: imports `2^n` accounts that each hold a
//! token, deploys a second token by a contract-creation transaction in
//! block 1, then runs blocks of signed ether and token transfers and calls
//! to hot contracts, each executed by alloy-evm's block executor on a
//! session, committed with `commit_and_prove`, sealed, and verified
//! statelessly against its parent header from its witness and the values
//! it read.
//!
//! ```sh
//! cargo run --release -p pagetrie-revm --example node               # 2^20 accounts
//! cargo run --release -p pagetrie-revm --example node -- --help
//! ```

mod report;
mod workload;

use std::path::PathBuf;
use std::time::Instant;

use clap::builder::RangedU64ValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use pagetrie::{Db, ImportProgress, Options};
use pagetrie_revm::consensus::TxReceipt;
use pagetrie_revm::revm::primitives::Address;
use pagetrie_revm::revm::primitives::{keccak256, U256};
use pagetrie_revm::revm::DatabaseRef;
use pagetrie_revm::{execute_block, token, verify_block, Block, BlockOutcome, BlockProof};
use pagetrie_revm::{Reader, StateDb};

use report::BlockFigures;
use workload::{Producer, Shape};

/// Bounds on the flags: a block's gas limit and the run's funding stay far
/// from overflowing, and a block's transactions fit in memory.
const MAX_TXS: u64 = 1_000_000;
const MAX_BLOCKS: u64 = 1_000_000;

/// Any error.
type BoxError = Box<dyn std::error::Error>;

#[derive(Parser, Debug)]
#[command(
    about = "revm executing blocks on pagetrie, each re-executed statelessly from its witness"
)]
struct Args {
    /// Accounts imported: 2^N (each also holds the token, a storage slot).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=30))]
    accounts_log2: u32,
    /// Accounts that send, each a wallet whose key signs its transactions:
    /// the first 2^N of the accounts (deriving a key costs about 0.1 ms, so
    /// not all of 2^24); the rest receive.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(0..=30))]
    senders_log2: u32,
    /// Blocks of transfers to run, after the token's deployment.
    #[arg(long, default_value_t = 20, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_BLOCKS))]
    blocks: usize,
    /// Transactions per block.
    #[arg(long, default_value_t = 10_000, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_TXS))]
    txs: usize,
    /// Percent of transactions that are token transfers (the rest send ether).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=100))]
    token_percent: u64,
    /// Contracts with 24 KiB of code each block calls once: their code is
    /// read from the value cache, not the disk, after the first block.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(0..=100))]
    hot_contracts: u8,
    /// Percent of recipients that are fresh accounts.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=100))]
    fresh_percent: u64,
    /// Do not hint the keys a block's transactions name before executing it.
    /// By default every sender's and callee's account and, for a token
    /// transfer, both balances' slots are hinted to the session
    /// (`Session::warm_up`), so reads find them loading or loaded.
    #[arg(long)]
    no_warm_up: bool,
    /// Skip the stateless re-execution of each block.
    #[arg(long)]
    no_verify: bool,
    /// An empty directory for the database [default: a temporary one,
    /// deleted at the end].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// One JSON object per block, then one for the run.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    // Within the flags' ranges neither overflows; checked all the same.
    let (Some(shape), Some(funding)) = (
        Shape::new(
            args.txs,
            args.token_percent,
            args.fresh_percent,
            args.hot_contracts,
        ),
        workload::funding(args.blocks, args.txs + usize::from(args.hot_contracts)),
    ) else {
        Args::command()
            .error(
                ErrorKind::ValueValidation,
                "--txs and --blocks are too large together",
            )
            .exit()
    };
    let temp;
    let path = match &args.dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("pagetrie-revm-")
                .tempdir()?;
            temp.path().join("db")
        }
    };

    let senders = 1u64 << args.senders_log2.min(args.accounts_log2);
    let start = Instant::now();
    let db = Db::import(
        Options::new(&path),
        workload::genesis(args.accounts_log2, senders, args.hot_contracts, funding),
        |p| {
            if let ImportProgress::Writing { entries, total } = p {
                eprint!("\rimport: {entries} / {total} entries   ");
            }
        },
    )?;
    let import = start.elapsed();
    eprintln!();
    report::imported(&args, import, &db)?;

    let mut producer = Producer::new(args.accounts_log2, senders, &db.root()?, shape.gas_limit());
    let deployment = producer.deployment()?;
    let (figures, outcome) = run_block(&args, &db, &mut producer, deployment)?;
    report::block(&args, &figures);
    check_deployed(&db, &outcome, senders)?;

    let mut run = Vec::with_capacity(args.blocks);
    for _ in 0..args.blocks {
        let block = producer.next_block(shape)?;
        let (figures, _) = run_block(&args, &db, &mut producer, block)?;
        report::block(&args, &figures);
        run.push(figures);
    }
    report::summary(&args, &run);
    Ok(())
}

/// Executes `block` on a session of `db`, commits it with its witness, and
/// unless told not to re-executes it statelessly from the bytes shipped.
fn run_block(
    args: &Args,
    db: &Db,
    producer: &mut Producer,
    (block, senders): (Block, Vec<Address>),
) -> Result<(BlockFigures, BlockOutcome), BoxError> {
    // What a verifier following the chain holds: the last block's header.
    let parent = producer.parent.clone();

    let reads_before = db.metrics().reads_issued;
    let start = Instant::now();
    let session = db.begin_session();
    if !args.no_warm_up {
        workload::warm_up(&session, &block, &senders);
    }
    let mut state = StateDb::new(&session);
    let outcome = execute_block(&mut state, &producer.chain, &block)?;
    let changes = state.finish()?;
    let execute = start.elapsed();

    let start = Instant::now();
    let out = session.commit_and_prove()?;
    let commit = start.elapsed();
    let disk_reads = db.metrics().reads_issued - reads_before;
    let block = outcome.seal(&producer.chain, block, &out.root);
    producer.parent = block.header.clone();

    let witness_bytes = out.witness.encoded_len();
    let shipped = BlockProof::new(out.witness, changes).encode();
    let reexecute = if args.no_verify {
        None
    } else {
        // What a verifier does with the bytes it was sent.
        let start = Instant::now();
        let proof = BlockProof::decode(&shipped)?;
        let again = verify_block(&producer.chain, &parent, &block, &proof)?;
        let took = start.elapsed();
        if again != outcome {
            return Err("the stateless re-execution's outcome differs".into());
        }
        Some(took)
    };

    let figures = BlockFigures {
        number: block.header.number,
        txs: block.body.transactions.len(),
        reverted: outcome.receipts.iter().filter(|r| !r.status()).count(),
        gas: outcome.gas_used,
        execute,
        commit,
        disk_reads,
        root: out.root,
        witness_bytes,
        shipped_bytes: shipped.len(),
        reexecute,
    };
    Ok((figures, outcome))
}

/// Checks that the deployment succeeded and left the token's code where the
/// transfers will call it.
fn check_deployed(db: &Db, outcome: &BlockOutcome, senders: u64) -> Result<(), BoxError> {
    if !outcome.receipts.iter().all(|r| r.status()) {
        return Err("the token's deployment failed".into());
    }
    let reader = Reader(db);
    let account = reader.basic_ref(workload::deployed_address())?;
    let Some(account) = account else {
        return Err("no account where the token was deployed".into());
    };
    let code = reader.code_by_hash_ref(account.code_hash)?;
    if account.code_hash != keccak256(token::RUNTIME)
        || code.original_byte_slice() != token::RUNTIME
    {
        return Err("the deployed code is not the token's".into());
    }
    // The deployment's supply, and the genesis token's imported balances.
    let balance = |token, holder| reader.storage_ref(token, token::balance_slot(&holder));
    let (deployed, imported) = (workload::deployed_address(), workload::token_address());
    if balance(deployed, workload::deployer().address())? != U256::from(workload::SUPPLY)
        || balance(imported, workload::address(0, senders))? != U256::from(workload::TOKENS_EACH)
    {
        return Err("the token's balances are not the deployed and imported ones".into());
    }
    Ok(())
}
