//! Recovery at open: which commit is durable. Copy-on-write needs no replay:
//! the newest commit whose slot map is whole wins, and what it depends on is
//! synced again before anything builds on it.

use std::path::Path;
use std::sync::Arc;

use super::persist::write_meta;
use super::slot_map::{self, SlotMap};
use super::{meta, Durable, Meta, Target, MAP_FILES, TARGETS};
use crate::block::BLOCK_SIZE;
use crate::io::{DataFile, Io};
use crate::trie::TERMINATOR;
use crate::Error;

/// A directory written by format 2 has WAL files: refused before anything in
/// it is opened or created, so it stays exactly as it was.
pub(super) fn refuse_older_format(dir: &Path) -> Result<(), Error> {
    if dir.join("wal0").exists() || dir.join("wal1").exists() {
        return Err(Error::UnsupportedFormat {
            found: 2,
            supported: meta::VERSION,
        });
    }
    Ok(())
}

/// Finds the durable commit and its slot map.
///
/// The durable commit is the newest valid meta record, or the commit after it
/// if that one's map is whole: its meta record may have been torn or damaged
/// after the map's sync, the commit point. The chosen record is written and
/// synced again, and every file it depends on synced, so the state recovery
/// builds on is on disk even if the crashed process never saw its own syncs
/// succeed.
pub(super) fn recover(
    io: &Io,
    meta_file: &Arc<DataFile>,
    maps: &[Arc<DataFile>; 2],
    targets: &[Arc<DataFile>; TARGETS],
) -> Result<Durable, Error> {
    let meta_blocks = meta_file.blocks()?;
    let mut slots = [None, None];
    for (i, slot) in slots.iter_mut().enumerate() {
        if (i as u64) < meta_blocks {
            // Only checksum and magic failures (a torn write) are tolerated here.
            *slot = match Meta::decode(&*io.read(meta_file, (i * BLOCK_SIZE) as u64)?) {
                Ok(m) => m,
                Err(Error::Corrupt { .. }) => {
                    tracing::info!(slot = i, "recovery: a torn meta record was passed over");
                    None
                }
                Err(e) => return Err(e),
            };
        }
    }
    let base = match Meta::newest(slots)? {
        Some(m) => m,
        None => {
            for t in targets.iter().chain(maps) {
                if t.blocks()? > 0 {
                    return Err(Error::corrupt("data files without a valid meta record"));
                }
            }
            Meta {
                root: TERMINATOR,
                ..Meta::default()
            }
        }
    };
    let next = base
        .seqno
        .checked_add(1)
        .ok_or(Error::corrupt("meta record sequence number at its limit"))?;
    let at = |slot: u64| MAP_FILES[slot as usize];
    let (meta, map) = match slot_map::read(io, &maps[(next % 2) as usize], next)
        .map_err(|e| e.at(at(next % 2), 0))?
    {
        Some((meta, map)) if meta.prev_lengths == base.lengths => (meta, map),
        _ if base.seqno == 0 => (base, SlotMap::default()),
        _ => match slot_map::read(io, &maps[base.slot() as usize], base.seqno)
            .map_err(|e| e.at(at(base.slot()), 0))?
        {
            Some((meta, map)) if meta == base => (base, map),
            _ => {
                return Err(Error::corrupt("the durable commit's slot map is damaged")
                    .at(at(base.slot()), 0))
            }
        },
    };
    check_lengths(targets, &meta.lengths)?;
    // A map of a commit that did not become durable (its erasure may not
    // have been synced) must not come back after a later commit reuses the
    // slots it names.
    let other = &maps[(next % 2) as usize];
    if meta.seqno == base.seqno && other.blocks()? > 0 {
        other.erase()?;
    }
    if meta.seqno > base.seqno {
        tracing::info!(
            seqno = meta.seqno,
            "recovery: a durable commit whose meta record did not land was restored from its slot map"
        );
    }
    if meta.seqno > 0 {
        for file in targets.iter().chain([&maps[meta.slot() as usize]]) {
            file.sync()?;
        }
    }
    write_meta(io, meta_file, &meta)?;
    Ok(Durable { meta, map })
}

/// A seed nobody outside the process can predict.
pub(super) fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
}

fn check_lengths(
    targets: &[Arc<DataFile>; TARGETS],
    lengths: &[u64; TARGETS],
) -> Result<(), Error> {
    for (t, (target, len)) in targets.iter().zip(Target::ALL.iter().zip(lengths)) {
        if t.blocks()? < *len {
            return Err(
                Error::corrupt("data file shorter than committed").at(target.file_name(), *len)
            );
        }
    }
    Ok(())
}
