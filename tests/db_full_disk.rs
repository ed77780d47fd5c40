//! A real full filesystem: a commit that runs out of space fails with an error
//! and is not applied, the full database still opens for reads, and after space
//! is freed it reopens at the last acknowledged commit.
//!
//! Needs root, mkfs.ext4 and loop devices (a small ext4 image is mounted); it
//! prints why and passes without checking anything where they are missing.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::key;
use pagetrie::{Db, Error, KeyPath, Node, Options};

/// A small ext4 filesystem on a loop device, unmounted when dropped.
struct LoopFs {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl LoopFs {
    fn mount(mib: u64) -> Result<LoopFs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = dir.path().join("image");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(mib << 20))
            .map_err(|e| e.to_string())?;
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mnt))?;
        Ok(LoopFs { _dir: dir, mnt })
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{command:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Block `n`: 16 values of 64 KiB (overflow space) and 200 small ones.
fn block(n: u64) -> Vec<(KeyPath, Vec<u8>)> {
    let mut writes: Vec<_> = (0..16)
        .map(|i| (key(n * 1000 + i), vec![n as u8; 64 << 10]))
        .collect();
    writes.extend((0..200).map(|i| (key(i + 500), n.to_le_bytes().to_vec())));
    writes
}

fn check(path: &Path, model: &BTreeMap<KeyPath, Vec<u8>>, root: Node) {
    let db = Db::open(Options::new(path)).expect("a full database opens");
    assert_eq!(db.root().unwrap(), root);
    for (k, v) in model {
        assert_eq!(db.read(k).unwrap().as_ref(), Some(v));
    }
}

#[test]
fn a_full_disk_fails_a_commit_that_is_then_never_found() {
    let fs = match LoopFs::mount(40) {
        Ok(fs) => fs,
        Err(why) => {
            println!("skipped: cannot mount a small ext4 image ({why})");
            return;
        }
    };
    let path = fs.mnt.join("db");
    let filler = fs.mnt.join("filler");
    std::fs::write(&filler, vec![1u8; 8 << 20]).unwrap();

    let mut model = BTreeMap::new();
    let db = Db::open(Options::new(&path)).unwrap();
    let mut root = db.root().unwrap();
    let mut failure = None;
    for n in 1..200 {
        let session = db.begin_session();
        for (k, v) in block(n) {
            session.write(k, Some(v));
        }
        match session.commit() {
            Ok(new_root) => {
                model.extend(block(n));
                root = new_root;
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("the disk never filled");
    match &failure {
        Error::Io { file, source, .. } => {
            assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "{failure}");
            assert!(file.is_some(), "the error names no file: {failure}");
            let cause = std::error::Error::source(&failure).expect("a source");
            assert!(cause.downcast_ref::<std::io::Error>().is_some());
        }
        other => panic!("a full disk must fail a commit undone: {other:?}"),
    }
    assert!(model.len() > 200, "no commit fitted");
    drop(db);

    // Still full: it opens, at the last acknowledged commit.
    check(&path, &model, root);
    // Space freed: still that commit, never the failed one.
    std::fs::remove_file(&filler).unwrap();
    check(&path, &model, root);
    let db = Db::open(Options::new(&path)).unwrap();
    let session = db.begin_session();
    session.write(key(1), Some(vec![7]));
    session.commit().unwrap();
    assert_eq!(db.read(&key(1)).unwrap(), Some(vec![7]));
}
