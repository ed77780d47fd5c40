//! Signing transactions with a secp256k1 key, as a wallet does: what a
//! producer's tests, the node example and a user's tools need to make
//! blocks whose senders the verifier recovers.

use alloy_consensus::{SignableTransaction, Signed, TxEnvelope};
use alloy_eips::eip7702::{Authorization, SignedAuthorization};
use alloy_primitives::{keccak256, Address, Signature};
use k256::ecdsa::SigningKey;

use crate::Error;

/// A secp256k1 key and the address it signs for.
#[derive(Clone)]
pub struct Wallet {
    key: SigningKey,
    address: Address,
}

impl Wallet {
    /// The wallet of a 32-byte secret key; [`Error::Key`] if it is zero or
    /// not below the curve's order.
    pub fn from_secret(secret: &[u8; 32]) -> Result<Wallet, Error> {
        let key =
            SigningKey::from_slice(secret).map_err(|_| Error::Key("not a secp256k1 secret key"))?;
        let address = Address::from_private_key(&key);
        Ok(Wallet { key, address })
    }

    /// A wallet derived from `seed` (keccak256 of it, hashed again in the
    /// vanishing case that is no key): for tests and examples, never for
    /// funds.
    pub fn derive(seed: u64) -> Wallet {
        let mut secret = keccak256(seed.to_be_bytes());
        loop {
            if let Ok(wallet) = Wallet::from_secret(&secret.0) {
                return wallet;
            }
            secret = keccak256(secret);
        }
    }

    /// The address its transactions come from.
    pub fn address(&self) -> Address {
        self.address
    }

    /// `tx` signed: any of alloy's transaction types (legacy, EIP-2930,
    /// EIP-1559, EIP-4844, EIP-7702), with the chain id it carries.
    pub fn sign<T>(&self, tx: T) -> Result<TxEnvelope, Error>
    where
        T: SignableTransaction<Signature>,
        Signed<T>: Into<TxEnvelope>,
    {
        let signature = self.sign_hash(&tx.signature_hash())?;
        Ok(tx.into_signed(signature).into())
    }

    /// `authorization` signed (EIP-7702): this wallet's account runs the
    /// code at its address once a transaction carries it.
    pub fn sign_authorization(
        &self,
        authorization: Authorization,
    ) -> Result<SignedAuthorization, Error> {
        let signature = self.sign_hash(&authorization.signature_hash())?;
        Ok(authorization.into_signed(signature))
    }

    fn sign_hash(&self, hash: &alloy_primitives::B256) -> Result<Signature, Error> {
        let (signature, recovery) = self
            .key
            .sign_prehash_recoverable(hash.as_slice())
            .map_err(|_| Error::Key("signing failed"))?;
        Ok(Signature::from_signature_and_parity(
            signature,
            recovery.is_y_odd(),
        ))
    }
}

impl std::fmt::Debug for Wallet {
    /// The address only: the key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wallet")
            .field("address", &self.address)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use alloy_consensus::transaction::SignerRecoverable;
    use alloy_consensus::TxEip1559;
    use revm::primitives::{TxKind, U256};

    use super::*;

    #[test]
    fn a_signed_transaction_recovers_its_wallet_and_a_zero_key_is_refused() {
        let wallet = Wallet::derive(1);
        let tx = TxEip1559 {
            chain_id: 7,
            to: TxKind::Call(Address::repeat_byte(2)),
            value: U256::from(3),
            gas_limit: 21_000,
            max_fee_per_gas: 10,
            ..TxEip1559::default()
        };
        let signed = wallet.sign(tx).unwrap();
        assert_eq!(signed.recover_signer().unwrap(), wallet.address());
        assert_ne!(Wallet::derive(2).address(), wallet.address());
        assert!(matches!(Wallet::from_secret(&[0; 32]), Err(Error::Key(_))));
    }
}
