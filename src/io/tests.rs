//! One suite, run against both engines.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{DataFile, Io, IoBackend, Moves, Transfer};
use crate::block::{Block, BlockBuf, IoBuf, SharedBlock, BLOCK_SIZE};

fn engines() -> Vec<Io> {
    let mut engines = vec![Io::start(IoBackend::ThreadPool, None).unwrap()];
    match Io::start(IoBackend::IoUring, None) {
        Ok(io) => engines.push(io),
        // CI machines have io_uring; say so loudly rather than pass quietly.
        Err(e) if std::env::var_os("PAGETRIE_ALLOW_NO_URING").is_some() => {
            eprintln!("io_uring unavailable, testing the thread pool only: {e}")
        }
        Err(e) => panic!("io_uring unavailable ({e}); set PAGETRIE_ALLOW_NO_URING=1 to skip it"),
    }
    engines
}

/// A write of `block`.
fn write(block: impl Into<IoBuf>) -> Transfer {
    Transfer::Write(block.into())
}

fn block_of(seed: u64) -> BlockBuf {
    let mut b = Block::zeroed();
    for (i, chunk) in b.0.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64).to_le_bytes());
    }
    b
}

/// Far more jobs than the ring holds, and reads than one window of
/// `read_all`: all come back, in order; one failing read in a later window
/// fails the whole, and the engine goes on.
#[test]
fn many_writes_then_reads_in_flight_round_trip() {
    for io in engines() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(DataFile::open(&dir.path().join("data")).unwrap());
        // Scattered offsets, far more jobs than the ring holds at once.
        let offsets: Vec<u64> = (0..2000u64)
            .map(|i| (i * 7919 % 2000) * BLOCK_SIZE as u64)
            .collect();
        io.run_all(
            offsets
                .iter()
                .map(|&o| (file.clone(), o, write(block_of(o)))),
        )
        .unwrap();
        let read = io
            .read_all(offsets.iter().map(|&o| (file.clone(), o)))
            .unwrap();
        assert_eq!(read.len(), offsets.len());
        for (o, block) in offsets.iter().zip(read) {
            assert!(
                block.0 == block_of(*o).0,
                "uring={} offset {o}",
                io.is_uring()
            );
        }
        assert_eq!(file.blocks().unwrap(), 2000);
        assert!(io.counters.reads.load(std::sync::atomic::Ordering::Relaxed) >= 2000);
        let mut past_end = offsets.clone();
        past_end[3 * super::READ_WINDOW] = 2000 * BLOCK_SIZE as u64;
        assert!(io
            .read_all(past_end.iter().map(|&o| (file.clone(), o)))
            .is_err());
        assert!(io.read(&file, 0).unwrap().0 == block_of(0).0);
    }
}

/// A block behind an `Arc`, as a page an overlay shows.
pub(super) struct Held(pub(super) BlockBuf);

// SAFETY: the block is owned and never changed through `&Held`.
unsafe impl SharedBlock for Held {
    fn block(&self) -> &Block {
        &self.0
    }
}

#[test]
fn a_shared_block_is_written_from_where_it_lies() {
    for io in engines() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(DataFile::open(&dir.path().join("data")).unwrap());
        let held = Arc::new(Held(block_of(5)));
        let written = io
            .run_all([
                (file.clone(), 0, IoBuf::Shared(held.clone())),
                (file.clone(), BLOCK_SIZE as u64, IoBuf::from(block_of(6))),
            ])
            .unwrap();
        // The write hands the shared block back, not a copy of it.
        let mut written = written.into_iter();
        match written.next() {
            Some(IoBuf::Shared(back)) => assert!(std::ptr::eq(back.block(), held.block())),
            _ => panic!("not the shared block back, uring={}", io.is_uring()),
        }
        drop(written);
        assert_eq!(Arc::strong_count(&held), 1, "the job let go of it");
        assert!(io.read(&file, 0).unwrap().0 == block_of(5).0);
        assert!(io.read(&file, BLOCK_SIZE as u64).unwrap().0 == block_of(6).0);
    }
}

