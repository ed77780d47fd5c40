//! The disk's read latency on the database's own files, taken just before
//! and just after a run's workloads: lone 4 KiB direct reads at random
//! offsets, one at a time.
//!
//! A figure from `fio` on a small test file says little about a large file on
//! a virtual disk: the host may answer blocks written or read lately several
//! times faster than the rest, and slows every other read while it writes
//! back a large burst. Two engines measured in turn can then sit on very
//! different disks. The probe shows it beside each run's figures.

use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BLOCK: u64 = 4096;
/// Files smaller than this are left out: metadata, locks, small logs.
const SMALLEST: u64 = 1 << 20;
/// Reads a probe takes: about a fifth of a second at 100 us a read.
pub const READS: usize = 2000;

/// Mean latency of `reads` lone direct 4 KiB reads spread over the files
/// under `dir` in proportion to their size; `None` where the files cannot
/// be read directly (tmpfs) or there are none.
pub fn disk_read_latency(dir: &Path, reads: usize) -> Option<Duration> {
    let files: Vec<(File, u64)> = data_files(dir)
        .into_iter()
        .filter_map(|(path, len)| {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
                .ok()?;
            Some((file, len / BLOCK))
        })
        .collect();
    let blocks: u64 = files.iter().map(|(_, n)| n).sum();
    if blocks == 0 || reads == 0 {
        return None;
    }
    // A direct read needs a block-aligned buffer: the aligned window of a
    // buffer twice the size.
    let mut buffer = vec![0u8; 2 * BLOCK as usize];
    let at = buffer.as_ptr().align_offset(BLOCK as usize);
    let window = &mut buffer[at..at + BLOCK as usize];
    let mut random = Random::seeded();
    let (mut took, mut done) = (Duration::ZERO, 0u32);
    for _ in 0..reads * 4 {
        if done as usize == reads {
            break;
        }
        let mut pick = random.below(blocks);
        let (file, _) = files.iter().find(|(_, n)| {
            let here = pick < *n;
            if !here {
                pick -= n;
            }
            here
        })?;
        // A hole or a preallocated, never written extent reads as zeros
        // without touching the disk.
        if !holds_data(file, pick * BLOCK) {
            continue;
        }
        let start = Instant::now();
        file.read_exact_at(window, pick * BLOCK).ok()?;
        took += start.elapsed();
        done += 1;
    }
    (done > 0).then(|| took / done)
}

/// Whether the file holds written data at `offset` (not a hole).
fn holds_data(file: &File, offset: u64) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(at) = libc::off_t::try_from(offset) else {
        return false;
    };
    // SAFETY: lseek only moves the offset of a descriptor `file` keeps open
    // for the call; it touches no memory of ours.
    let next = unsafe { libc::lseek(file.as_raw_fd(), at, libc::SEEK_DATA) };
    next == at
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
