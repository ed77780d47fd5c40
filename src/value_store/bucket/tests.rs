//! The bucket format's tests: round trips, damage, patches in place.

use super::*;

#[test]
fn round_trip_and_damage() {
    let entries = vec![
        BucketEntry {
            key: [1; 32],
            stored: Stored::Inline(InlineValue::new(&[])),
        },
        BucketEntry {
            key: [2; 32],
            stored: Stored::Inline(InlineValue::new(&[7; INLINE_MAX])),
        },
        BucketEntry {
            key: [3; 32],
            stored: Stored::Inline(InlineValue::new(&[5; SHORT_MAX])),
        },
        BucketEntry {
            key: [4; 32],
            stored: Stored::Overflow {
                len: 99_999,
                hash: [9; 32],
                start: 12,
            },
        },
    ];
    let b = encode(&entries, 5);
    verify(&b).unwrap();
    assert_eq!(decode(&b).unwrap(), entries);
    for at in [0, 6, 20, 60, 400, 4090] {
        let mut bad = b.clone();
        bad.0[at] ^= 1;
        assert!(verify(&bad).is_err(), "byte {at}");
        // Unverified damage reads as an error or as other entries, never a panic.
        let _ = decode(&bad);
    }
}

/// Damage that keeps the checksum valid (a buggy writer, not the disk):
/// what only the entry walk of `verify` can catch.
#[test]
fn verify_walks_every_entry() {
    let entry = |k: u8| BucketEntry {
        key: [k; 32],
        stored: Stored::Inline(InlineValue::new(&[k])),
    };
    let resum = |b: &mut BlockBuf| {
        let sum = b.checksum(CHECKSUM);
        b.put_u64(CHECKSUM, sum);
    };
    let mut unordered = encode(&[entry(1), entry(2)], 1);
    unordered.0[HEADER..HEADER + 32].copy_from_slice(&[3; 32]);
    resum(&mut unordered);
    assert!(verify(&unordered).is_err());
    let mut too_many = encode(&[entry(1)], 1);
    too_many.0[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
    resum(&mut too_many);
    assert!(verify(&too_many).is_err());
    assert!(decode(&too_many).is_err());
}

/// `entries_from` and `find` start where a full walk would reach the
/// key: keys sharing their first word, inline and overflow values alike.
#[test]
fn seek_agrees_with_a_full_walk() {
    let key = |first: u8, last: u8| {
        let mut k = [0; 32];
        k[0] = first;
        k[31] = last;
        k
    };
    let mut keys = Vec::new();
    for first in [2, 4] {
        for last in [1, 3, 5] {
            keys.push(key(first, last));
        }
    }
    let entries: Vec<BucketEntry> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| BucketEntry {
            key: *k,
            stored: match i % 3 {
                0 => Stored::Inline(InlineValue::new(&[i as u8; 40])),
                1 => Stored::Overflow {
                    len: 1000,
                    hash: [i as u8; 32],
                    start: i as u64,
                },
                _ => Stored::Inline(InlineValue::new(&[])),
            },
        })
        .collect();
    let b = encode(&entries, 1);
    for first in 0..6 {
        for last in 0..7 {
            let from = key(first, last);
            let walked: Vec<KeyPath> = entries
                .iter()
                .map(|e| e.key)
                .filter(|k| *k >= from)
                .collect();
            let sought: Vec<KeyPath> = entries_from(&b, &from)
                .unwrap()
                .map(|e| e.unwrap().key)
                .collect();
            assert_eq!(sought, walked, "from {first}/{last}");
            let found = find(&b, &from).unwrap();
            assert_eq!(found.as_ref(), entries.iter().find(|e| e.key == from));
        }
    }
}

/// `patch` writes same-length values over in place and gives the old
/// ones back; anything else (insert, delete, resize, a value in
/// overflow space, a key past the last) is left to a full rewrite.
#[test]
fn patch_writes_over_same_length_values_only() {
    let inline = |k: u8, v: &[u8]| BucketEntry {
        key: [k; 32],
        stored: Stored::Inline(InlineValue::new(v)),
    };
    let overflow = BucketEntry {
        key: [5; 32],
        stored: Stored::Overflow {
            len: 5000,
            hash: [1; 32],
            start: 7,
        },
    };
    let entries = vec![
        inline(1, &[1; 8]),
        inline(3, &[3; 8]),
        overflow.clone(),
        inline(7, &[]),
    ];
    let b = encode(&entries, 4);
    let change = |k: u8, v: Option<&[u8]>| ([k; 32], v.map(<[u8]>::to_vec));
    let patched = patch(&b, &[change(1, Some(&[9; 8])), change(7, Some(&[]))], 6)
        .unwrap()
        .unwrap();
    verify(&patched.block).unwrap();
    let mut want = entries.clone();
    want[0] = inline(1, &[9; 8]);
    assert_eq!(decode(&patched.block).unwrap(), want);
    assert_eq!(encode(&want, 6).0, patched.block.0);
    assert_eq!(patched.previous, vec![vec![1; 8], vec![]]);
    assert_eq!(patched.payload, payload_len(&entries));
    assert_eq!(patched.extents, vec![overflow.stored.extent().unwrap()]);
    for refused in [
        vec![change(2, Some(&[0; 8]))],
        vec![change(3, None)],
        vec![change(3, Some(&[0; 9]))],
        vec![change(5, Some(&[0; 8]))],
        vec![change(1, Some(&[0; 8])), change(9, Some(&[0; 8]))],
    ] {
        assert!(patch(&b, &refused, 6).unwrap().is_none());
    }
    // A key sharing its first word with a stored one is not taken for it.
    let mut near = [1; 32];
    near[31] = 2;
    assert!(patch(&b, &[(near, Some(vec![0; 8]))], 6).unwrap().is_none());
    // Entries counted past the block's end are reported, not passed.
    let mut damaged = b.clone();
    damaged.0[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(patch(&damaged, &[change(9, Some(&[0; 8]))], 6).is_err());
}

/// A seek that meets an entry running past the block reports it, as a
/// full walk does, instead of stepping over it.
#[test]
fn a_seek_reports_an_entry_out_of_bounds() {
    let entry = |k: u8| BucketEntry {
        key: [k; 32],
        stored: Stored::Inline(InlineValue::new(&[k; 8])),
    };
    let entries: Vec<BucketEntry> = (1..=99).map(entry).collect();
    let mut b = encode(&entries, 1);
    // The last entry (41 bytes from 4034) now says its value runs past
    // the block.
    let last = HEADER + 98 * 41;
    b.0[last + 32] = 200;
    let past = [100; 32];
    assert!(entries_from(&b, &past).unwrap().any(|e| e.is_err()));
    assert!(find(&b, &past).is_err());
}
