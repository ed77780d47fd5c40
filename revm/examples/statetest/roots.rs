//! The two hashes a state test expects: the Merkle-Patricia root of the
//! whole post state (Ethereum's state root, computed with alloy-trie) and
//! the hash of the transaction's logs.

use alloy_trie::root::storage_root_unhashed;
use alloy_trie::{HashBuilder, Nibbles, TrieAccount};
use pagetrie_revm::revm::primitives::{keccak256, Address, Log, B256, U256};

/// One account of a post state: its fields and its storage (zero slots may
/// be among them; they are not in the trie).
pub struct PostAccount {
    pub address: Address,
    pub nonce: u64,
    pub balance: U256,
    pub code_hash: B256,
    pub storage: Vec<(U256, U256)>,
}

/// Ethereum's state root of `accounts`: each account under keccak256 of
/// its address, with the root of its non-zero slots under keccak256 of
/// each slot.
pub fn state_root(accounts: impl IntoIterator<Item = PostAccount>) -> B256 {
    let mut leaves: Vec<(B256, TrieAccount)> = accounts
        .into_iter()
        .map(|a| {
            let slots = a
                .storage
                .into_iter()
                .filter(|(_, value)| !value.is_zero())
                .map(|(slot, value)| (B256::from(slot), value));
            let account = TrieAccount {
                nonce: a.nonce,
                balance: a.balance,
                storage_root: storage_root_unhashed(slots),
                code_hash: a.code_hash,
            };
            (keccak256(a.address), account)
        })
        .collect();
    leaves.sort_unstable_by_key(|(key, _)| *key);
    let mut builder = HashBuilder::default();
    let mut rlp = Vec::new();
    for (key, account) in leaves {
        rlp.clear();
        alloy_rlp::Encodable::encode(&account, &mut rlp);
        builder.add_leaf(Nibbles::unpack(key), &rlp);
    }
    builder.root()
}

/// keccak256 of the RLP list of `logs`, as a state test's `logs` field.
pub fn logs_hash(logs: &[Log]) -> B256 {
    let mut out = Vec::new();
    alloy_rlp::encode_list(logs, &mut out);
    keccak256(&out)
}
