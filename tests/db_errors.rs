//! Errors say where: damaged files name the file and block, I/O errors the file
//! and what was being done, with the operating system's error as the source.

use std::os::unix::fs::FileExt;

use pagetrie::{Db, Error, Options};

fn database() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path())).unwrap();
    let session = db.begin_session();
    for i in 0u32..2000 {
        session.write(*blake3::hash(&i.to_le_bytes()).as_bytes(), Some(vec![1; 8]));
    }
    session.commit().unwrap();
    // A small last commit, as a database usually ends.
    let session = db.begin_session();
    session.write([7; 32], Some(vec![7]));
    session.commit().unwrap();
    dir
}

/// Asserts `e` is corruption of `buckets` at a block below `blocks`, named
/// in its message.
fn assert_names_a_bucket(e: Error, blocks: u64) {
    let Error::Corrupt { file, block, .. } = &e else {
        panic!("expected corruption, got {e:?}");
    };
    assert_eq!(*file, Some("buckets"), "{e}");
    let block = block.expect("a block number");
    assert!(block < blocks, "{e}");
    assert!(
        e.to_string().contains(&format!("buckets at block {block}")),
        "{e}"
    );
}

#[test]
fn a_damaged_bucket_names_its_file_and_block() {
    let dir = database();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("buckets"))
        .unwrap();
    // Every bucket, in the middle of its entries.
    let blocks = file.metadata().unwrap().len() / 4096;
    for b in 0..blocks {
        file.write_all_at(&[0xff; 16], b * 4096 + 100).unwrap();
    }
    // Open indexes the buckets from the catalog without reading them: the
    // damage shows when a key is read.
    let db = Db::open(Options::new(dir.path())).unwrap();
    let e = (0u32..2000)
        .find_map(|i| db.read(blake3::hash(&i.to_le_bytes()).as_bytes()).err())
        .expect("a damaged bucket read without an error");
    assert_names_a_bucket(e, blocks);
    drop(db);
    // Without the catalog, open reads every bucket and stops at the first.
    std::fs::remove_file(dir.path().join("catalog")).unwrap();
    match Db::open(Options::new(dir.path())) {
        Err(e) => assert_names_a_bucket(e, blocks),
        Ok(_) => panic!("damaged buckets opened"),
    }
}

#[test]
fn a_truncated_page_file_names_it() {
    let dir = database();
    let pages = dir.path().join("pages");
    let len = std::fs::metadata(&pages).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&pages)
        .unwrap()
        .set_len(len - 4096)
        .unwrap();
    match Db::open(Options::new(dir.path())) {
        Err(Error::Corrupt { file, .. }) => assert_eq!(file, Some("pages")),
        other => panic!("expected corruption, got {:?}", other.err()),
    }
}

#[test]
fn an_io_error_names_the_file_and_has_the_os_error_as_source() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the meta file belongs: opening it fails.
    std::fs::create_dir(dir.path().join("meta")).unwrap();
    match Db::open(Options::new(dir.path())) {
        Err(e @ Error::Io { .. }) => {
            let Error::Io { doing, file, .. } = &e else {
                unreachable!()
            };
            assert_eq!(*doing, "opening");
            assert!(file.as_deref().is_some_and(|f| f.ends_with("meta")), "{e}");
            let source = std::error::Error::source(&e).expect("a source");
            assert!(source.downcast_ref::<std::io::Error>().is_some());
        }
        other => panic!("expected an I/O error, got {:?}", other.err()),
    }
}

#[test]
fn a_database_of_an_older_format_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    // Format 2 always had its two WAL files.
    for (name, len) in [("meta", 8192), ("wal0", 4096), ("wal1", 0), ("pages", 4096)] {
        std::fs::write(dir.path().join(name), vec![3u8; len]).unwrap();
    }
    let listing = || {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    };
    let before = listing();
    match Db::open(Options::new(dir.path())) {
        Err(
            e @ Error::UnsupportedFormat {
                found: 2,
                supported: 3,
            },
        ) => {
            assert!(e.to_string().contains("format 2"), "{e}")
        }
        other => panic!("expected UnsupportedFormat, got {:?}", other.err()),
    }
    assert!(listing() == before, "the refused directory was changed");
}
