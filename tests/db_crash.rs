//! SIGKILL during commits, through the public API: a child process commits blocks
//! in a loop and is killed at random moments, 50 times; after each kill the
//! reopened database holds exactly the last block it reported or the one after.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{key, root_of, tagged, Child, Rng};

use pagetrie::{Db, Options};

const CHILD_ENV: &str = "PAGETRIE_DB_CRASH_CHILD";
const COUNTER: [u8; 32] = [0xff; 32];

/// Block `n`'s writes: 300 keys from a pool of 3000, a tenth deleted, and the
/// counter key set to `n`.
fn block(n: u64) -> BTreeMap<[u8; 32], Option<Vec<u8>>> {
    let mut rng = Rng::for_index(n);
    let mut writes = BTreeMap::new();
    for _ in 0..300 {
        let x = rng.next();
        writes.insert(
            key(x % 3000),
            (!x.is_multiple_of(10)).then(|| n.to_le_bytes().to_vec()),
        );
    }
    writes.insert(COUNTER, Some(n.to_le_bytes().to_vec()));
    writes
}

#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let db = Db::open(Options::new(&dir).commit_workers(2)).unwrap();
    let mut n = match db.read(&COUNTER).unwrap() {
        Some(v) => u64::from_le_bytes(v.try_into().unwrap()),
        None => 0,
    };
    println!("ready {n}");
    loop {
        n += 1;
        let session = db.begin_session();
        for (k, v) in block(n) {
            session.write(k, v);
        }
        session.commit().unwrap();
        println!("committed {n}");
    }
}

#[test]
fn killed_mid_commit_the_database_holds_one_committed_block() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    // models[n]: the state after block n.
    let mut models = vec![BTreeMap::new()];
    for kill in 0..50 {
        let mut child = Child::spawn("crash_child", &[(CHILD_ENV, dir.path().as_os_str())]);
        // Wait for it to start, then kill it at a random moment.
        let opened: u64 = child.wait_for("ready ").parse().unwrap();
        std::thread::sleep(Duration::from_millis(5 + rng.next() % 120));
        // The last block it reported: committed now, or found at open.
        let reported = child
            .kill()
            .1
            .iter()
            .rev()
            .find_map(|line| tagged(line, "committed "))
            .map_or(opened, |n| n.parse().unwrap());

        let db = Db::open(Options::new(dir.path())).unwrap();
        let n = match db.read(&COUNTER).unwrap() {
            Some(v) => u64::from_le_bytes(v.try_into().unwrap()),
            None => 0,
        };
        while models.len() as u64 <= n {
            let mut next: BTreeMap<[u8; 32], Vec<u8>> = models.last().cloned().unwrap();
            for (k, v) in block(models.len() as u64) {
                match v {
                    Some(v) => next.insert(k, v),
                    None => next.remove(&k),
                };
            }
            models.push(next);
        }
        assert!(
            n >= reported && n <= reported.max(1) + 1,
            "kill {kill}: reported {reported}, found {n}"
        );
        let model = &models[n as usize];
        assert_eq!(
            db.root().unwrap(),
            root_of(model),
            "kill {kill}: state is not block {n}"
        );
        for (k, v) in model.iter().take(200) {
            assert_eq!(db.read(k).unwrap().as_ref(), Some(v));
        }
    }
    // The kills landed while blocks were being committed, not all before the first.
    assert!(
        models.len() > 50,
        "only {} blocks committed",
        models.len() - 1
    );
}
