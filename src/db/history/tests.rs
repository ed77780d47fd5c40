//! The history's unit tests: undo records, their codec and the chain.

use std::sync::Arc;

use super::super::chain::*;
use super::*;
use crate::trie::KeyPath;

fn undo(seqno: u64, before: u8, after: u8, entries: &[(u8, Option<&[u8]>)]) -> Undo {
    let previous = entries
        .iter()
        .map(|(k, v)| ([*k; 32], v.map(<[u8]>::to_vec)))
        .collect();
    Undo::new(seqno, [before; 32], [after; 32], &previous, Vec::new()).unwrap()
}

/// A window of `n` commits, whatever their bytes.
fn commits(n: usize) -> Window {
    Window {
        commits: n,
        bytes: usize::MAX,
    }
}

fn records(items: Vec<(u64, Vec<u8>)>, head: u8, window: usize) -> Chain {
    let mut replay = Replay::new(commits(window));
    for (seqno, bytes) in items {
        replay.push(seqno, &bytes);
    }
    replay.finish(&[head; 32])
}

#[test]
fn spans_hold_values_at_the_limit_past_4_gib_in_all() {
    let max = crate::MAX_VALUE_LEN as usize;
    let mut spans = Spans(Vec::new());
    for _ in 0..5 {
        spans.push(Some(max));
    }
    spans.push(None);
    spans.push(Some(0));
    spans.push(Some(max));
    assert_eq!(spans.get(0), Some(0..max));
    assert_eq!(spans.get(4), Some(4 * max..5 * max));
    assert_eq!(spans.get(5), None);
    assert_eq!(spans.get(6), Some(5 * max..5 * max));
    assert_eq!(spans.get(7), Some(5 * max..6 * max));
    assert!(spans.end() > u32::MAX as u64);
}

#[test]
fn a_record_naming_more_value_than_it_holds_is_refused_unread() {
    let mut record = vec![UNDO];
    record.extend_from_slice(&[1; 32]);
    record.extend_from_slice(&[2; 32]);
    record.extend_from_slice(&1u64.to_le_bytes());
    record.extend_from_slice(&[3; 32]);
    let over = crate::MAX_VALUE_LEN as u32 + 1;
    let mut damaged = record.clone();
    damaged.extend_from_slice(&over.to_le_bytes());
    damaged.extend_from_slice(&[0; 64]);
    damaged.extend_from_slice(&0u32.to_le_bytes());
    assert!(decode(7, &damaged).is_none());
    // The same record naming a short value reads.
    record.extend_from_slice(&64u32.to_le_bytes());
    record.extend_from_slice(&[0; 64]);
    record.extend_from_slice(&0u32.to_le_bytes());
    assert!(matches!(decode(7, &record), Some(Record::Undo(_))));
}

#[test]
fn an_undo_round_trips_and_answers_by_key() {
    let u = undo(7, 1, 2, &[(1, None), (3, Some(b"")), (5, Some(b"five"))]);
    let Some(Record::Undo(back)) = decode(7, &u.encode().unwrap()) else {
        panic!("not an undo")
    };
    assert_eq!(back.encode().unwrap(), u.encode().unwrap());
    assert_eq!(back.get(&[1; 32]), Some(None));
    assert_eq!(back.get(&[3; 32]), Some(Some(&b""[..])));
    assert_eq!(back.get(&[5; 32]), Some(Some(&b"five"[..])));
    assert_eq!(back.get(&[4; 32]), None);
    let bytes = u.encode().unwrap();
    assert!(decode(7, &bytes[..bytes.len() - 1]).is_none());
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(decode(7, &longer).is_none());
}

