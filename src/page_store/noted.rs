//! What the catalog keeps of a page (its id, as its note), and the index
//! open builds from those notes instead of reading every page.

use super::cache;
use crate::store::{Catalog, Target};
use crate::trie::page_id::PageId;
use crate::Error;

/// A page's catalog note: its id.
pub(super) fn note(id: &PageId, out: &mut Vec<u8>) {
    out.extend_from_slice(&id.encode());
}

/// Pages with their slots.
pub(super) type Located = Vec<(PageId, u32)>;

/// Indexes every page the catalog notes; returns the resident levels' pages,
/// to be read now, and the others.
pub(super) fn index_from(
    catalog: &Catalog,
    index: &mut impl FnMut(PageId, u64) -> Result<(), Error>,
) -> Result<(Located, Located), Error> {
    let (mut resident, mut others) = (Vec::new(), Vec::new());
    for (slot, note) in catalog.notes(Target::Pages) {
        let id = note
            .try_into()
            .map_err(|_| Error::corrupt("catalog note of a page"))
            .and_then(PageId::decode)
            .map_err(|e| e.at("catalog", slot as u64))?;
        index(id, slot as u64)?;
        match id.level() < cache::RESIDENT_LEVELS {
            true => resident.push((id, slot)),
            false => others.push((id, slot)),
        }
    }
    Ok((resident, others))
}
