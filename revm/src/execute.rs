//! Executing a block with revm on any database that takes commits: pagetrie
//! through [`crate::StateDb`], revm's in-memory database for comparison, and
//! the stateless verifier's witness.

use revm::context::result::EVMError;
use revm::context::Context;
use revm::database::CacheDB;
use revm::primitives::{B256, U256};
use revm::{Database, DatabaseCommit, DatabaseRef, ExecuteCommitEvm, MainBuilder, MainContext};

use crate::{Block, Error, Source, StateDb};

/// What [`execute_block`] needs of a database beside revm's traits: it keeps
/// block hashes for `BLOCKHASH` (each block stores its parent's hash when it
/// begins) and hears when a block fails.
pub trait BlockDb {
    /// Records block `number`'s hash.
    fn insert_block_hash(&mut self, number: u64, hash: B256);

    /// The block being executed failed; a database that holds the block's
    /// writes back drops them.
    fn block_failed(&mut self) {}
}

impl<S: Source> BlockDb for StateDb<S> {
    fn insert_block_hash(&mut self, number: u64, hash: B256) {
        StateDb::insert_block_hash(self, number, hash)
    }

    fn block_failed(&mut self) {
        self.fail()
    }
}

/// revm's in-memory database, the reference pagetrie's results are compared
/// with. It keeps the transactions a failed block committed before failing.
impl<E: DatabaseRef> BlockDb for CacheDB<E> {
    fn insert_block_hash(&mut self, number: u64, hash: B256) {
        self.cache.block_hashes.insert(U256::from(number), hash);
    }
}

/// What one transaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxOutcome {
    /// Gas it used, after refunds.
    pub gas_used: u64,
    /// Whether it ran to the end (not reverted or halted).
    pub success: bool,
}

/// What a block did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockOutcome {
    /// Each transaction's outcome, in order.
    pub txs: Vec<TxOutcome>,
    /// Their gas together.
    pub gas_used: u64,
}

/// Executes `block` on `db`, committing each transaction as it ends: first
/// the parent's hash is stored (as block `number - 1`'s), then the
/// transactions run in order.
///
/// Fails with [`Error::InvalidTransaction`] if revm refuses one (the block is
/// invalid), with [`Error::BlockGasLimit`] before running a transaction
/// whose gas limit exceeds the gas the block has left, and
/// with the database's error if a read fails. On failure it tells `db`
/// ([`BlockDb::block_failed`]): a [`StateDb`] then refuses to
/// [`finish`](StateDb::finish), so none of the block reaches its session.
pub fn execute_block<DB>(db: &mut DB, block: &Block) -> Result<BlockOutcome, Error>
where
    DB: Database + DatabaseCommit + BlockDb,
    Error: From<DB::Error>,
{
    let result = execute(db, block);
    if result.is_err() {
        db.block_failed();
    }
    result
}

fn execute<DB>(db: &mut DB, block: &Block) -> Result<BlockOutcome, Error>
where
    DB: Database + DatabaseCommit + BlockDb,
    Error: From<DB::Error>,
{
    let header = &block.header;
    if let Some(parent) = header.number.checked_sub(1) {
        db.insert_block_hash(parent, header.parent_hash);
    }
    let mut evm = Context::mainnet()
        .with_db(&mut *db)
        .with_block(header.env())
        .modify_cfg_chained(|cfg| {
            cfg.chain_id = crate::CHAIN_ID;
            cfg.set_spec_and_mainnet_gas_params(crate::SPEC);
        })
        .build_mainnet();
    let mut outcome = BlockOutcome::default();
    for (index, tx) in block.txs.iter().enumerate() {
        // As Ethereum does: a transaction must fit in the gas left whatever
        // it ends up using, so the block's gas can never go over.
        let available = header.gas_limit.saturating_sub(outcome.gas_used);
        if tx.gas_limit > available {
            return Err(Error::BlockGasLimit {
                index,
                gas_limit: tx.gas_limit,
                available,
            });
        }
        let result = evm.transact_commit(tx.env()).map_err(|e| match e {
            EVMError::Database(e) => Error::from(e),
            other => Error::InvalidTransaction {
                index,
                reason: other.to_string(),
            },
        })?;
        // At most tx.gas_limit, which fit: the sum stays within the limit.
        let gas_used = result.tx_gas_used();
        outcome.gas_used = outcome.gas_used.saturating_add(gas_used);
        outcome.txs.push(TxOutcome {
            gas_used,
            success: result.is_success(),
        });
    }
    Ok(outcome)
}
