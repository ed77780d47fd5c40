//! SIGKILL during commits and rollbacks, through the public API: a child
//! process commits blocks and rolls back at random, and is killed at random
//! moments, 50 times. After each kill the reopened database holds the state
//! after the last operation the child reported or the one after it, never a
//! mix, and its history (roots and values at each) is that state's.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{key, root_of, tagged, Child, Key, Rng};

use pagetrie::{Db, Error, Options};

const CHILD_ENV: &str = "PAGETRIE_VERSIONS_CRASH_CHILD";
const SEED_ENV: &str = "PAGETRIE_VERSIONS_CRASH_SEED";
const WINDOW: usize = 8;

type State = BTreeMap<Key, Vec<u8>>;

#[derive(Debug)]
enum Op {
    Commit(Vec<(Key, Option<Vec<u8>>)>),
    Rollback(usize),
}

/// Operation `i` of run `seed`: a rollback of 1 to 4 commits three times in
/// ten, else a block of 100 writes to a pool of 400 keys, some deletes.
fn op(seed: u64, i: u64) -> Op {
    let mut rng = Rng::for_index(seed << 20 ^ i);
    if rng.next() % 10 < 3 {
        return Op::Rollback(1 + (rng.next() % 4) as usize);
    }
    let mut writes = BTreeMap::new();
    for _ in 0..100 {
        let r = rng.next();
        let value =
            (!r.is_multiple_of(8)).then(|| r.to_le_bytes()[..(r % 6) as usize + 1].to_vec());
        writes.insert(key(r % 400), value);
    }
    Op::Commit(writes.into_iter().collect())
}

/// The retained versions, newest last, after `op`.
fn step(versions: &mut Vec<State>, op: &Op) {
    match op {
        Op::Commit(writes) => {
            let mut next = versions.last().unwrap().clone();
            for (k, v) in writes {
                match v {
                    Some(v) => next.insert(*k, v.clone()),
                    None => next.remove(k),
                };
            }
            versions.push(next);
            if versions.len() > WINDOW + 1 {
                versions.remove(0);
            }
        }
        // Too far: refused, nothing changes.
        Op::Rollback(k) if *k < versions.len() => versions.truncate(versions.len() - k),
        Op::Rollback(_) => {}
    }
}

fn options(dir: &std::path::Path) -> Options {
    Options::new(dir).history(WINDOW).commit_workers(2)
}

#[test]
fn versions_crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let db = Db::open(options(dir.as_ref())).unwrap();
    println!("ready");
    for i in 0.. {
        match op(seed, i) {
            Op::Commit(writes) => {
                let session = db.begin_session();
                for (k, v) in writes {
                    session.write(k, v);
                }
                session.commit().unwrap();
            }
            Op::Rollback(k) => match db.rollback(k) {
                Ok(_) | Err(Error::RollbackTooFar { .. }) => {}
                Err(e) => panic!("{e}"),
            },
        }
        println!("done {i}");
    }
}

#[test]
fn killed_mid_commit_or_rollback_the_database_holds_one_state_and_its_history() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut versions: Vec<State> = vec![State::new()];
    let (mut rollbacks_done, mut ops_done) = (0, 0);
    for kill in 0..50u64 {
        let seed = kill.to_string();
        let env = [
            (CHILD_ENV, dir.path().as_os_str()),
            (SEED_ENV, seed.as_ref()),
        ];
        let mut child = Child::spawn("versions_crash_child", &env);
        child.wait_for("ready");
        let delay = rng.next();
        std::thread::sleep(Duration::from_millis(5 + delay % 150));
        // Operations the child finished.
        let reported = child
            .kill()
            .1
            .iter()
            .rev()
            .find_map(|line| tagged(line, "done "))
            .map_or(0, |i| i.parse::<u64>().unwrap() + 1);
        let mut after = versions.clone();
        for i in 0..reported {
            let op = op(kill, i);
            rollbacks_done += u64::from(matches!(op, Op::Rollback(_)));
            step(&mut after, &op);
        }
        ops_done += reported;
        let mut one_more = after.clone();
        let next = op(kill, reported);
        step(&mut one_more, &next);

        let db = Db::open(options(dir.path())).unwrap();
        let root = db.root().unwrap();
        versions = if root == root_of(after.last().unwrap()) {
            after
        } else {
            assert_eq!(
                root,
                root_of(one_more.last().unwrap()),
                "kill {kill}: neither the state after {reported} operations nor the next ({next:?})"
            );
            one_more
        };
        let expected: Vec<_> = versions.iter().rev().map(root_of).collect();
        assert_eq!(db.roots().unwrap(), expected, "kill {kill}: the history");
        let back = (delay as usize) % expected.len();
        let state = &versions[versions.len() - 1 - back];
        for i in (0..400).step_by(9) {
            assert_eq!(
                db.read_at(&expected[back], &key(i)).unwrap().as_ref(),
                state.get(&key(i))
            );
        }
    }
    eprintln!("{ops_done} operations, {rollbacks_done} rollbacks");
    // The kills landed among many operations, rollbacks included.
    assert!(
        ops_done > 200 && rollbacks_done > 40,
        "{ops_done} operations, {rollbacks_done} rollbacks"
    );
}
