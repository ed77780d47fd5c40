//! Data files opened for direct I/O where the filesystem allows it, and the
//! directory lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use crate::block::{Block, BLOCK_SIZE};
use crate::Error;

#[cfg(target_os = "linux")]
const O_DIRECT: i32 = libc::O_DIRECT;
#[cfg(not(target_os = "linux"))]
const O_DIRECT: i32 = 0;

/// A file read and written in whole blocks at block-aligned offsets.
pub(crate) struct DataFile {
    file: File,
    direct: bool,
    /// The file's name, for errors.
    name: String,
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) faults: Option<std::sync::Arc<super::faults::Faults>>,
}

impl DataFile {
    /// Opens (creating if absent) `path` for reading and writing, bypassing the OS
    /// page cache when the filesystem supports O_DIRECT (tmpfs does not).
    pub(crate) fn open(path: &Path) -> Result<DataFile, Error> {
        DataFile::open_io(path).map_err(|e| Error::io("opening", &path.display().to_string(), e))
    }

    fn open_io(path: &Path) -> io::Result<DataFile> {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        let (file, direct) = if O_DIRECT == 0 {
            (options.open(path)?, false)
        } else {
            match options.clone().custom_flags(O_DIRECT).open(path) {
                Ok(file) => (file, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (options.open(path)?, false),
                Err(e) => return Err(e),
            }
        };
        Ok(DataFile {
            file,
            direct,
            name: path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            #[cfg(any(test, feature = "fault-injection"))]
            faults: None,
        })
    }

    /// The file's name in its directory.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether reads and writes bypass the OS page cache.
    pub(crate) fn is_direct(&self) -> bool {
        self.direct
    }

    /// The file's inode: what the fault plan knows a file by, since a
    /// descriptor's number is reused once it is closed, and a renamed file
    /// keeps its inode.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn inode(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        self.file.metadata().map_or(u64::MAX, |m| m.ino())
    }

    /// The descriptor, for the io_uring backend.
    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Reads the block at `offset`; reading past the end of the file is an error.
    pub(crate) fn read_block(&self, block: &mut Block, offset: u64) -> io::Result<()> {
        self.before_read()?;
        self.file.read_exact_at(&mut block.0, offset)
    }

