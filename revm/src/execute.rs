//! Executing a block through alloy-evm's Ethereum block executor, the one
//! Rust nodes run revm with, on any database that takes commits: pagetrie
//! through [`crate::StateDb`], revm's in-memory database for comparison, and
//! the stateless verifier's witness.
//!
//! The executor makes the system calls (EIP-2935's block hashes, EIP-4788's
//! beacon root, EIP-7002 and EIP-7251 requests), runs the transactions,
//! builds receipts and credits withdrawals; each of its commits reaches the
//! database as revm's [`DatabaseCommit`], which [`crate::StateDb`] turns into
//! pagetrie writes. State is not revm's `State` with its bundle: the
//! database already keeps one value per key for the whole block, and the
//! writes it hands a session are exactly the block's.

use std::borrow::Cow;

use alloy_consensus::proofs::{
    calculate_receipt_root, calculate_transaction_root, calculate_withdrawals_root,
};
use alloy_consensus::transaction::{Recovered, SignerRecoverable};
use alloy_consensus::{BlockBody, Header, ReceiptEnvelope, TxEnvelope, TxReceipt};
use alloy_eips::eip7685::Requests;
use alloy_evm::block::{BlockExecutionError, BlockExecutor, BlockValidationError, ExecutableTx};
use alloy_evm::eth::receipt_builder::AlloyReceiptBuilder;
use alloy_evm::eth::{EthBlockExecutionCtx, EthBlockExecutor};
use alloy_evm::{EthEvmFactory, EvmFactory};
use alloy_hardforks::EthereumHardforks;
use alloy_primitives::{Address, Bloom, B256};
use revm::database::CacheDB;
use revm::{Database, DatabaseCommit, DatabaseRef};

use crate::history::History;
use crate::{Block, Chain, Error, Source, StateDb};

/// What [`execute_block`] needs of a database beside revm's traits: to hear
/// that a block failed, and to give back the cause of a failed read.
pub trait BlockDb {
    /// The block being executed failed; a database that holds the block's
    /// writes back drops them.
    fn block_failed(&mut self) {}

    /// The error behind the first read that failed, which revm saw only as
    /// a failure ([`Error::ReadFailed`]).
    fn take_failure(&mut self) -> Option<Error> {
        None
    }
}

impl<S: Source> BlockDb for StateDb<S> {
    fn block_failed(&mut self) {
        self.fail()
    }

    fn take_failure(&mut self) -> Option<Error> {
        StateDb::take_failure(self)
    }
}

/// revm's in-memory database, the reference pagetrie's results are compared
/// with. It keeps the transactions a failed block committed before failing.
impl<E: DatabaseRef> BlockDb for CacheDB<E> {}

/// What a block did: its receipts and the totals its header commits to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockOutcome {
    /// One per transaction, in order: status, cumulative gas, logs, bloom.
    pub receipts: Vec<ReceiptEnvelope>,
    /// Gas the transactions used together.
    pub gas_used: u64,
    /// Blob gas the transactions used together (EIP-4844).
    pub blob_gas_used: u64,
    /// The execution-layer requests the block produced (EIP-7685).
    pub requests: Requests,
}

impl BlockOutcome {
    /// `block` with what its execution decided written into its header:
    /// the state root `state_root` (the root its commit returned), gas
    /// used, the transactions, receipts and withdrawals roots, the logs
    /// bloom, blob gas used and the requests hash.
    pub fn seal(&self, chain: &Chain, mut block: Block, state_root: &pagetrie::Node) -> Block {
        block.header = self.sealed_header(chain, &block.header, &block.body, state_root);
        block
    }

    /// The header [`BlockOutcome::seal`] writes.
    pub(crate) fn sealed_header(
        &self,
        chain: &Chain,
        header: &Header,
        body: &BlockBody<TxEnvelope>,
        state_root: &pagetrie::Node,
    ) -> Header {
        let mut sealed = header.clone();
        let (transactions_root, withdrawals_root) = body_roots(body);
        sealed.transactions_root = transactions_root;
        sealed.withdrawals_root = withdrawals_root;
        sealed.state_root = B256::from(*state_root);
        sealed.receipts_root = calculate_receipt_root(&self.receipts);
        let mut bloom = Bloom::ZERO;
        for receipt in &self.receipts {
            bloom.accrue_bloom(&receipt.bloom());
        }
        sealed.logs_bloom = bloom;
        sealed.gas_used = self.gas_used;
        if chain.is_cancun_active_at_timestamp(header.timestamp) {
            sealed.blob_gas_used = Some(self.blob_gas_used);
        }
        if chain.is_prague_active_at_timestamp(header.timestamp) {
            sealed.requests_hash = Some(self.requests.requests_hash());
        }
        sealed
    }
}

/// The transactions root and the withdrawals root (if it has withdrawals)
/// a header commits `body` with.
pub(crate) fn body_roots(body: &BlockBody<TxEnvelope>) -> (B256, Option<B256>) {
    (
        calculate_transaction_root(&body.transactions),
        body.withdrawals
            .as_ref()
            .map(|w| calculate_withdrawals_root(w)),
    )
}

