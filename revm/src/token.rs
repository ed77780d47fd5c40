//! A small token contract in EVM bytecode: `transfer(address,uint256)` and
//! `balanceOf(address)` over a balance mapping at storage slot 0, laid out
//! as Solidity lays out `mapping(address => uint256)`: holder `a`'s balance
//! is at slot keccak256(a as 32 bytes ‖ 0 as 32 bytes).
//!
//! There is no compiler here, so the bytes are written by hand; the
//! assembly beside them is their source. `transfer` reverts when the sender
//! holds less than the amount, and every call reverts with value attached.
//! Balances add without an overflow check: the supply is fixed at
//! deployment, far below 2^256.

use revm::bytecode::Bytecode;
use revm::primitives::{keccak256, Address, Bytes, U256};

/// `transfer(address,uint256)`'s selector.
pub const TRANSFER: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];
/// `balanceOf(address)`'s selector.
pub const BALANCE_OF: [u8; 4] = [0x70, 0xa0, 0x82, 0x31];

/// The deployed code. Offsets are in hex; stacks are shown top last.
#[rustfmt::skip]
pub const RUNTIME: [u8; 166] = [
    // 00: selector = calldata[0..4]
    0x60, 0x00,                   // PUSH1 0
    0x35,                         // CALLDATALOAD
    0x60, 0xe0,                   // PUSH1 224
    0x1c,                         // SHR                  [sel]
    // 06: not payable
    0x34,                         // CALLVALUE
    0x61, 0x00, 0x20,             // PUSH2 fail
    0x57,                         // JUMPI                [sel]
    // 0b: dispatch
    0x80,                         // DUP1
    0x63, 0xa9, 0x05, 0x9c, 0xbb, // PUSH4 transfer(address,uint256)
    0x14,                         // EQ
    0x61, 0x00, 0x25,             // PUSH2 transfer
    0x57,                         // JUMPI                [sel]
    0x63, 0x70, 0xa0, 0x82, 0x31, // PUSH4 balanceOf(address)
    0x14,                         // EQ
    0x61, 0x00, 0x76,             // PUSH2 balanceOf
    0x57,                         // JUMPI                []
    // 20: fail: revert(0, 0)
    0x5b,                         // JUMPDEST
    0x60, 0x00,                   // PUSH1 0
    0x80,                         // DUP1
    0xfd,                         // REVERT
    // 25: transfer: from = keccak(caller ‖ 0)
    0x5b,                         // JUMPDEST             [sel]
    0x33,                         // CALLER
    0x60, 0x00,                   // PUSH1 0
    0x52,                         // MSTORE               mem[0] = caller
    0x60, 0x00,                   // PUSH1 0
    0x60, 0x20,                   // PUSH1 32
    0x52,                         // MSTORE               mem[32] = 0 (the mapping's slot)
    0x60, 0x40,                   // PUSH1 64
    0x60, 0x00,                   // PUSH1 0
    0x20,                         // SHA3                 [sel, from]
    0x80,                         // DUP1
    0x54,                         // SLOAD                [sel, from, bal]
    0x60, 0x24,                   // PUSH1 36
    0x35,                         // CALLDATALOAD         [sel, from, bal, amount]
    0x80,                         // DUP1
    0x82,                         // DUP3                 [.., bal, amount, amount, bal]
    0x10,                         // LT                   bal < amount
    0x61, 0x00, 0x20,             // PUSH2 fail
    0x57,                         // JUMPI                [sel, from, bal, amount]
    0x80,                         // DUP1
    0x91,                         // SWAP2                [sel, from, amount, amount, bal]
    0x03,                         // SUB                  [sel, from, amount, bal - amount]
    0x82,                         // DUP3
    0x55,                         // SSTORE               storage[from] = bal - amount
    // 45: to = keccak(calldata[4..36] as an address ‖ 0)
    0x60, 0x04,                   // PUSH1 4
    0x35,                         // CALLDATALOAD
    0x73, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
          0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  // PUSH20 2^160 - 1
    0x16,                         // AND                  [sel, from, amount, to]
    0x60, 0x00,                   // PUSH1 0
    0x52,                         // MSTORE               mem[0] = to; mem[32] is still 0
    0x60, 0x40,                   // PUSH1 64
    0x60, 0x00,                   // PUSH1 0
    0x20,                         // SHA3                 [sel, from, amount, toslot]
    0x80,                         // DUP1
    0x54,                         // SLOAD                [.., amount, toslot, tobal]
    0x82,                         // DUP3
    0x01,                         // ADD                  [.., amount, toslot, tobal + amount]
    0x90,                         // SWAP1
    0x55,                         // SSTORE               storage[to] += amount
    // 6c: return true
    0x60, 0x01,                   // PUSH1 1
    0x60, 0x00,                   // PUSH1 0
    0x52,                         // MSTORE
    0x60, 0x20,                   // PUSH1 32
    0x60, 0x00,                   // PUSH1 0
    0xf3,                         // RETURN               (mem[0..32])
    // 76: balanceOf: return storage[keccak(calldata[4..36] as an address ‖ 0)]
    0x5b,                         // JUMPDEST             [sel]
    0x60, 0x04,                   // PUSH1 4
    0x35,                         // CALLDATALOAD
    0x73, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
          0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  // PUSH20 2^160 - 1
    0x16,                         // AND
    0x60, 0x00,                   // PUSH1 0
    0x52,                         // MSTORE               mem[0] = holder
    0x60, 0x00,                   // PUSH1 0
    0x60, 0x20,                   // PUSH1 32
    0x52,                         // MSTORE               mem[32] = 0
    0x60, 0x40,                   // PUSH1 64
    0x60, 0x00,                   // PUSH1 0
    0x20,                         // SHA3
    0x54,                         // SLOAD
    0x60, 0x00,                   // PUSH1 0
    0x52,                         // MSTORE
    0x60, 0x20,                   // PUSH1 32
    0x60, 0x00,                   // PUSH1 0
    0xf3,                         // RETURN               (mem[0..32])
];