#[test]
fn reading_past_the_end_is_an_error() {
    for io in engines() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(DataFile::open(&dir.path().join("data")).unwrap());
        io.run_all([(file.clone(), 0, write(block_of(1)))]).unwrap();
        assert!(
            io.read(&file, BLOCK_SIZE as u64).is_err(),
            "uring={}",
            io.is_uring()
        );
        assert!(io.read(&file, 0).unwrap().0 == block_of(1).0);
    }
}

#[test]
fn dropping_the_engine_finishes_jobs_in_flight() {
    for io in engines() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(DataFile::open(&dir.path().join("data")).unwrap());
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..300u64 {
            io.submit(super::Job {
                file: file.clone(),
                offset: i * BLOCK_SIZE as u64,
                transfer: write(block_of(i)),
                tag: i,
                reply: tx.clone(),
            });
        }
        drop(io);
        drop(tx);
        let done: Vec<_> = rx.iter().collect();
        assert_eq!(done.len(), 300);
        assert!(done.iter().all(|d| d.result.is_ok()));
    }
}

/// tmpfs refuses O_DIRECT before Linux 6.6 and takes it since: either way works.
#[test]
fn tmpfs_works_with_or_without_o_direct() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let file = Arc::new(DataFile::open(&dir.path().join("data")).unwrap());
    for io in engines() {
        io.run_all([(file.clone(), 0, write(block_of(9)))]).unwrap();
        assert!(io.read(&file, 0).unwrap().0 == block_of(9).0);
    }
}

#[test]
fn auto_prefers_io_uring_and_reports_a_fallback() {
    let io = Io::start(IoBackend::Auto, None).unwrap();
    assert_eq!(io.is_uring(), io.fallback_reason().is_none());
}

/// `file` at `path` with the fault plan `faults`.
fn faulty_file(path: &std::path::Path, faults: &Arc<super::faults::Faults>) -> Arc<DataFile> {
    let mut file = DataFile::open(path).unwrap();
    file.faults = Some(faults.clone());
    Arc::new(file)
}

#[test]
fn injected_faults_reach_both_engines() {
    use super::faults::Faults;
    for io in engines() {
        let uring = io.is_uring();
        let dir = tempfile::tempdir().unwrap();
        let faults = Arc::new(Faults::none());
        let file = faulty_file(&dir.path().join("data"), &faults);
        let block = |offset: u64| (file.clone(), offset, write(block_of(offset)));
        io.run_all([block(0)]).unwrap();
        // A torn write: half the block lands, and the job fails.
        faults.fail_writes_after(0, true);
        let err = io.run_all([block(0)]).err().unwrap().to_string();
        assert!(err.contains("injected"), "uring={uring}: {err}");
        let mut found = Block::zeroed();
        faults.clear();
        file.read_block(&mut found, 0).unwrap();
        assert!(found.0[..BLOCK_SIZE / 2] == block_of(0).0[..BLOCK_SIZE / 2]);
        // A write that fails whole, among ones that succeed.
        faults.fail_writes_after(1, false);
        let err = io.run_all([block(BLOCK_SIZE as u64), block(2 * BLOCK_SIZE as u64)]);
        assert!(err.is_err(), "uring={uring}");
        faults.clear();
        // A full disk fails a write that grows the file with ENOSPC.
        faults.disk_full_after(0);
        match io.run_all([block(10 * BLOCK_SIZE as u64)]) {
            Err(crate::Error::Io { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "uring={uring}")
            }
            other => panic!("uring={uring}: {:?}", other.map(drop)),
        }
        faults.clear();
        // A failing read, on the engine and on the calling thread.
        faults.fail_reads(true);
        let read = io.run_all([(file.clone(), 0, Transfer::Read(Block::zeroed()))]);
        assert!(read.is_err(), "uring={uring}");
        assert!(io.read(&file, 0).is_err(), "uring={uring}");
        faults.clear();
        // Power loss undoes what was not synced, whichever engine wrote it.
        file.sync().unwrap();
        let synced = file.blocks().unwrap();
        io.run_all([block(20 * BLOCK_SIZE as u64)]).unwrap();
        faults
            .lose_power(
                &[file.raw().try_clone().unwrap()],
                super::faults::PowerLoss::DropAll,
            )
            .unwrap();
        assert_eq!(file.blocks().unwrap(), synced, "uring={uring}");
    }
}