/// Executes `block` on `db` under `chain`'s rules for its header: senders
/// are recovered from the signatures, the system calls run, then the
/// transactions in order, each committed as it ends, then withdrawals are
/// credited and requests collected. The header's execution fields
/// (number, timestamp, beneficiary, gas limit, base fee, prevrandao,
/// excess blob gas, parent hash, beacon root) are taken as given; the
/// verifier checks them against the parent first.
///
/// Fails with [`Error::InvalidSignature`] for a signature no sender
/// recovers from, [`Error::InvalidTransaction`] if revm refuses one (nonce,
/// funds, chain id, ...), [`Error::BlockGasLimit`] for a transaction whose
/// gas limit exceeds what the block has left, [`Error::Execution`] if a
/// system call or withdrawal fails, and with the database's error if a read
/// fails. On failure it tells `db` ([`BlockDb::block_failed`]): a
/// [`StateDb`] then refuses to [`finish`](StateDb::finish), so none of the
/// block reaches its session.
pub fn execute_block<DB>(db: &mut DB, chain: &Chain, block: &Block) -> Result<BlockOutcome, Error>
where
    DB: Database + DatabaseCommit + BlockDb,
    DB::Error: Send + Sync + 'static,
{
    let result = execute(db, chain, block);
    if result.is_err() {
        db.block_failed();
    }
    result.map_err(|e| db.take_failure().unwrap_or(e))
}

fn execute<DB>(db: &mut DB, chain: &Chain, block: &Block) -> Result<BlockOutcome, Error>
where
    DB: Database + DatabaseCommit,
    DB::Error: Send + Sync + 'static,
{
    let senders = recover_senders(&block.body.transactions)?;
    let header = &block.header;
    let evm = EthEvmFactory::default().create_evm(History(db), chain.evm_env(header));
    let ctx = EthBlockExecutionCtx {
        parent_hash: header.parent_hash,
        parent_beacon_block_root: header.parent_beacon_block_root,
        ommers: &block.body.ommers,
        withdrawals: block
            .body
            .withdrawals
            .as_ref()
            .map(|w| Cow::Borrowed(w.as_slice())),
        extra_data: header.extra_data.clone(),
        tx_count_hint: Some(senders.len()),
        slot_number: None,
    };
    let mut executor = EthBlockExecutor::new(evm, ctx, chain, AlloyReceiptBuilder::default());
    executor
        .apply_pre_execution_changes()
        .map_err(block_error)?;
    for (index, tx) in senders.into_iter().enumerate() {
        run(&mut executor, tx).map_err(|e| tx_error(index, e))?;
    }
    let result = executor
        .apply_post_execution_changes()
        .map_err(block_error)?;
    Ok(BlockOutcome {
        receipts: result.receipts,
        gas_used: result.gas_used,
        blob_gas_used: result.blob_gas_used,
        requests: result.requests,
    })
}

/// Each transaction with the sender its signature recovers, on every core
/// for a large block: recovery is most of a transfer's execution time.
fn recover_senders(txs: &[TxEnvelope]) -> Result<Vec<Recovered<&TxEnvelope>>, Error> {
    const PER_THREAD: usize = 64;
    let recover = |offset: usize, chunk: &[TxEnvelope]| -> Vec<Result<Address, usize>> {
        chunk
            .iter()
            .enumerate()
            .map(|(i, tx)| tx.recover_signer().map_err(|_| offset + i))
            .collect()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = txs.len().div_ceil(threads).max(PER_THREAD);
    let signers: Vec<Result<Address, usize>> = if txs.len() <= chunk {
        recover(0, txs)
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = txs
                .chunks(chunk)
                .enumerate()
                .map(|(n, part)| scope.spawn(move || recover(n * chunk, part)))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    };
    txs.iter()
        .zip(signers)
        .map(|(tx, signer)| match signer {
            Ok(signer) => Ok(Recovered::new_unchecked(tx, signer)),
            Err(index) => Err(Error::InvalidSignature { index }),
        })
        .collect()
}

fn run<E: BlockExecutor>(
    executor: &mut E,
    tx: impl ExecutableTx<E>,
) -> Result<(), BlockExecutionError> {
    executor.execute_transaction(tx).map(|_| ())
}

/// What a failure around the transactions (a system call, a withdrawal)
/// becomes.
fn block_error(e: BlockExecutionError) -> Error {
    Error::Execution(e.to_string())
}

/// What transaction `index`'s failure becomes.
fn tx_error(index: usize, e: BlockExecutionError) -> Error {
    match e {
        BlockExecutionError::Validation(
            BlockValidationError::TransactionGasLimitMoreThanAvailableBlockGas {
                transaction_gas_limit,
                block_available_gas,
            },
        ) => Error::BlockGasLimit {
            index,
            gas_limit: transaction_gas_limit,
            available: block_available_gas,
        },
        BlockExecutionError::Validation(BlockValidationError::InvalidTx { error, .. }) => {
            Error::InvalidTransaction {
                index,
                reason: error.to_string(),
            }
        }
        other => Error::InvalidTransaction {
            index,
            reason: other.to_string(),
        },
    }
}
