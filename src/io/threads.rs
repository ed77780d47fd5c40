//! The fallback engine: threads doing positioned reads and writes.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Receiver;

use super::{finish, started, IoCounters, Job, Transfer};

pub(super) fn spawn(
    i: usize,
    jobs: Receiver<Job>,
    counters: Arc<IoCounters>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("pagetrie-io-{i}"))
        .spawn(move || {
            for mut job in jobs.iter() {
                started(&counters, job.transfer.op());
                let result = match &mut job.transfer {
                    Transfer::Read(block) => job.file.read_block(block, job.offset),
                    Transfer::Write(block) => job.file.write_block(block.block(), job.offset),
                };
                finish(&counters, job, result);
            }
        })
}
