//! The node's state and blocks: `2^n` funded accounts that each hold the
//! token (the first of them wallets whose keys sign the transfers), the
//! system contracts, a first block that deploys a second token, and blocks of
//! ether and token transfers from the wallets to random accounts, a share
//! of them to fresh ones.

use std::collections::HashMap;

use pagetrie::KeyPath;
use pagetrie::Session;
use pagetrie_revm::consensus::{Transaction, TxEip1559, TxEnvelope};
use pagetrie_revm::revm::bytecode::Bytecode;
use pagetrie_revm::revm::primitives::{Address, Bytes, TxKind, U256};
use pagetrie_revm::revm::state::AccountInfo;
use pagetrie_revm::{
    genesis, keys, next_block, token, Block, BlockAttributes, Chain, Header, Wallet,
};

/// The chain id the node's transactions are signed for.
pub const CHAIN_ID: u64 = 424_242;
/// The genesis block's time and gas limit.
const GENESIS_TIME: u64 = 1_800_000_000;
/// Tokens each account starts with.
pub const TOKENS_EACH: u64 = 1_000_000;
/// Tokens the deployment credits the deployer with.
pub const SUPPLY: u32 = 1_000_000;
/// Gas the deployment may use (it uses about 130,000).
const DEPLOY_GAS: u64 = 500_000;
/// Gas limits of a token transfer and an ether transfer.
const TOKEN_GAS: u64 = 100_000;
const ETHER_GAS: u64 = 21_000;
/// Wei an ether transfer sends per unit of its random amount (1 to 10).
const WEI_PER_AMOUNT: u64 = 1_000_000_000;
/// Wei per gas a transaction offers at most, and its tip: far above the
/// base fee, which starts at 1 gwei and moves by at most 1/8 a block.
pub const MAX_FEE: u128 = 100_000_000_000;
const TIP: u128 = 1_000_000_000;

/// The size of a hot contract's code: the most a contract may deploy
/// (EIP-170), far past the 254 bytes a value stores inline.
const HOT_CODE_LEN: usize = 24_576;
/// Gas a call to a hot contract may use (its code stops at once).
const HOT_GAS: u64 = 30_000;

/// Hot contract `i`: its address and its code, which stops at once and
/// is padded to [`HOT_CODE_LEN`] bytes, distinct for each contract.
pub fn hot_contract(i: u8) -> (Address, Bytecode) {
    let mut code = vec![0x5b; HOT_CODE_LEN];
    code[0] = 0x00;
    code[HOT_CODE_LEN - 1] = i;
    (
        Address::left_padding_from(&[0xc0, i]),
        Bytecode::new_raw(code.into()),
    )
}

/// The wallet that deploys the token in the first block.
pub fn deployer() -> Wallet {
    Wallet::derive(u64::MAX)
}

/// Account `id`'s address: wallet `id`'s below `senders`, a hash above.
pub fn address(id: u64, senders: u64) -> Address {
    if id < senders {
        Wallet::derive(id).address()
    } else {
        Address::from_slice(&blake3::hash(&id.to_be_bytes()).as_bytes()[..20])
    }
}

/// Where the token every account holds lives, from genesis on.
pub fn token_address() -> Address {
    Address::repeat_byte(0x70)
}

/// Where block 1 deploys a second token: the deployer's first creation.
pub fn deployed_address() -> Address {
    deployer().address().create(0)
}

/// Wei each account needs so that it could send every transaction of the
/// run (hot contract calls cost less than a token transfer), whichever sender the random draw picks: no sender runs out of
/// ether, however few accounts there are. `None` if it overflows.
pub fn funding(blocks: usize, txs: usize) -> Option<U256> {
    let gas_price = U256::from(MAX_FEE);
    let token = U256::from(TOKEN_GAS).checked_mul(gas_price)?;
    let ether = U256::from(ETHER_GAS)
        .checked_mul(gas_price)?
        .checked_add(U256::from(10 * WEI_PER_AMOUNT))?;
    let all = U256::from(blocks).checked_mul(U256::from(txs))?;
    let need = all.checked_mul(token.max(ether))?;
    Some(need.max(U256::from(10u64).pow(U256::from(18))))
}

