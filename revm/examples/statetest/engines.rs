//! One state test case run on each engine: pagetrie, through `StateDb` on
//! a session whose writes become an overlay, and revm's in-memory `State`
//! over the test's pre-state, as revm's own runner does. Each returns the
//! outcome and the post state's two hashes.

use std::collections::{BTreeMap, BTreeSet};

use pagetrie::{Db, Options};
use pagetrie_revm::revm::bytecode::Bytecode;
use pagetrie_revm::revm::context::result::ExecutionResult;
use pagetrie_revm::revm::context::{BlockEnv, CfgEnv, Context, TxEnv};
use pagetrie_revm::revm::database::{EmptyDB, State};
use pagetrie_revm::revm::primitives::{
    keccak256, Address, AddressMap, StorageKey, StorageValue, B256, KECCAK_EMPTY, U256,
};
use pagetrie_revm::revm::state::{Account, AccountInfo};
use pagetrie_revm::revm::{
    Database, DatabaseCommit, DatabaseRef, ExecuteCommitEvm, MainBuilder, MainContext,
};
use pagetrie_revm::{genesis, Reader, Source, StateDb};
use revm_statetest_types::TestUnit;

use crate::roots::{logs_hash, state_root, PostAccount};

/// What a case did on one engine.
pub struct Outcome {
    /// `None` if the transaction was refused (the error's text then).
    pub refused: Option<String>,
    pub state_root: B256,
    pub logs_hash: B256,
}

/// A test's code as revm's runner decodes it.
fn bytecode(code: &pagetrie_revm::revm::primitives::Bytes) -> Bytecode {
    Bytecode::new_raw_checked(code.clone()).unwrap_or_else(|_| Bytecode::new_legacy(code.clone()))
}

/// One pagetrie database for the whole run: each test's pre-state is
/// committed to it, its cases run on sessions over it, and the pre-state is
/// deleted again before the next test.
pub struct Store {
    db: Db,
    empty: pagetrie::Node,
    _dir: tempfile::TempDir,
}

impl Store {
    pub fn new() -> Result<Store, Box<dyn std::error::Error>> {
        let dir = tempfile::Builder::new()
            .prefix("pagetrie-statetest-")
            .tempdir()?;
        // A test's state is tiny: small caches.
        let options = Options::new(dir.path())
            .page_cache_mib(8)
            .value_cache_mib(8);
        let db = Db::open(options)?;
        let empty = db.root()?;
        Ok(Store {
            db,
            empty,
            _dir: dir,
        })
    }

    /// Commits `unit`'s pre-state, runs `cases` on it, then deletes it.
    pub fn with_pre<T>(
        &self,
        unit: &TestUnit,
        cases: impl FnOnce(&Db) -> Result<T, Box<dyn std::error::Error>>,
    ) -> Result<T, Box<dyn std::error::Error>> {
        let entries = pre_entries(unit);
        let session = self.db.begin_session();
        for (key, value) in &entries {
            session.write(*key, Some(value.clone()));
        }
        session.commit()?;
        let result = cases(&self.db);
        let session = self.db.begin_session();
        for (key, _) in &entries {
            session.write(*key, None);
        }
        if session.commit()? != self.empty {
            return Err("deleting a test's pre-state left the database not empty".into());
        }
        result
    }
}

/// `unit`'s pre-state in the key layout.
fn pre_entries(unit: &TestUnit) -> Vec<(pagetrie::KeyPath, Vec<u8>)> {
    let mut entries = Vec::new();
    for (address, pre) in &unit.pre {
        let code = bytecode(&pre.code);
        let info = AccountInfo {
            balance: pre.balance,
            nonce: pre.nonce,
            code_hash: if pre.code.is_empty() {
                KECCAK_EMPTY
            } else {
                keccak256(&pre.code)
            },
            ..AccountInfo::default()
        };
        entries.push(genesis::account(address, &info));
        entries.extend(genesis::code(&code));
        for (slot, value) in &pre.storage {
            entries.extend(genesis::storage(address, slot, value));
        }
    }
    // Accounts sharing code name its entry once each.
    entries.sort();
    entries.dedup();
    entries
}

