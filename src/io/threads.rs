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
                    Op::Read => job.file.read_block(&mut job.block, job.offset),
                    Op::Write => job.file.write_block(&job.block, job.offset),
                };
                finish(&counters, job, result);
            }
        })
}