#[test]
fn an_io_uring_ring_that_dies_fails_what_is_in_flight_and_everything_after() {
    use super::faults::Faults;
    let Some(io) = engines().into_iter().find(Io::is_uring) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::none());
    let file = faulty_file(&dir.path().join("data"), &faults);
    faults.kill_ring_after(5);
    let jobs = (0..20u64).map(|i| {
        let offset = i * BLOCK_SIZE as u64;
        (file.clone(), offset, write(block_of(offset)))
    });
    let err = io.run_all(jobs).err().expect("the jobs failed");
    assert!(super::may_still_land(&err), "{err}");
    faults.clear();
    let after = io.run_all([(file.clone(), 0, Transfer::Read(Block::zeroed()))]);
    assert!(after.is_err(), "a job after the ring died succeeded");
}

#[test]
fn a_file_written_whole_is_the_old_one_or_the_new_one() {
    use super::faults::Faults;
    use super::Dir;
    let tmp = tempfile::tempdir().unwrap();
    let faults = Arc::new(Faults::none());
    let dir = Dir::new(tmp.path()).with_faults(Some(faults.clone()));
    assert_eq!(dir.read("progress").unwrap(), None);

    let first = vec![7u8; 81];
    dir.write_whole("progress", &first).unwrap();
    let read = dir.read("progress").unwrap().unwrap();
    assert_eq!(read.len(), BLOCK_SIZE, "padded to a block");
    assert_eq!(&read[..81], &first[..]);
    assert!(read[81..].iter().all(|&b| b == 0));

    // A longer file, then a failed write: the last whole one stays.
    let second: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    dir.write_whole("progress", &second).unwrap();
    faults.fail_writes_after(0, false);
    assert!(dir.write_whole("progress", &first).is_err());
    faults.clear();
    let read = dir.read("progress").unwrap().unwrap();
    assert_eq!(read.len(), 2 * BLOCK_SIZE);
    assert_eq!(&read[..5000], &second[..]);
}

/// A lone read polls a ring of its thread's own while nothing else needs the
/// CPU, and sleeps in pread while something does: the same bytes either
/// way, and past the file's end an error, never a short block.
#[test]
fn lone_reads_polled_or_not_read_the_block() {
    for io in engines() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(DataFile::open(&dir.path().join("data")).unwrap());
        let offsets = [0, 5, 17].map(|b| b * BLOCK_SIZE as u64);
        io.run_all(offsets.map(|o| (file.clone(), o, write(block_of(o)))))
            .unwrap();
        // The reads of one `read_all` that polled.
        let read_all = || {
            let before = super::lone::polled_reads();
            for o in offsets {
                assert!(io.read(&file, o).unwrap().0 == block_of(o).0);
            }
            assert!(io.read(&file, 40 * BLOCK_SIZE as u64).is_err());
            super::lone::polled_reads() - before
        };
        // Polled with io_uring (all four, the one past the end too), never
        // on the thread pool; never while the database is busy.
        let has_ring = super::lone::read(file.fd(), &mut Block::zeroed(), 0).is_some();
        let polled = if io.is_uring() && has_ring { 4 } else { 0 };
        assert_eq!(read_all(), polled);
        {
            let _busy = io.busy();
            let _also = io.busy();
            assert_eq!(read_all(), 0);
        }
        assert_eq!(io.busy.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(read_all(), polled);
    }
}

