//! A database directory as the layers above see it: its files opened with the
//! fault plan attached, read whole, and replaced or removed durably. Every
//! file the store reads or writes goes through here or through [`DataFile`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::file::{sync_dir, DataFile};
use crate::block::{Block, BLOCK_SIZE};
use crate::Error;

/// Blocks read per call when a file is read whole: large enough to cost few
/// calls, small enough that the aligned buffer is beside the point.
const READ_BATCH: usize = 256;

/// An open database directory's path, and the faults its files carry.
pub(crate) struct Dir {
    path: PathBuf,
    #[cfg(any(test, feature = "fault-injection"))]
    faults: Option<Arc<super::faults::Faults>>,
}

impl Dir {
    /// The directory at `path`.
    pub(crate) fn new(path: &Path) -> Dir {
        Dir {
            path: path.to_path_buf(),
            #[cfg(any(test, feature = "fault-injection"))]
            faults: None,
        }
    }

    /// The same directory, whose files get `faults`.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn with_faults(self, faults: Option<Arc<super::faults::Faults>>) -> Dir {
        Dir { faults, ..self }
    }

    /// Opens (creating if absent) the file `name`.
    pub(crate) fn open(&self, name: &str) -> Result<Arc<DataFile>, Error> {
        #[allow(unused_mut)]
        let mut file = DataFile::open(&self.path.join(name))?;
        #[cfg(any(test, feature = "fault-injection"))]
        {
            file.faults = self.faults.clone();
        }
        Ok(Arc::new(file))
    }

    /// Opens the file `name`, which must exist.
    pub(crate) fn open_existing(&self, name: &str) -> Result<Arc<DataFile>, Error> {
        if !self.path.join(name).exists() {
            let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
            return Err(Error::io("opening", name, missing));
        }
        self.open(name)
    }

    /// The whole of the file `name`, torn tail included; `None` if it does
    /// not exist (it is not created).
    pub(crate) fn read(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        if !self.path.join(name).exists() {
            return Ok(None);
        }
        self.open(name)?.read_bytes(0, u64::MAX).map(Some)
    }

    /// Replaces the file `name` with `bytes`, durably: written whole to
    /// `<name>.new` in blocks (the last one zero-padded), synced, renamed
    /// over `name`, the directory synced. After a crash `name` is the old
    /// file or the new one, whole; [`Dir::read`] gives back `bytes` padded to
    /// a whole block.
    pub(crate) fn write_whole(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let new = format!("{name}.new");
        let file = self.open(&new)?;
        file.truncate(0)?;
        for (i, part) in bytes.chunks(BLOCK_SIZE).enumerate() {
            let mut block = Block([0; BLOCK_SIZE]);
            block.0[..part.len()].copy_from_slice(part);
            file.write_block(&block, (i * BLOCK_SIZE) as u64)
                .map_err(|e| Error::io("writing", &new, e))?;
        }
        file.sync()?;
        drop(file);
        self.replace(&new, name)
    }

    /// Renames `from` over `to`, then syncs the directory: after a crash
    /// `to` is the old file or the new one, whole. [`Dir::rename`] and
    /// [`Dir::sync`] apart, for a caller that must know which step failed.
    pub(crate) fn replace(&self, from: &str, to: &str) -> Result<(), Error> {
        self.rename(from, to)?;
        self.sync()
    }

    /// Renames `from` over `to`; not durable until [`Dir::sync`].
    pub(crate) fn rename(&self, from: &str, to: &str) -> Result<(), Error> {
        std::fs::rename(self.path.join(from), self.path.join(to))
            .map_err(|e| Error::io("renaming", from, e))
    }

    /// Removes the file `name` durably, if it exists.
    pub(crate) fn remove(&self, name: &str) -> Result<(), Error> {
        match std::fs::remove_file(self.path.join(name)) {
            Ok(()) => self.sync(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("removing", name, e)),
        }
    }

    /// Makes the directory's names durable.
    pub(crate) fn sync(&self) -> Result<(), Error> {
        sync_dir(&self.path)
    }
}

/// Renames `from` over `to` (files or directories, in any directories) and
/// syncs the directory that holds `to`: after a crash `to` is the old one or
/// the new one, whole. The one way anything in the crate is replaced.
pub(crate) fn replace_durably(from: &Path, to: &Path) -> Result<(), Error> {
    std::fs::rename(from, to).map_err(|e| Error::io("renaming", &from.display().to_string(), e))?;
    let parent = to.parent().filter(|p| !p.as_os_str().is_empty());
    sync_dir(parent.unwrap_or(Path::new(".")))
}

impl DataFile {
    /// Bytes from block `from` up to block `to` or the end of the file,
    /// whichever comes first, a torn last block included. Read a batch at a
    /// time into block-aligned memory, as direct I/O needs.
    pub(crate) fn read_bytes(&self, from: u64, to: u64) -> Result<Vec<u8>, Error> {
        let len = self.byte_len()?;
        let start = from.saturating_mul(BLOCK_SIZE as u64).min(len);
        let end = to.saturating_mul(BLOCK_SIZE as u64).min(len);
        let total = usize::try_from(end - start).map_err(|_| Error::Internal("a file past RAM"))?;
        let mut out = Vec::with_capacity(total);
        let mut buf: Vec<Block> = (0..READ_BATCH.min(total.div_ceil(BLOCK_SIZE)))
            .map(|_| Block([0; BLOCK_SIZE]))
            .collect();
        while out.len() < total {
            let want = (total - out.len()).min(buf.len() * BLOCK_SIZE);
            let blocks = want.div_ceil(BLOCK_SIZE);
            let got = self.read_into(&mut buf[..blocks], start + out.len() as u64)?;
            if got == 0 {
                break;
            }
            let got = got.min(want);
            for (i, block) in buf[..got.div_ceil(BLOCK_SIZE)].iter().enumerate() {
                let n = (got - i * BLOCK_SIZE).min(BLOCK_SIZE);
                out.extend_from_slice(&block.0[..n]);
            }
        }
        Ok(out)
    }
}
