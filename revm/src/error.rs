//! The crate's one error type: pagetrie's errors, values the layout cannot
//! decode, blocks revm refuses, and everything a stateless check rejects.

use std::fmt;

use pagetrie::KeyPath;
use revm::database_interface::DBErrorMarker;
use revm::primitives::Address;

use crate::HeaderError;

/// Everything that can go wrong executing on pagetrie or checking a block
/// statelessly.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// pagetrie failed: I/O, a stale session, a proof that does not verify
    /// against its root ([`pagetrie::Error::RootMismatch`]), ...
    Pagetrie(pagetrie::Error),
    /// A stored value the key layout does not decode.
    Corrupt {
        /// The key it is stored under.
        key: KeyPath,
        /// What is wrong with it.
        what: &'static str,
    },
    /// revm refused transaction `index` of the block (nonce, funds, gas, ...)
    /// or could not run it: the block is invalid.
    InvalidTransaction {
        /// Its position in the block.
        index: usize,
        /// revm's reason.
        reason: String,
    },
    /// Transaction `index` may use more gas than the block has left (its
    /// header's limit less what the transactions before it used), so it is
    /// refused before it runs: the block is invalid.
    BlockGasLimit {
        /// Its position in the block.
        index: usize,
        /// The gas limit it asks for.
        gas_limit: u64,
        /// The gas the block has left for it.
        available: u64,
    },
    /// [`crate::StateDb::finish`] on a block whose execution failed: its
    /// writes were dropped, none reached the session.
    BlockFailed,
    /// Re-execution read a key the witness does not cover: the witness is
    /// not the block's, or the block is not the one the witness was made for.
    KeyNotCovered(KeyPath),
    /// The witness proves the key holds a value, and none was shipped.
    MissingValue(KeyPath),
    /// A shipped value whose hash is not the one the witness proves.
    ValueMismatch(KeyPath),
    /// A value shipped for a key the witness proves absent.
    UnprovenValue(KeyPath),
    /// The block's header is not the one its parent and contents imply.
    Header(HeaderError),
    /// No sender recovers from transaction `index`'s signature.
    InvalidSignature {
        /// Its position in the block.
        index: usize,
    },
    /// A system call, a withdrawal or a request of the block failed: the
    /// block is invalid.
    Execution(String),
    /// What a [`crate::StateDb`] answers revm when reading `key` failed; the
    /// failure itself is what [`crate::execute_block`] and
    /// [`crate::StateDb::finish`] return.
    ReadFailed(KeyPath),
    /// Re-executing the block led to another root than the one it claims.
    RootMismatch {
        /// The root the block claims.
        claimed: pagetrie::Node,
        /// The root its re-execution computed.
        computed: pagetrie::Node,
    },
    /// An account self-destructed that was not created in the same
    /// transaction (rules before Cancun): its older storage slots are not in
    /// the journal, and the layout does not find them (see the crate docs).
    StorageWipe(Address),
    /// A fork a [`crate::Chain`] can't begin after its genesis: Prague and
    /// every fork before it hold from genesis on.
    Fork(alloy_hardforks::EthereumHardfork),
    /// A block whose RLP encoding is longer than Osaka allows (EIP-7934).
    BlockTooLarge {
        /// Its encoded length.
        size: usize,
        /// The most allowed.
        max: usize,
    },
    /// A secret key that is none, or a signature that could not be made.
    Key(&'static str),
    /// Bytes of a block proof that do not decode.
    Malformed(&'static str),
}

impl From<HeaderError> for Error {
    fn from(e: HeaderError) -> Error {
        Error::Header(e)
    }
}

impl From<pagetrie::Error> for Error {
    fn from(e: pagetrie::Error) -> Error {
        Error::Pagetrie(e)
    }
}

/// revm's in-memory database cannot fail; its executions report through the
/// same type.
impl From<std::convert::Infallible> for Error {
    fn from(e: std::convert::Infallible) -> Error {
        match e {}
    }
}

impl DBErrorMarker for Error {}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Pagetrie(e) => write!(f, "pagetrie: {e}"),
            Error::Corrupt { key, what } => write!(f, "value at {} is corrupt: {what}", hex(key)),
            Error::InvalidTransaction { index, reason } => {
                write!(f, "transaction {index} is invalid: {reason}")
            }
            Error::BlockGasLimit {
                index,
                gas_limit,
                available,
            } => write!(
                f,
                "transaction {index} asks for {gas_limit} gas, the block has {available} left"
            ),
            Error::BlockFailed => write!(
                f,
                "the block failed to execute; its writes were dropped, not finished"
            ),
            Error::KeyNotCovered(key) => {
                write!(f, "the witness does not cover key {}", hex(key))
            }
            Error::MissingValue(key) => {
                write!(
                    f,
                    "no value shipped for key {}, which the witness proves present",
                    hex(key)
                )
            }
            Error::ValueMismatch(key) => {
                write!(
                    f,
                    "the value shipped for key {} is not the proven one",
                    hex(key)
                )
            }
            Error::UnprovenValue(key) => {
                write!(
                    f,
                    "a value shipped for key {}, which the witness proves absent",
                    hex(key)
                )
            }
            Error::Header(e) => write!(f, "invalid header: {e}"),
            Error::InvalidSignature { index } => {
                write!(f, "no sender recovers from transaction {index}'s signature")
            }
            Error::Execution(e) => write!(f, "the block failed: {e}"),
            Error::ReadFailed(key) => write!(f, "reading key {} failed", hex(key)),
            Error::RootMismatch { claimed, computed } => write!(
                f,
                "re-execution computed root {}, the block claims {}",
                hex(computed),
                hex(claimed)
            ),
            Error::StorageWipe(address) => write!(
                f,
                "account {address} self-destructed without being created in the same \
                 transaction; its storage cannot be wiped (needs Cancun rules or later)"
            ),
            Error::Fork(fork) => write!(
                f,
                "{fork} holds from genesis on; only forks after Prague begin later"
            ),
            Error::BlockTooLarge { size, max } => {
                write!(
                    f,
                    "the block's encoding takes {size} bytes, more than {max}"
                )
            }
            Error::Key(what) => write!(f, "wallet: {what}"),
            Error::Malformed(what) => write!(f, "malformed block proof: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Pagetrie(e) => Some(e),
            Error::Header(e) => Some(e),
            _ => None,
        }
    }
}

/// Lower-case hex of `bytes`, for messages.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