/// The polled ring itself: the block, the file's end as a short read (0
/// bytes), and the kernel's error for a descriptor that is not open.
#[test]
fn a_lone_ring_reads_and_reports_what_the_kernel_says() {
    let dir = tempfile::tempdir().unwrap();
    let file = DataFile::open(&dir.path().join("data")).unwrap();
    let io = Io::start(IoBackend::ThreadPool, None).unwrap();
    let file = Arc::new(file);
    io.run_all([(file.clone(), BLOCK_SIZE as u64, write(block_of(3)))])
        .unwrap();
    let mut found = Block::zeroed();
    let Some(read) = super::lone::read(file.fd(), &mut found, BLOCK_SIZE as u64) else {
        assert!(
            std::env::var_os("PAGETRIE_ALLOW_NO_URING").is_some(),
            "no polled ring; set PAGETRIE_ALLOW_NO_URING=1 where io_uring lacks it"
        );
        return;
    };
    assert_eq!(read.unwrap(), BLOCK_SIZE);
    assert!(found.0 == block_of(3).0);
    let past = super::lone::read(file.fd(), &mut found, 9 * BLOCK_SIZE as u64);
    assert_eq!(past.unwrap().unwrap(), 0);
    let closed = super::lone::read(-1, &mut found, 0).unwrap();
    assert_eq!(closed.unwrap_err().raw_os_error(), Some(libc::EBADF));
    // The ring still serves after an error.
    let mut again = Block::zeroed();
    assert_eq!(
        super::lone::read(file.fd(), &mut again, BLOCK_SIZE as u64)
            .unwrap()
            .unwrap(),
        BLOCK_SIZE
    );
    assert!(again.0 == block_of(3).0);
}

#[test]
fn a_batch_gives_back_blocks_of_the_direction_it_started() {
    assert!(<IoBuf as Moves>::from_transfer(Transfer::read()).is_none());
    assert!(<BlockBuf as Moves>::from_transfer(write(block_of(1))).is_none());
    for io in engines() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(DataFile::open(&dir.path().join("data")).unwrap());
        let written = io
            .run_all([(file.clone(), 0, IoBuf::from(block_of(2)))])
            .unwrap();
        assert!(written[0].block().0 == block_of(2).0);
        let read = io.read_all([(file.clone(), 0)]).unwrap();
        assert!(read[0].0 == block_of(2).0, "uring={}", io.is_uring());
    }
}

/// Writes to consecutive blocks of one file, handed over together, form one
/// run; a gap or another file starts the next.
#[test]
fn write_runs_count_consecutive_blocks_of_one_file() {
    for io in engines() {
        let dir = tempfile::tempdir().unwrap();
        let a = Arc::new(DataFile::open(&dir.path().join("a")).unwrap());
        let b = Arc::new(DataFile::open(&dir.path().join("b")).unwrap());
        let at = |n: u64| n * BLOCK_SIZE as u64;
        let jobs = [(&a, 0), (&a, 1), (&a, 2), (&a, 5), (&b, 6), (&b, 7)];
        let before = io.counters.write_runs.load(Ordering::Relaxed);
        io.run_all(jobs.map(|(f, n)| (f.clone(), at(n), write(block_of(n)))))
            .unwrap();
        // 0..=2 of a, 5 of a, 6..=7 of b.
        assert_eq!(io.counters.write_runs.load(Ordering::Relaxed) - before, 3);
    }
}

/// Runs of consecutive blocks longer than one vectored request carries,
/// broken by another file's blocks, and blocks in descending order, each
/// land where it belongs.
#[test]
fn runs_of_writes_land_block_by_block() {
    for io in engines() {
        let dir = tempfile::tempdir().unwrap();
        let a = Arc::new(DataFile::open(&dir.path().join("a")).unwrap());
        let b = Arc::new(DataFile::open(&dir.path().join("b")).unwrap());
        let mut jobs = Vec::new();
        for n in 0..700u64 {
            jobs.push((&a, n, n));
            if n % 97 == 0 {
                jobs.push((&b, n, n + 1_000_000));
            }
        }
        jobs.extend((800..900u64).rev().map(|n| (&a, n, n)));
        let at = |n: u64| n * BLOCK_SIZE as u64;
        io.run_all(
            jobs.iter()
                .map(|&(f, n, seed)| (f.clone(), at(n), write(block_of(seed)))),
        )
        .unwrap();
        let read = io
            .read_all(jobs.iter().map(|&(f, n, _)| (f.clone(), at(n))))
            .unwrap();
        for (&(_, n, seed), block) in jobs.iter().zip(read) {
            assert!(
                block.0 == block_of(seed).0,
                "uring={} block {n} seed {seed}",
                io.is_uring()
            );
        }
    }
}