    /// [`DataFile::read_block`] on this thread's polled ring ([`super::lone`])
    /// where it has one.
    pub(crate) fn read_block_polled(&self, block: &mut Block, offset: u64) -> io::Result<()> {
        self.before_read()?;
        match super::lone::read(self.fd(), block, offset) {
            Some(Ok(BLOCK_SIZE)) => Ok(()),
            Some(Err(e)) if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) => Err(e),
            // No ring, a retry, or a short read (the file's end), which
            // pread reads again for its error.
            _ => self.file.read_exact_at(&mut block.0, offset),
        }
    }

    /// The fault plan's say before a read.
    fn before_read(&self) -> io::Result<()> {
        #[cfg(any(test, feature = "fault-injection"))]
        if let Some(f) = &self.faults {
            f.before_read()?;
        }
        Ok(())
    }

    /// Reads into `blocks` from byte `offset` (block-aligned) until they are
    /// full or the file ends, and returns the bytes read.
    pub(crate) fn read_into(&self, blocks: &mut [Block], offset: u64) -> Result<usize, Error> {
        self.before_read().map_err(self.failed("reading"))?;
        // SAFETY: `Block` is `repr(C)` around a byte array whose size is a
        // multiple of its alignment, so a slice of blocks is that many bytes
        // with no padding, all initialized; the borrow of `blocks` is moved
        // into the byte view for as long as it lives.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                blocks.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(blocks),
            )
        };
        let mut got = 0;
        while got < bytes.len() {
            match self.file.read_at(&mut bytes[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("reading", &self.name, e)),
            }
        }
        Ok(got)
    }

    /// The file's length in bytes.
    pub(crate) fn byte_len(&self) -> Result<u64, Error> {
        Ok(self
            .file
            .metadata()
            .map_err(self.failed("measuring"))?
            .len())
    }

    /// Writes `block` at `offset`.
    pub(crate) fn write_block(&self, block: &Block, offset: u64) -> io::Result<()> {
        #[cfg(any(test, feature = "fault-injection"))]
        if let Some(f) = &self.faults {
            return f.write(&self.file, block, offset);
        }
        self.file.write_all_at(&block.0, offset)
    }

    /// Makes every completed write durable.
    fn sync_io(&self) -> io::Result<()> {
        self.synced_by(File::sync_data)
    }

    /// Runs `sync` on the file, through the fault plan if there is one.
    fn synced_by(&self, sync: fn(&File) -> io::Result<()>) -> io::Result<()> {
        #[cfg(any(test, feature = "fault-injection"))]
        if let Some(f) = &self.faults {
            f.before_sync()?;
            sync(&self.file)?;
            f.synced(self.inode());
            return Ok(());
        }
        sync(&self.file)
    }

    /// File length in whole blocks (a torn tail block does not count).
    fn blocks_io(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len() / BLOCK_SIZE as u64)
    }

    /// Allocates disk space for the file's first `blocks` blocks, extending it
    /// if shorter, so that writing them cannot fail for want of space.
    fn reserve_io(&self, blocks: u64) -> io::Result<()> {
        let len = blocks * BLOCK_SIZE as u64;
        let now = self.file.metadata()?.len();
        if now >= len {
            return Ok(());
        }
        #[cfg(any(test, feature = "fault-injection"))]
        if let Some(f) = &self.faults {
            f.before_reserve((len - now).div_ceil(BLOCK_SIZE as u64))?;
        }
        let Ok(len) = i64::try_from(len) else {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        };
        // SAFETY: fallocate reads no memory of ours; the descriptor is open
        // for as long as `self.file` lives.
        let rc = unsafe { libc::fallocate(self.fd(), 0, 0, len) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // A filesystem without fallocate: extend it sparse, as writes would.
            Some(libc::EOPNOTSUPP) => self.file.set_len(len as u64),
            _ => Err(e),
        }
    }

    /// Cuts the file to its first `blocks` blocks and makes that durable.
    fn truncate_io(&self, blocks: u64) -> io::Result<()> {
        self.file.set_len(blocks * BLOCK_SIZE as u64)?;
        // The length is metadata: sync_all, not sync_data.
        self.synced_by(File::sync_all)
    }

    /// Makes every completed write durable.
    pub(crate) fn sync(&self) -> Result<(), Error> {
        self.sync_io().map_err(self.failed("syncing"))
    }

    /// File length in whole blocks (a torn tail block does not count).
    pub(crate) fn blocks(&self) -> Result<u64, Error> {
        self.blocks_io().map_err(self.failed("measuring"))
    }

    /// Allocates disk space for the file's first `blocks` blocks, extending it
    /// if shorter, so that writing them cannot fail for want of space.
    pub(crate) fn reserve(&self, blocks: u64) -> Result<(), Error> {
        self.reserve_io(blocks)
            .map_err(self.failed("allocating space in"))
    }

    /// Cuts the file to nothing and makes that durable: a slot map erased this
    /// way never names a commit.
    pub(crate) fn erase(&self) -> Result<(), Error> {
        self.truncate(0)
    }

    /// Cuts the file to its first `blocks` blocks and makes that durable.
    pub(crate) fn truncate(&self, blocks: u64) -> Result<(), Error> {
        self.truncate_io(blocks).map_err(self.failed("truncating"))
    }

    /// Turns an I/O error on this file into an [`Error`] that names it.
    fn failed(&self, doing: &'static str) -> impl FnOnce(io::Error) -> Error + '_ {
        move |e| Error::io(doing, &self.name, e)
    }

    /// Unchecked raw access for the fault injector, which must bypass itself.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn raw(&self) -> &File {
        &self.file
    }
}

/// Makes the names of files created in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("syncing the directory", &dir.display().to_string(), e))
}

/// Creates `dir` and its missing ancestors, syncing the directory that holds
/// each new one, so that no created directory can vanish in a power loss.
pub(crate) fn create_dir_durable(dir: &Path) -> Result<(), Error> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    create_dir_durable(parent)?;
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(Error::io("creating", &dir.display().to_string(), e)),
        Ok(()) => sync_dir(parent),
    }
}

/// Up to 2 s: besides a fork's brief share (below), a process killed with
/// writes in flight holds the lock until the kernel has finished them
/// (`io::uring`), which took over 200 ms on a disk busy with another
/// process's commits.
const LOCK_ATTEMPTS: u32 = 400;
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(5);

/// The file in a locked directory that carries the lock.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// Exclusive ownership of a database directory, held until dropped.
pub(crate) struct DirLock {
    file: File,
}

impl DirLock {
    /// The lock file's descriptor: whatever holds a reference to it keeps
    /// the directory locked.
    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Locks `dir`, or fails with [`Error::Locked`] if another handle holds it.
    ///
    /// Retries for a moment first: a process forking in another thread briefly
    /// shares the lock of a handle just closed, until the child execs, and a
    /// killed process's ring holds it until its writes in flight are done.
    pub(crate) fn acquire(dir: &Path) -> Result<DirLock, Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))?;
        for _ in 0..LOCK_ATTEMPTS {
            match file.try_lock() {
                Ok(()) => return Ok(DirLock { file }),
                Err(TryLockError::WouldBlock) => std::thread::sleep(LOCK_RETRY),
                Err(TryLockError::Error(e)) => return Err(e.into()),
            }
        }
        Err(Error::Locked)
    }
}