/// The genesis entries, in any order: the token with each account's
/// balance, each account with `funding` wei, the deployer with one ether,
/// the system contracts and the hot contracts.
pub fn genesis(
    log2: u32,
    senders: u64,
    hot: u8,
    funding: U256,
) -> impl Iterator<Item = (KeyPath, Vec<u8>)> {
    let funded = AccountInfo::from_balance(funding);
    let tokens = U256::from(TOKENS_EACH);
    let token = token_address();
    let accounts = (0..1u64 << log2).flat_map(move |id| {
        let a = address(id, senders);
        let balance = genesis::storage(&token, &token::balance_slot(&a), &tokens);
        std::iter::once(genesis::account(&a, &funded)).chain(balance)
    });
    let rich = AccountInfo::from_balance(U256::from(10u64).pow(U256::from(18)));
    accounts
        .chain(genesis::contract(&token, &token::runtime(), U256::ZERO))
        .chain(std::iter::once(genesis::account(
            &deployer().address(),
            &rich,
        )))
        .chain(genesis::system_contracts())
        .chain((0..hot).flat_map(|i| {
            let (address, code) = hot_contract(i);
            genesis::contract(&address, &code, U256::ZERO)
        }))
}

/// The shape of every transfer block.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    txs: usize,
    /// Percent of transactions that are token transfers; the rest send ether.
    token_percent: u64,
    /// Percent of recipients that are fresh accounts.
    fresh_percent: u64,
    /// Hot contracts every block calls once each.
    hot: u8,
    /// Room for every transaction's gas limit.
    gas_limit: u64,
}

impl Shape {
    /// Blocks of `txs` transfers and a call to each of `hot` contracts;
    /// `None` if their gas overflows.
    pub fn new(txs: usize, token_percent: u64, fresh_percent: u64, hot: u8) -> Option<Shape> {
        let gas_limit = u64::try_from(txs)
            .ok()?
            .checked_mul(TOKEN_GAS)?
            .checked_add(u64::from(hot) * HOT_GAS)?;
        Some(Shape {
            txs,
            token_percent,
            fresh_percent,
            hot,
            gas_limit: gas_limit.max(30_000_000),
        })
    }

    /// A gas limit with room for every transaction's.
    pub fn gas_limit(&self) -> u64 {
        self.gas_limit
    }
}

/// Makes the chain's blocks; it knows every sender's nonce, as a mempool
/// does, since every transaction it made is valid.
pub struct Producer {
    existing: u64,
    wallets: Vec<Wallet>,
    next_fresh: u64,
    nonces: HashMap<u64, u64>,
    rng: u64,
    pub chain: Chain,
    /// The header the next block builds on.
    pub parent: Header,
}

impl Producer {
    /// The producer of a genesis of `2^log2` accounts, the first `senders`
    /// of them wallets, whose state root is `root`.
    pub fn new(log2: u32, senders: u64, root: &pagetrie::Node, gas_limit: u64) -> Producer {
        let chain = Chain::new(CHAIN_ID);
        let parent = genesis::header(&chain, root, GENESIS_TIME, gas_limit);
        Producer {
            existing: 1 << log2,
            wallets: (0..senders).map(Wallet::derive).collect(),
            next_fresh: 1 << log2,
            nonces: HashMap::new(),
            rng: 0x9e37_79b9_7f4a_7c15,
            chain,
            parent,
        }
    }

    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn transaction(nonce: u64, to: TxKind, value: U256, input: Bytes, gas_limit: u64) -> TxEip1559 {
        TxEip1559 {
            chain_id: CHAIN_ID,
            nonce,
            gas_limit,
            max_fee_per_gas: MAX_FEE,
            max_priority_fee_per_gas: TIP,
            to,
            value,
            access_list: Default::default(),
            input,
        }
    }

