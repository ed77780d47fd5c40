//! Opens of damaged copies of the database and random and mutated input to
//! every proof decoder: each must be refused or answer true, never panic.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use pagetrie::trie::hash_value;
use pagetrie::trie::proof::{prove_path, MultiProof, PathProof};
use pagetrie::{Chunk, Db, KeyPath, Node, Witness};

use crate::model::{key, root_of, Model, Rng, State, POOL};
use crate::options;

/// What opening damaged copies found.
#[derive(Default, Debug)]
pub(crate) struct Corruptions {
    pub(crate) trials: u64,
    pub(crate) opened: u64,
    pub(crate) refused: u64,
    pub(crate) read_errors: u64,
    pub(crate) panics: u64,
    pub(crate) wrong: u64,
}

/// Opens copies of the database in `dir` with one file damaged: each must be
/// refused or serve exactly the model's values (or errors), never panic.
pub(crate) fn corruptions(
    dir: &Path,
    state: &State,
    trials: u64,
    rng: &mut Rng,
) -> Result<Corruptions, String> {
    // On tmpfs where there is one: each open syncs, and the disk's syncs
    // would make 10,000 trials take most of an hour.
    let shm = Path::new("/dev/shm");
    let scratch = match shm.is_dir() {
        true => tempfile::tempdir_in(shm),
        false => tempfile::tempdir(),
    }
    .map_err(|e| e.to_string())?;
    let files = [
        "meta",
        "slots0",
        "slots1",
        "pages",
        "buckets",
        "overflow",
        "catalog",
        "catalog.log",
        "history",
    ];
    let root = root_of(&state.model);
    let versions = state.roots();
    let mut c = Corruptions::default();
    for t in 0..trials {
        let copy = scratch.path().join(t.to_string());
        std::fs::create_dir(&copy).map_err(|e| e.to_string())?;
        for f in files {
            match std::fs::copy(dir.join(f), copy.join(f)) {
                Ok(_) => {}
                // The catalog is rebuilt by a scan when missing; the history
                // only reaches back less far.
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        && (f.starts_with("catalog") || f == "history") => {}
                Err(e) => return Err(format!("{f}: {e}")),
            }
        }
        let present: Vec<&str> = files
            .into_iter()
            .filter(|f| copy.join(f).exists())
            .collect();
        let victim = copy.join(present[rng.below(present.len() as u64) as usize]);
        damage(&victim, rng).map_err(|e| format!("damage: {e}"))?;
        let verdict = catch_unwind(AssertUnwindSafe(|| {
            let db = match Db::open(options(&copy)) {
                Ok(db) => db,
                Err(_) => return (false, 0, 0),
            };
            match db.root() {
                Ok(found) if found == root => {}
                _ => return (true, 0, 1),
            }
            let (mut errors, mut wrong) = (0, 0);
            // Every retained root must be one of the model's versions, with
            // its values (a damaged history may keep fewer).
            for root in db.roots().unwrap_or_default() {
                let Some(back) = versions.iter().position(|r| *r == root) else {
                    wrong += 1;
                    continue;
                };
                for i in 0..POOL {
                    let k = key(i);
                    match db.read_at(&root, &k) {
                        Ok(v) if v.as_ref() == state.version(back).get(&k) => {}
                        Ok(_) => wrong += 1,
                        Err(_) => errors += 1,
                    }
                }
            }
            (true, errors, wrong)
        }));
        c.trials += 1;
        match verdict {
            Err(_) => c.panics += 1,
            Ok((false, _, _)) => c.refused += 1,
            Ok((true, errors, wrong)) => {
                c.opened += 1;
                c.read_errors += errors;
                c.wrong += wrong;
            }
        }
        std::fs::remove_dir_all(&copy).map_err(|e| e.to_string())?;
        if (t + 1) % 1000 == 0 {
            println!("corruptions: {} of {trials} trials", t + 1);
        }
    }
    Ok(c)
}

