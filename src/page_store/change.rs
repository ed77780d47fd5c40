//! A page's version as a commit changes it, and its encoding in the
//! history's records (an undo keeps the top pages as a commit found them).

use std::sync::Arc;

use crate::block::Block;
use crate::bytes::Cursor;
use crate::trie::page::{Page, PAGE_SIZE};
use crate::trie::page_id::PageId;

/// A page's version by id: its contents, or `None` where it does not exist.
/// A commit's trie update yields its new pages as these, and an undo keeps
/// the old ones.
pub(crate) type PageChange = (PageId, Option<Arc<Page>>);

/// A page a commit's trie update changed.
#[derive(Clone)]
pub(crate) struct ChangedPage {
    pub(crate) id: PageId,
    /// Its new version; `None` deletes it.
    pub(crate) page: Option<Arc<Page>>,
    /// The update took the old version out of the page cache to change it
    /// in place ([`super::PageStore::take_to_change`]): it is stored.
    pub(crate) taken: bool,
}

/// The pages a commit changes, each once.
pub(crate) type PageChanges = Vec<ChangedPage>;

/// Bytes a [`PageChange`] takes in a record ([`encode_change`]) at most.
pub(crate) const CHANGE_RECORD_BYTES: usize = 33 + PAGE_SIZE;

/// RAM a [`PageChange`] holds at most.
pub(crate) const CHANGE_RAM_BYTES: usize = std::mem::size_of::<PageChange>() + PAGE_SIZE;

/// Appends `change` to a record of the layer above (the history's undo, which
/// keeps the top pages as a commit found them): the page's id, whether it
/// existed, and its block if it did.
pub(crate) fn encode_change(out: &mut Vec<u8>, (id, page): &PageChange) {
    out.extend_from_slice(&id.encode());
    out.push(u8::from(page.is_some()));
    if let Some(page) = page {
        out.extend_from_slice(page.as_bytes());
    }
}

/// The change [`encode_change`] wrote at the front of `bytes`; `None` if it
/// does not parse or its block is not a valid page of its id.
pub(crate) fn decode_change(bytes: &mut Cursor<'_>) -> Option<PageChange> {
    let id = PageId::decode(&bytes.array()?).ok()?;
    let page = match bytes.u8()? {
        0 => None,
        1 => {
            let mut block = Block::zeroed();
            block.0.copy_from_slice(bytes.take(PAGE_SIZE)?);
            let page = Page::from_block(block);
            page.check(&id).ok()?;
            Some(Arc::new(page))
        }
        _ => return None,
    };
    Some((id, page))
}

/// Seals the pages of `changes` that nothing else holds yet, before an
/// overlay shares them: a commit then writes each from where it lies and
/// caches it as it is, instead of a copy ([`super::PageStore::plan`]).
pub(crate) fn seal_shared(changes: &mut PageChanges) {
    for page in changes.iter_mut().filter_map(|change| change.page.as_mut()) {
        if let Some(page) = Arc::get_mut(page) {
            page.seal();
        }
    }
}
