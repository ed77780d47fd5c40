//! What both stores share about their blocks in RAM: whether a block read
//! from disk still belongs to the published state.

/// The published state's guard for readers on other threads.
///
/// A commit writes only slots the published state does not use, but once it
/// is published it frees slots that the next commit may overwrite. A reader
/// notes the generation before its disk read and uses (or caches) the block
/// only if no publish came in between; otherwise it looks again.
#[derive(Default)]
pub(crate) struct Published {
    generation: u64,
}

impl Published {
    /// Taken before a read: [`Published::is_current`] checks it after.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether blocks read since `generation` are still the published ones.
    pub(crate) fn is_current(&self, generation: u64) -> bool {
        self.generation == generation
    }

    /// A planned commit is published: readers that began before look again.
    pub(crate) fn publish(&mut self) {
        self.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publish_sends_readers_back() {
        let mut p = Published::default();
        let seen = p.generation();
        assert!(p.is_current(seen));
        p.publish();
        assert!(!p.is_current(seen));
    }
}
