//! SIGKILL during a restore, through the public API: a child process restores
//! a state from encoded chunks and is killed at random moments, at least 20
//! times, some inside `Db::restore` itself; each run resumes where the last
//! left off (at most one chunk behind what it reported), nothing appears at the path before the root is checked,
//! and the finished database has the exported root.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use common::{tagged, Child, Rng};

use pagetrie::{Chunk, Db, Error, Options};

const CHILD_ENV: &str = "PAGETRIE_RESTORE_CRASH_CHILD";

fn load_chunks(dir: &Path) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    while let Ok(bytes) = std::fs::read(dir.join(format!("chunk{}", chunks.len()))) {
        chunks.push(Chunk::decode(&bytes).unwrap());
    }
    chunks
}

#[test]
fn restore_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let chunks = load_chunks(dir);
    let by_start: HashMap<[u8; 32], usize> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| (*c.start(), i))
        .collect();
    let root: [u8; 32] = std::fs::read(dir.join("root")).unwrap().try_into().unwrap();
    let target = std::fs::read_to_string(dir.join("target")).unwrap();
    let mut restore = Db::restore(Options::new(&target).commit_workers(2), root).unwrap();
    println!("ready");
    while let Some(next) = restore.next_start() {
        let i = by_start[&next];
        restore.apply(&chunks[i]).unwrap();
        println!("applied {i}");
    }
    let db = restore.finish().unwrap();
    assert_eq!(db.root().unwrap(), root);
    println!("finished");
}

#[test]
fn killed_mid_restore_it_resumes_and_finishes_whole() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = Db::open(Options::new(dir.path().join("source"))).unwrap();
    let session = source.begin_session();
    for i in 0..30_000u32 {
        let value = vec![i as u8; if i % 500 == 0 { 6000 } else { 12 }];
        session.write(*blake3::hash(&i.to_le_bytes()).as_bytes(), Some(value));
    }
    session.commit().unwrap();
    let root = source.root().unwrap();
    let chunks: Vec<Chunk> = source
        .export(12 << 10)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(chunks.len() >= 40, "{} chunks", chunks.len());
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    for (i, chunk) in chunks.iter().enumerate() {
        std::fs::write(work.join(format!("chunk{i}")), chunk.encode()).unwrap();
    }
    std::fs::write(work.join("root"), root).unwrap();
    let index: HashMap<[u8; 32], usize> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| (*c.start(), i))
        .collect();

    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut kills, mut finished, mut attempt) = (0, 0, 0);
    while kills < 20 || finished < 1 {
        attempt += 1;
        assert!(attempt < 200, "{kills} kills, {finished} finished");
        let target = dir.path().join(format!("restored{finished}"));
        std::fs::write(work.join("target"), target.to_str().unwrap()).unwrap();
        // Where the restore stands before this run.
        let before = match Db::restore(Options::new(&target), root) {
            Ok(restore) => restore.next_start().map(|s| index[&s]),
            Err(e) => panic!("cannot resume: {e}"),
        };
        let mut child = Child::spawn("restore_child", &[(CHILD_ENV, work.as_os_str())]);
        // Every third run is killed counting from its start, so some kills
        // land in Db::restore itself (clearing or opening); the others once
        // it applies chunks.
        if attempt % 3 != 0 {
            child.wait_for("ready");
        }
        std::thread::sleep(Duration::from_millis(rng.next() % 150));
        let (status, lines) = child.kill(); // SIGKILL
        let (mut reported, mut done) = (None, false);
        for line in &lines {
            if let Some(i) = tagged(line, "applied ") {
                reported = Some(i.parse::<usize>().unwrap());
            }
            done |= tagged(line, "finished").is_some();
        }
        if done || (status.success() && target.exists()) {
            let db = Db::open(Options::new(&target)).unwrap();
            assert_eq!(db.root().unwrap(), root);
            finished += 1;
            continue;
        }
        kills += 1;
        // Until finish checks the root, nothing is at the path.
        let occupied = std::fs::read_dir(&target).is_ok_and(|mut d| d.next().is_some());
        if occupied {
            // Killed within finish, after the rename: the database is whole.
            let db = Db::open(Options::new(&target)).unwrap();
            assert_eq!(db.root().unwrap(), root);
            finished += 1;
            continue;
        }
        let restore = Db::restore(Options::new(&target), root).unwrap();
        let now = restore.next_start().map(|s| index[&s]);
        match (reported, now) {
            // Finished applying; killed before or within finish.
            (_, None) => {}
            // The last reported chunk is in; the one after may be too.
            (Some(i), Some(n)) => assert!(n == i + 1 || n == i + 2, "reported {i}, resumes at {n}"),
            (None, Some(n)) => assert!(
                before.is_none_or(|b| n == b || n == b + 1),
                "{before:?} then {n}"
            ),
        }
    }
    eprintln!("{kills} kills, {finished} restores finished, {attempt} runs");
    assert!(kills >= 20);
    // A restore to a finished path is refused.
    assert!(matches!(
        Db::restore(Options::new(dir.path().join("restored0")), root).map(|_| ()),
        Err(Error::DirectoryNotEmpty)
    ));
}
