//! Every case of tests/data/roots.json replayed as commits through the public
//! API: 1 and 4 commit workers, both I/O engines, and again after reopening.

mod common;

use common::{key_from_hex, reference_cases, unhex};
use pagetrie::{Db, IoBackend, Options};

fn replay(workers: usize, backend: IoBackend) {
    let cases = reference_cases();
    assert!(cases.len() >= 20);
    for case in &cases {
        let name = case["name"].as_str().expect("case name");
        let dir = tempfile::tempdir().unwrap();
        let options = Options::new(dir.path())
            .commit_workers(workers)
            .io_backend(backend);
        let mut db = Db::open(options.clone()).unwrap();
        let steps = case["steps"].as_array().expect("steps");
        for (i, step) in steps.iter().enumerate() {
            let session = db.begin_session();
            for op in step["ops"].as_array().expect("ops") {
                let key = key_from_hex(op[0].as_str().expect("key hex"));
                session.write(key, op[1].as_str().map(unhex));
            }
            let out = session.commit_and_prove().unwrap();
            let expected = step["root"].as_str().expect("root hex");
            assert_eq!(common::hex(&out.root), expected, "case {name}, step {i}");
            assert_eq!(out.witness.verify_update(&out.prev_root).unwrap(), out.root);
            assert_eq!(db.root().unwrap(), out.root);
            // Every other step, close and reopen: the root must survive.
            if i % 2 == 1 || i + 1 == steps.len() {
                drop(db);
                db = Db::open(options.clone()).unwrap();
                assert_eq!(
                    common::hex(&db.root().unwrap()),
                    expected,
                    "case {name}, step {i}, reopened"
                );
            }
        }
    }
}

#[test]
fn vectors_one_worker_thread_pool() {
    replay(1, IoBackend::ThreadPool);
}

#[test]
fn vectors_four_workers_thread_pool() {
    replay(4, IoBackend::ThreadPool);
}

// Forced: with `Auto` they would pass on the thread pool where io_uring is
// missing, testing nothing of it.
#[test]
fn vectors_one_worker_io_uring() {
    if common::io_uring_or_skip("vectors_one_worker_io_uring") {
        replay(1, IoBackend::IoUring);
    }
}

#[test]
fn vectors_four_workers_io_uring() {
    if common::io_uring_or_skip("vectors_four_workers_io_uring") {
        replay(4, IoBackend::IoUring);
    }
}