/// Runs `tx` on a session of `db` and reads the post state back from the
/// overlay its writes become (never committed, so the next case starts from
/// the pre-state again).
pub fn on_pagetrie(
    db: &Db,
    unit: &TestUnit,
    cfg: &CfgEnv,
    block: &BlockEnv,
    tx: &TxEnv,
) -> Result<Outcome, pagetrie_revm::Error> {
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    let mut touched = BTreeMap::new();
    let result = {
        let db = TestDb {
            state: &mut state,
            touched: &mut touched,
        };
        let mut evm = Context::mainnet()
            .with_db(db)
            .with_block(block.clone())
            .with_cfg(cfg.clone())
            .build_mainnet();
        evm.transact_commit(tx.clone())
    };
    state.finish()?;
    let overlay = session.finish()?.into_overlay();
    let reader = Reader(&overlay);
    // Every account the test names or the transaction touched, with every
    // slot of either: what the post state can hold.
    for (address, pre) in &unit.pre {
        touched
            .entry(*address)
            .or_default()
            .extend(pre.storage.keys().copied());
    }
    let mut accounts = Vec::new();
    for (address, slots) in touched {
        let Some(info) = reader.basic_ref(address)? else {
            continue;
        };
        let mut storage = Vec::with_capacity(slots.len());
        for slot in slots {
            storage.push((slot, reader.storage_ref(address, slot)?));
        }
        accounts.push(PostAccount {
            address,
            nonce: info.nonce,
            balance: info.balance,
            code_hash: info.code_hash,
            storage,
        });
    }
    Ok(outcome(
        result.map_err(|e| e.to_string()),
        state_root(accounts),
    ))
}

/// Runs `tx` on revm's `State` over the test's pre-state.
pub fn on_revm(unit: &TestUnit, cfg: &CfgEnv, block: &BlockEnv, tx: &TxEnv) -> Outcome {
    let mut state = State::builder()
        .with_cached_prestate(unit.state())
        .with_bundle_update()
        .build();
    let result = {
        let mut evm = Context::mainnet()
            .with_db(&mut state)
            .with_block(block.clone())
            .with_cfg(cfg.clone())
            .build_mainnet();
        evm.transact_commit(tx.clone()).map_err(|e| e.to_string())
    };
    let accounts = state
        .cache
        .trie_account()
        .into_iter()
        .map(|(address, account)| PostAccount {
            address,
            nonce: account.info.nonce,
            balance: account.info.balance,
            code_hash: account.info.code_hash,
            storage: account.storage.iter().map(|(k, v)| (*k, *v)).collect(),
        });
    outcome(result, state_root(accounts))
}

fn outcome<H>(result: Result<ExecutionResult<H>, String>, state_root: B256) -> Outcome {
    match result {
        Ok(result) => Outcome {
            refused: None,
            state_root,
            logs_hash: logs_hash(result.logs()),
        },
        Err(e) => Outcome {
            refused: Some(e),
            state_root,
            logs_hash: logs_hash(&[]),
        },
    }
}

/// [`StateDb`] as a state test sees it: `BLOCKHASH(n)` is keccak256 of `n`
/// in decimal, the tests' convention (revm's empty database answers so),
/// and every committed account and slot is noted for reading back.
struct TestDb<'a, S: Source> {
    state: &'a mut StateDb<S>,
    touched: &'a mut BTreeMap<Address, BTreeSet<U256>>,
}

impl<S: Source> Database for TestDb<'_, S> {
    type Error = pagetrie_revm::Error;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, Self::Error> {
        self.state.basic(address)
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, Self::Error> {
        self.state.code_by_hash(code_hash)
    }

    fn storage(
        &mut self,
        address: Address,
        index: StorageKey,
    ) -> Result<StorageValue, Self::Error> {
        self.state.storage(address, index)
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, Self::Error> {
        Ok(EmptyDB::default()
            .block_hash_ref(number)
            .unwrap_or_default())
    }
}

impl<S: Source> DatabaseCommit for TestDb<'_, S> {
    fn commit(&mut self, changes: AddressMap<Account>) {
        for (address, account) in &changes {
            self.touched
                .entry(*address)
                .or_default()
                .extend(account.storage.keys().copied());
        }
        self.state.commit(changes)
    }
}