/// The init code that deploys [`RUNTIME`] and credits the deployer with
/// `supply` tokens.
pub fn deploy_code(supply: u32) -> Bytes {
    let s = supply.to_be_bytes();
    #[rustfmt::skip]
    let init: [u8; 31] = [
        // 00: storage[keccak(caller ‖ 0)] = supply
        0x63, s[0], s[1], s[2], s[3], // PUSH4 supply
        0x33,                         // CALLER
        0x60, 0x00,                   // PUSH1 0
        0x52,                         // MSTORE
        0x60, 0x00,                   // PUSH1 0
        0x60, 0x20,                   // PUSH1 32
        0x52,                         // MSTORE
        0x60, 0x40,                   // PUSH1 64
        0x60, 0x00,                   // PUSH1 0
        0x20,                         // SHA3                 [supply, slot]
        0x55,                         // SSTORE
        // 14: return the runtime code, which follows this code (at 1f)
        0x60, 0xa6,                   // PUSH1 166 (the runtime's length)
        0x80,                         // DUP1
        0x60, 0x1f,                   // PUSH1 31 (this code's length)
        0x60, 0x00,                   // PUSH1 0
        0x39,                         // CODECOPY             mem[0..166] = runtime
        0x60, 0x00,                   // PUSH1 0
        0xf3,                         // RETURN
    ];
    [&init[..], &RUNTIME[..]].concat().into()
}

/// The deployed code, as revm runs it.
pub fn runtime() -> Bytecode {
    Bytecode::new_legacy(Bytes::from_static(&RUNTIME))
}

/// The storage slot of `holder`'s balance.
pub fn balance_slot(holder: &Address) -> U256 {
    let mut input = [0u8; 64];
    input[12..32].copy_from_slice(holder.as_slice());
    U256::from_be_bytes(keccak256(input).0)
}

/// Call data of `transfer(to, amount)`.
pub fn transfer_call(to: &Address, amount: U256) -> Bytes {
    let mut data = Vec::with_capacity(68);
    data.extend_from_slice(&TRANSFER);
    data.extend_from_slice(&[0; 12]);
    data.extend_from_slice(to.as_slice());
    data.extend_from_slice(&amount.to_be_bytes::<32>());
    data.into()
}

/// Call data of `balanceOf(holder)`.
pub fn balance_of_call(holder: &Address) -> Bytes {
    let mut data = Vec::with_capacity(36);
    data.extend_from_slice(&BALANCE_OF);
    data.extend_from_slice(&[0; 12]);
    data.extend_from_slice(holder.as_slice());
    data.into()
}
