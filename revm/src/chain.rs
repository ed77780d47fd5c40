//! The chain's configuration: its id, which transactions are signed for,
//! and its fork schedule, which picks the rules each block runs under.

use alloy_eips::eip7840::BlobParams;
use alloy_evm::eth::spec::EthExecutorSpec;
use alloy_evm::EvmEnv;
use alloy_hardforks::{EthereumChainHardforks, EthereumHardfork, EthereumHardforks, ForkCondition};
use revm::primitives::hardfork::SpecId;
use revm::primitives::Address;

use crate::Header;

/// A chain: its id and the blocks or times its forks begin at.
///
/// The key layout relies on Cancun's self-destruct rules (EIP-6780): a
/// block under older rules that self-destructs an account created before
/// it fails with [`crate::Error::StorageWipe`] (see the crate docs).
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
        let forks = EthereumHardfork::devnet()
            .into_iter()
            .filter(|(fork, _)| *fork <= EthereumHardfork::Osaka);
        Chain::with_forks(chain_id, forks)
    }

    /// A chain whose forks begin where `forks` says: by block number up to
    /// London, by total difficulty for Paris, by timestamp from Shanghai
    /// on, as Ethereum's own schedules are written
    /// ([`EthereumHardfork::mainnet`] is mainnet's). Forks not listed never
    /// begin.
    pub fn with_forks(
        chain_id: u64,
        forks: impl IntoIterator<Item = (EthereumHardfork, ForkCondition)>,
    ) -> Chain {
        Chain {
            chain_id,
            forks: EthereumChainHardforks::new(forks),
            deposit_contract: None,
        }
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
    fn a_new_chain_runs_osaka_from_genesis_and_a_schedule_picks_by_time() {
        let chain = Chain::new(7);
        assert_eq!(chain.chain_id(), 7);
        assert_eq!(chain.spec_at(1, 0), SpecId::OSAKA);
        let mainnet = Chain::with_forks(1, EthereumHardfork::mainnet());
        assert_eq!(mainnet.spec_at(1, 1), SpecId::FRONTIER);
        let cancun = alloy_hardforks::mainnet::MAINNET_CANCUN_TIMESTAMP;
        assert_eq!(mainnet.spec_at(19_500_000, cancun), SpecId::CANCUN);
        assert_eq!(mainnet.spec_at(19_500_000, cancun - 1), SpecId::SHANGHAI);
        assert!(mainnet.blob_params(cancun - 1).is_none());
    }
}
