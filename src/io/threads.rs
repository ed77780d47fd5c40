//! The fallback engine: threads doing positioned reads and writes.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Receiver;

use super::{finish, started, IoCounters, Job, Op};

pub(super) fn spawn(
    i: usize,
    jobs: Receiver<Job>,
    counters: Arc<IoCounters>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("pagetrie-io-{i}"))
        .spawn(move || {
            for mut job in jobs.iter() {
                started(&counters, job.op);
                let result = match job.op {
                    Op::Read => match job.block.for_read() {
                        Some(block) => job.file.read_block(block, job.offset),
                        None => Err(super::shared_read()),
                    },
                    Op::Write => job.file.write_block(job.block.block(), job.offset),
                };
                finish(&counters, job, result);
            }
        })
}