    /// The first block: the deployer creates a second token. With its senders.
    pub fn deployment(&mut self) -> Result<(Block, Vec<Address>), pagetrie_revm::Error> {
        let deploy = Self::transaction(
            0,
            TxKind::Create,
            U256::ZERO,
            token::deploy_code(SUPPLY),
            DEPLOY_GAS,
        );
        let deployer = deployer();
        Ok((
            self.block(vec![deployer.sign(deploy)?]),
            vec![deployer.address()],
        ))
    }

    /// The next block of transfers, signed by their senders' wallets, and
    /// its senders (as the node's mempool knows them, for hints).
    pub fn next_block(
        &mut self,
        shape: Shape,
    ) -> Result<(Block, Vec<Address>), pagetrie_revm::Error> {
        let token = token_address();
        let senders = self.wallets.len() as u64;
        let mut txs = Vec::with_capacity(shape.txs);
        let mut from = Vec::with_capacity(shape.txs);
        for _ in 0..shape.txs {
            let sender = self.random() % senders;
            let recipient = if self.random() % 100 < shape.fresh_percent {
                self.next_fresh += 1;
                address(self.next_fresh - 1, 0)
            } else {
                address(self.random() % self.existing, senders)
            };
            let amount = 1 + self.random() % 10;
            let (to, value, input, gas_limit) = if self.random() % 100 < shape.token_percent {
                let call = token::transfer_call(&recipient, U256::from(amount));
                (token, U256::ZERO, call, TOKEN_GAS)
            } else {
                let value = U256::from(amount) * U256::from(WEI_PER_AMOUNT);
                (recipient, value, Bytes::new(), ETHER_GAS)
            };
            let nonce = self.nonces.entry(sender).or_insert(0);
            let tx = Self::transaction(*nonce, TxKind::Call(to), value, input, gas_limit);
            *nonce += 1;
            let wallet = &self.wallets[sender as usize];
            txs.push(wallet.sign(tx)?);
            from.push(wallet.address());
        }
        for i in 0..shape.hot {
            let sender = self.random() % senders;
            let nonce = self.nonces.entry(sender).or_insert(0);
            let (to, _) = hot_contract(i);
            let tx = Self::transaction(*nonce, TxKind::Call(to), U256::ZERO, Bytes::new(), HOT_GAS);
            *nonce += 1;
            let wallet = &self.wallets[sender as usize];
            txs.push(wallet.sign(tx)?);
            from.push(wallet.address());
        }
        Ok((self.block(txs), from))
    }

    /// The block after the parent, of `txs`.
    fn block(&mut self, txs: Vec<TxEnvelope>) -> Block {
        let attributes = BlockAttributes {
            timestamp: self.parent.timestamp + 12,
            beneficiary: Address::repeat_byte(0xbe),
            ..BlockAttributes::default()
        };
        next_block(&self.chain, &self.parent, attributes, txs)
    }
}

/// Hints the keys `block`'s transactions name: each sender's and callee's
/// account, and for a token transfer the two balances' slots. `senders`
/// are the block's senders, recovered.
pub fn warm_up(session: &Session, block: &Block, senders: &[Address]) {
    let token = token_address();
    for (tx, sender) in block.body.transactions.iter().zip(senders) {
        session.warm_up(&keys::account(sender));
        let Some(to) = tx.to() else { continue };
        session.warm_up(&keys::account(&to));
        let input = tx.input();
        if to == token && input.len() >= 36 {
            let recipient = Address::from_slice(&input[16..36]);
            for holder in [*sender, recipient] {
                session.warm_up(&keys::storage(&token, &token::balance_slot(&holder)));
            }
        }
    }
}