/// Flips bits, zeroes a block, truncates, or appends garbage.
pub(crate) fn damage(path: &Path, rng: &mut Rng) -> std::io::Result<()> {
    let mut bytes = std::fs::read(path)?;
    match rng.below(4) {
        0 if !bytes.is_empty() => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(bytes.len() as u64) as usize;
                bytes[i] ^= 1 << rng.below(8);
            }
        }
        1 if bytes.len() >= 4096 => {
            let block = rng.below(bytes.len() as u64 / 4096) as usize;
            bytes[block * 4096..(block + 1) * 4096].fill(0);
        }
        2 => {
            let len = rng.below(bytes.len() as u64 + 1) as usize;
            bytes.truncate(len);
        }
        _ => {
            let extra = 1 + rng.below(8192);
            bytes.extend((0..extra).map(|_| rng.next() as u8));
        }
    }
    std::fs::write(path, bytes)
}

/// Random and mutated inputs per decoder: (inputs, decoded, panics).
pub(crate) fn fuzz(
    db: &Db,
    model: &Model,
    inputs: u64,
    rng: &mut Rng,
) -> Result<(u64, u64, u64), String> {
    let root = db.root().map_err(|e| format!("root: {e}"))?;
    let entries: Vec<_> = model.iter().map(|(k, v)| (*k, hash_value(v))).collect();
    let probe = key(rng.below(POOL));
    let path = prove_path(&entries, &probe)
        .and_then(|p| p.encode())
        .map_err(|e| e.to_string())?;
    // A witness of reads and a write, from a commit made for the purpose.
    let session = db.begin_session();
    for i in 0..20 {
        session.read(&key(i * 7)).map_err(|e| e.to_string())?;
    }
    session.write(key(1), Some(vec![1]));
    let out = session.commit_and_prove().map_err(|e| e.to_string())?;
    let witness = out.witness.encode();
    let multi = out.witness.proof.encode();
    // A middle chunk of an export: present start and end.
    let mut chunks = db.export(4 << 10).map_err(|e| e.to_string())?;
    let chunk = chunks
        .nth(1)
        .or_else(|| db.export(4 << 10).ok()?.next())
        .ok_or("an export without chunks")?
        .map_err(|e| e.to_string())?
        .encode();
    drop(chunks);
    type Check = fn(&[u8], &Node, &KeyPath) -> bool;
    let decoders: [(&[u8], Check, Node); 4] = [
        (
            &path,
            |b, root, key| {
                PathProof::decode(b)
                    .map(|p| p.verify(key, root).is_ok())
                    .is_ok()
            },
            root,
        ),
        (
            &multi,
            |b, root, _| {
                MultiProof::decode(b)
                    .map(|p| p.verify(root).is_ok())
                    .is_ok()
            },
            out.prev_root,
        ),
        (
            &witness,
            |b, root, _| {
                Witness::decode(b)
                    .map(|w| w.verify_update(root).is_ok())
                    .is_ok()
            },
            out.prev_root,
        ),
        (
            &chunk,
            |b, root, _| Chunk::decode(b).map(|c| c.verify(root).is_ok()).is_ok(),
            out.root,
        ),
    ];
    let (mut total, mut decoded, mut panics) = (0, 0, 0);
    for (valid, check, root) in decoders {
        for i in 0..inputs {
            let input = if i % 4 == 0 {
                (0..rng.below(3000)).map(|_| rng.next() as u8).collect()
            } else {
                mutate(valid, rng)
            };
            total += 1;
            match catch_unwind(|| check(&input, &root, &probe)) {
                Ok(true) => decoded += 1,
                Ok(false) => {}
                Err(_) => panics += 1,
            }
        }
    }
    Ok((total, decoded, panics))
}

/// `valid` with one to four random edits: bit flips, byte sets, cuts,
/// insertions and repeated slices.
pub(crate) fn mutate(valid: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = valid.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() as u64 + 1) as usize;
        match rng.below(5) {
            0 if at < b.len() => b[at] ^= 1 << rng.below(8),
            1 if at < b.len() => b[at] = rng.next() as u8,
            2 => b.truncate(at),
            3 => {
                let extra: Vec<u8> = (0..1 + rng.below(64)).map(|_| rng.next() as u8).collect();
                b.splice(at..at, extra);
            }
            _ => {
                let end = (at + rng.below(96) as usize).min(b.len());
                let slice = b[at..end].to_vec();
                b.splice(at..at, slice);
            }
        }
    }
    b
}
