//! The disk's read latency on the database's own files, taken before a
//! run opens its database and after its last commit: lone 4 KiB direct
//! reads at random written offsets, one at a time, their median, mean and
//! 90th percentile.
//!
//! A figure from `fio` on a small test file says little about a large file on
//! a virtual disk: the host may answer blocks written or read lately several
//! times faster than the rest, and slows every other read while it writes
//! back a large burst. Two engines measured in turn can then sit on very
//! different disks. The probe shows it beside each run's figures.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BLOCK: u64 = 4096;
/// Files smaller than this are left out: metadata, locks, small logs.
const SMALLEST: u64 = 1 << 20;
/// Reads a probe takes: about a tenth of a second at 100 us a read.
pub const READS: usize = 1000;

/// A block-aligned buffer, as a direct read needs.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Aligned([u8; BLOCK as usize]);

/// Blocks one read of [`read_through`] asks for (4 MiB).
const THROUGH: usize = 1024;

/// Reads every file under `dir` of at least [`SMALLEST`] bytes from start
/// to end, directly, 4 MiB a request; returns the bytes read. A virtual
/// disk that keeps what was read lately then answers the database's blocks
/// alike for whichever engine runs next, whatever it wrote or read before.
/// Files in RAM, or on a file system without direct reads, are skipped:
/// there is no disk to prime, as [`disk_read_latency`] finds none to probe.
pub fn read_through(dir: &Path) -> std::io::Result<u64> {
    use std::io::{IoSliceMut, Read};
    let mut blocks = vec![Aligned([0; BLOCK as usize]); THROUGH];
    let mut total = 0;
    for (path, _) in data_files(dir) {
        let mut file = match open_direct(&path) {
            Ok(file) if !in_ram(&file) => file,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => continue,
            Err(e) => return Err(e),
        };
        let mut slices: Vec<IoSliceMut> = blocks
            .iter_mut()
            .map(|b| IoSliceMut::new(&mut b.0))
            .collect();
        loop {
            let n = file.read_vectored(&mut slices)?;
            total += n as u64;
            // The end, or a tail shorter than a block: the next direct read
            // would start unaligned.
            if n == 0 || n % BLOCK as usize != 0 {
                break;
            }
        }
    }
    Ok(total)
}

/// Latencies of a probe's reads: the median alone hides a disk that answers
/// most reads fast and some very slowly.
#[derive(Clone, Copy, Debug)]
pub struct Latency {
    pub median: Duration,
    pub mean: Duration,
    pub p90: Duration,
}

/// Latencies of `reads` lone direct 4 KiB reads of written blocks spread
/// over the files under `dir` in proportion to their size; `None` where
/// there are no such files, they are in RAM (tmpfs), or no read succeeded.
pub fn disk_read_latency(dir: &Path, reads: usize) -> Option<Latency> {
    let files: Vec<(File, u64)> = data_files(dir)
        .into_iter()
        .filter_map(|(path, len)| Some((open_direct(&path).ok()?, len / BLOCK)))
        .collect();
    let blocks: u64 = files.iter().map(|(_, n)| n).sum();
    if blocks == 0 || files.iter().any(|(f, _)| in_ram(f)) {
        return None;
    }
    let mut buffer = Box::new(Aligned([0; BLOCK as usize]));
    let mut random = Random::seeded();
    let mut took = Vec::with_capacity(reads);
    // Holes are skipped: bounded tries, for files mostly holes.
    for _ in 0..reads * 4 {
        if took.len() == reads {
            break;
        }
        let mut pick = random.below(blocks);
        let Some((file, _)) = files.iter().find(|(_, n)| {
            let here = pick < *n;
            if !here {
                pick -= n;
            }
            here
        }) else {
            break;
        };
        if !holds_data(file, pick * BLOCK) {
            continue;
        }
        let start = Instant::now();
        // A file a live engine shrank meanwhile: that sample is lost.
        if file.read_exact_at(&mut buffer.0, pick * BLOCK).is_ok() {
            took.push(start.elapsed());
        }
    }
    took.sort_unstable();
    let n = took.len() as u32;
    Some(Latency {
        median: *took.get(took.len() / 2)?,
        mean: took.iter().sum::<Duration>() / n,
        p90: *took.get(took.len() * 9 / 10)?,
    })
}

/// `path` opened for direct reads, past the OS's cache.
fn open_direct(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// Regular files under `dir` of at least [`SMALLEST`] bytes, with their
/// lengths.
fn data_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        match entry.metadata() {
            Ok(m) if m.is_dir() => files.extend(data_files(&entry.path())),
            Ok(m) if m.is_file() && m.len() >= SMALLEST => files.push((entry.path(), m.len())),
            _ => {}
        }
    }
    files
}

/// Whether `file` lives in RAM: tmpfs takes direct reads (Linux 6.6 on)
/// and answers them from memory.
fn in_ram(file: &File) -> bool {
    // SAFETY: a zeroed `statfs` is a valid value of that plain C struct.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor stays open for the call, which writes only into
    // `stat`, a live struct of the type it expects.
    let ok = unsafe { libc::fstatfs(file.as_raw_fd(), &mut stat) } == 0;
    // ramfs's magic, which libc does not name.
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    // The field's and the constant's types differ from target to target.
    #[allow(clippy::unnecessary_cast)]
    let (kind, tmpfs) = (stat.f_type as i64, libc::TMPFS_MAGIC as i64);
    ok && (kind == tmpfs || kind == RAMFS_MAGIC)
}

/// Whether the file holds written data at `offset`: a hole reads as zeros
/// without touching the disk. (An unwritten extent whose pages the OS has
/// cached counts as data on ext4 and xfs; rare in an engine's files.)
fn holds_data(file: &File, offset: u64) -> bool {
    let Ok(at) = libc::off_t::try_from(offset) else {
        return false;
    };
    // SAFETY: lseek only moves the offset of a descriptor `file` keeps open
    // for the call; it touches no memory of ours.
    let next = unsafe { libc::lseek(file.as_raw_fd(), at, libc::SEEK_DATA) };
    // A file system without SEEK_DATA: every offset is taken for data.
    next == at || (next < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL))
}

/// xorshift64: offsets need spread, not quality.
struct Random(u64);

impl Random {
    fn seeded() -> Random {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Random(nanos | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
