//! The chain's configuration: its id, which transactions are signed for,
//! and its fork schedule, which picks the rules each block runs under.

use alloy_eips::eip7840::BlobParams;
use alloy_evm::eth::spec::EthExecutorSpec;
use alloy_evm::EvmEnv;
use alloy_hardforks::{EthereumChainHardforks, EthereumHardfork, EthereumHardforks, ForkCondition};
use revm::primitives::hardfork::SpecId;
use revm::primitives::Address;

use crate::{Error, Header};

/// A chain: its id and the times its forks begin at. Prague's rules hold
/// from its genesis on: `BLOCKHASH` is served by the EIP-2935 contract,
/// which holds hashes only from Prague on, and the key layout relies on
/// Cancun's self-destruct rules (EIP-6780). Later forks may begin later.
#[derive(Clone, Debug)]
pub struct Chain {
    chain_id: u64,
    forks: EthereumChainHardforks,
    deposit_contract: Option<Address>,
}

impl Chain {
    /// A new chain with every fork through Osaka active from its genesis,
    /// as a devnet starts; transactions are signed for `chain_id`.
    pub fn new(chain_id: u64) -> Chain {
        Chain {
            chain_id,
            forks: EthereumChainHardforks::new(genesis_forks(EthereumHardfork::Osaka)),
            deposit_contract: None,
        }
    }

    /// A chain whose rules are Prague's from its genesis and whose later
    /// forks (Osaka and after) begin at the timestamps `later` gives.
    /// [`Error::Fork`] for a fork in `later` that is Prague or older, or a
    /// condition that is not a timestamp.
    pub fn with_later_forks(
        chain_id: u64,
        later: impl IntoIterator<Item = (EthereumHardfork, u64)>,
    ) -> Result<Chain, Error> {
        let mut forks = genesis_forks(EthereumHardfork::Prague);
        for (fork, timestamp) in later {
            if fork <= EthereumHardfork::Prague {
                return Err(Error::Fork(fork));
            }
            forks.push((fork, ForkCondition::Timestamp(timestamp)));
        }
        Ok(Chain {
            chain_id,
            forks: EthereumChainHardforks::new(forks),
            deposit_contract: None,
        })
    }

    /// The chain id transactions are signed for and the EVM runs with.
    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The rules a block with `number` and `timestamp` runs under.
    pub fn spec_at(&self, number: u64, timestamp: u64) -> SpecId {
        alloy_evm::spec_by_timestamp_and_block_number(self, timestamp, number)
    }

    /// The blob limits and fee a block at `timestamp` has, `None` before
    /// Cancun (the blob-parameter-only forks after Osaka are not scheduled).
    pub fn blob_params(&self, timestamp: u64) -> Option<BlobParams> {
        if self.is_osaka_active_at_timestamp(timestamp) {
            Some(BlobParams::osaka())
        } else if self.is_prague_active_at_timestamp(timestamp) {
            Some(BlobParams::prague())
        } else if self.is_cancun_active_at_timestamp(timestamp) {
            Some(BlobParams::cancun())
        } else {
            None
        }
    }

    /// revm's configuration and block environment for `header`.
    pub(crate) fn evm_env(&self, header: &Header) -> EvmEnv {
        EvmEnv::for_eth_block(
            header,
            self,
            self.chain_id,
            self.blob_params(header.timestamp),
        )
    }
}

/// Every fork through `last` from genesis, as a devnet starts.
fn genesis_forks(last: EthereumHardfork) -> Vec<(EthereumHardfork, ForkCondition)> {
    EthereumHardfork::devnet()
        .into_iter()
        .filter(|(fork, _)| *fork <= last)
        .collect()
}

impl EthereumHardforks for Chain {
    fn ethereum_fork_activation(&self, fork: EthereumHardfork) -> ForkCondition {
        self.forks.ethereum_fork_activation(fork)
    }
}

/// What alloy-evm's block executor asks of a chain: the deposit contract
/// whose logs become EIP-6110 requests (none here; the executor then reads
/// mainnet's address, where no contract is deployed on a new chain).
impl EthExecutorSpec for Chain {
    fn deposit_contract_address(&self) -> Option<Address> {
        self.deposit_contract
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_chain_runs_osaka_from_genesis_and_later_forks_begin_by_time() {
        let chain = Chain::new(7);
        assert_eq!(chain.chain_id(), 7);
        assert_eq!(chain.spec_at(1, 0), SpecId::OSAKA);
        let later = Chain::with_later_forks(7, [(EthereumHardfork::Osaka, 1_000)]).unwrap();
        assert_eq!(later.spec_at(1, 0), SpecId::PRAGUE);
        assert_eq!(later.spec_at(9, 999), SpecId::PRAGUE);
        assert_eq!(later.spec_at(10, 1_000), SpecId::OSAKA);
        assert_eq!(later.blob_params(999), Some(BlobParams::prague()));
        for early in [EthereumHardfork::Cancun, EthereumHardfork::Prague] {
            let refused = Chain::with_later_forks(7, [(early, 1_000)]);
            assert!(matches!(refused, Err(Error::Fork(f)) if f == early));
        }
    }
}