#[test]
fn the_prefix_index_finds_every_key_and_no_other() {
    // Uniform keys, and clustered ones that share their first bytes.
    for spread in [true, false] {
        let keys: Vec<KeyPath> = (0..5000u32)
            .map(|i| {
                let mut k = [0u8; 32];
                let bytes = if spread {
                    *blake3::hash(&i.to_le_bytes()).as_bytes()
                } else {
                    k
                };
                k[..8].copy_from_slice(&bytes[..8]);
                k[28..].copy_from_slice(&i.to_be_bytes());
                k
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let previous = keys.iter().map(|k| (*k, Some(k[28..].to_vec()))).collect();
        let u = Undo::new(1, [0; 32], [1; 32], &previous, Vec::new()).unwrap();
        assert_eq!(u.index_bits, 12);
        for k in &keys {
            assert_eq!(u.get(k), Some(Some(&k[28..])));
            let mut other = *k;
            other[31] ^= 0x80;
            if keys.binary_search(&other).is_err() {
                assert_eq!(u.get(&other), None);
            }
        }
    }
}

#[test]
fn values_back_come_from_the_oldest_undo_that_names_the_key() {
    // Roots 1 -> 2 -> 3: key 9 was "a", then "b", now "c".
    let chain = Chain::default()
        .pushed(Arc::new(undo(1, 1, 2, &[(9, Some(b"a"))])), commits(8))
        .pushed(
            Arc::new(undo(2, 2, 3, &[(8, None), (9, Some(b"b"))])),
            commits(8),
        );
    let head = [3; 32];
    assert_eq!(chain.roots(&head), vec![[3; 32], [2; 32], [1; 32]]);
    assert_eq!(chain.depth_of(&head, &[1; 32]), Some(2));
    assert_eq!(chain.depth_of(&head, &[4; 32]), None);
    assert_eq!(chain.changed_value(0, &[9; 32]), None);
    assert_eq!(chain.changed_value(1, &[9; 32]), Some(Some(&b"b"[..])));
    assert_eq!(chain.changed_value(2, &[9; 32]), Some(Some(&b"a"[..])));
    assert_eq!(chain.changed_value(2, &[8; 32]), Some(None));
    assert_eq!(chain.changed_value(2, &[7; 32]), None);
    assert_eq!(
        chain.writes_back(2, |_| true),
        vec![([8; 32], None), ([9; 32], Some(b"a".to_vec()))]
    );
    assert_eq!(chain.popped(1).roots(&[2; 32]), vec![[2; 32], [1; 32]]);
    assert_eq!(
        chain
            .pushed(Arc::new(undo(3, 3, 4, &[])), commits(2))
            .roots(&[4; 32])
            .len(),
        3
    );
}

#[test]
fn replay_applies_rollbacks_and_keeps_only_what_links_to_the_head() {
    let items = vec![
        (1, undo(1, 0, 1, &[]).encode().unwrap()),
        (2, undo(2, 1, 2, &[]).encode().unwrap()),
        (3, undo(3, 2, 3, &[]).encode().unwrap()),
        (4, rollback_record(2)),
        (5, undo(5, 1, 5, &[]).encode().unwrap()),
    ];
    let chain = records(items.clone(), 5, 64);
    assert_eq!(chain.roots(&[5; 32]), vec![[5; 32], [1; 32], [0; 32]]);
    assert_eq!(chain.keep_from(6), 1);
    assert_eq!(records(items.clone(), 5, 1).len(), 1);
    // Window 2: undo 1 had left when the rollback came.
    assert_eq!(
        records(items.clone(), 5, 2).roots(&[5; 32]),
        vec![[5; 32], [1; 32]]
    );
    // A head the records do not lead to: nothing links.
    assert_eq!(records(items.clone(), 9, 64).len(), 0);
    // A gap (commits without records): only what is after it links.
    let gap = vec![items[0].clone(), (7, undo(7, 6, 7, &[]).encode().unwrap())];
    assert_eq!(records(gap, 7, 64).roots(&[7; 32]), vec![[7; 32], [6; 32]]);
    // A record that does not decode ends what came before it.
    let mut bad = items.clone();
    bad.insert(4, (4, vec![9, 9]));
    assert_eq!(records(bad, 5, 64).roots(&[5; 32]), vec![[5; 32], [1; 32]]);
}
