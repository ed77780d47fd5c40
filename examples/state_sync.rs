//! State sync between two nodes: one database exports its state as chunks, a
//! second restores from the encoded chunks (checking each against the root it
//! trusts), and both roots are printed. Also times a full ordered iteration,
//! and the import of the same state for comparison with the restore.
//!
//! `cargo run --release --example state_sync -- [--accounts-log2 N] [--chunk-kib N] [--dir PATH]`

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use pagetrie::{Chunk, Db, Options};

/// Export a state in chunks and restore it elsewhere.
#[derive(Parser, Debug)]
struct Args {
    /// The state holds 2^N accounts (32-byte key, 8-byte balance).
    #[arg(long, default_value_t = 20)]
    accounts_log2: u32,
    /// About how many KiB of keys and values each chunk holds.
    #[arg(long, default_value_t = 1024)]
    chunk_kib: usize,
    /// Where both databases go (removed first); a temporary directory if absent.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Drop the OS page cache before each timed step (needs root).
    #[arg(long)]
    cold: bool,
    /// Use the source database already in `--dir` from an earlier run (the
    /// import is then not timed, nor compared with the restore).
    #[arg(long)]
    reuse: bool,
    /// Stop after the export (no restore, no second database).
    #[arg(long)]
    no_restore: bool,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn account(id: u64) -> ([u8; 32], Vec<u8>) {
    (
        *blake3::hash(&id.to_be_bytes()).as_bytes(),
        1000u64.to_be_bytes().to_vec(),
    )
}

fn drop_caches(cold: bool) {
    if cold && std::fs::write("/proc/sys/vm/drop_caches", "3").is_err() {
        eprintln!("  (could not drop the page cache: not root?)");
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let temp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().to_owned());
    let (source_path, target_path) = (dir.join("source"), dir.join("restored"));
    let reuse = args.reuse && source_path.exists();
    let stale: &[&PathBuf] = if reuse {
        &[&target_path]
    } else {
        &[&source_path, &target_path]
    };
    for path in stale {
        match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    }
    std::fs::create_dir_all(&dir)?;
    let n = 1u64 << args.accounts_log2;

    let started = Instant::now();
    let source = if reuse {
        Db::open(Options::new(&source_path))?
    } else {
        Db::import(Options::new(&source_path), (0..n).map(account), |_| {})?
    };
    let import_s = (!reuse).then(|| started.elapsed().as_secs_f64());
    let root = source.root()?;
    match import_s {
        Some(s) => println!(
            "source: {n} accounts imported in {s:.2} s, root {}",
            hex(&root)
        ),
        None => println!("source: reused, root {}", hex(&root)),
    }

    drop_caches(args.cold);
    let started = Instant::now();
    let (mut entries, mut entry_bytes) = (0u64, 0u64);
    for entry in source.iter_range(&[0; 32], None)? {
        let (_, value) = entry?;
        entries += 1;
        entry_bytes += 32 + value.len() as u64;
    }
    let iter_s = started.elapsed().as_secs_f64();
    println!(
        "iter_range over the whole state: {entries} entries, {:.1} MB in {iter_s:.2} s: {:.0} MB/s, {:.2} M entries/s",
        mb(entry_bytes),
        mb(entry_bytes) / iter_s,
        entries as f64 / iter_s / 1e6
    );

    drop_caches(args.cold);
    let started = Instant::now();
    let mut encoded: Vec<Vec<u8>> = Vec::new();
    let (mut chunk_entry_bytes, mut proof_bytes) = (0u64, 0u64);
    let mut encode_ns = 0u128;
    let mut first_chunk_s = None;
    for chunk in source.export(args.chunk_kib << 10)? {
        let chunk = chunk?;
        // The cuts and their proofs, taken while commits wait, and one chunk.
        first_chunk_s.get_or_insert_with(|| started.elapsed().as_secs_f64());
        chunk_entry_bytes += chunk
            .entries()
            .iter()
            .map(|(_, v)| 32 + v.len() as u64)
            .sum::<u64>();
        proof_bytes += chunk.proof().encoded_len() as u64;
        let encoding = Instant::now();
        encoded.push(chunk.encode());
        encode_ns += encoding.elapsed().as_nanos();
    }
    let export_encode_s = started.elapsed().as_secs_f64();
    // The chunks alone; encoding them is the sender's step.
    let export_s = export_encode_s - encode_ns as f64 / 1e9;
    let wire: u64 = encoded.iter().map(|c| c.len() as u64).sum();
    println!(
        "export: {} chunks, {:.1} MB of entries in {export_s:.2} s: {:.0} MB/s ({:.0} MB/s with encoding); {:.1} MB encoded, proofs {:.2}% of it",
        encoded.len(),
        mb(chunk_entry_bytes),
        mb(chunk_entry_bytes) / export_s,
        mb(chunk_entry_bytes) / export_encode_s,
        mb(wire),
        proof_bytes as f64 * 100.0 / wire as f64
    );
    let first_chunk_s = first_chunk_s.unwrap_or_default();
    println!(
        "export: first chunk after {:.0} ms (cuts chosen, their paths loaded and proven)",
        first_chunk_s * 1e3
    );
    drop(source);

    // The restore's time, and whether its root is the source's.
    let mut restored = None;
    if !args.no_restore {
        drop_caches(args.cold);
        let started = Instant::now();
        let mut restore = Db::restore(Options::new(&target_path), root)?;
        for bytes in &encoded {
            restore.apply(&Chunk::decode(bytes)?)?;
        }
        let db = restore.finish()?;
        let restore_s = started.elapsed().as_secs_f64();
        println!(
            "restore: {} chunks verified and stored in {restore_s:.2} s ({})",
            encoded.len(),
            import_s.map_or("import not timed".into(), |i| format!(
                "{:.2}x the import",
                restore_s / i
            ))
        );
        println!("source root:   {}", hex(&root));
        println!("restored root: {}", hex(&db.root()?));
        println!("roots equal: {}", db.root()? == root);
        restored = Some((restore_s, db.root()? == root));
    }
    if let Some(path) = &args.json {
        let figures = serde_json::json!({
            "accounts_log2": args.accounts_log2,
            "chunk_kib": args.chunk_kib,
            "cold": args.cold,
            "import_s": import_s,
            "iter_range_s": iter_s,
            "iter_range_mb_per_s": mb(entry_bytes) / iter_s,
            "export_s": export_s,
            "export_mb_per_s": mb(chunk_entry_bytes) / export_s,
            "export_with_encoding_s": export_encode_s,
            "export_first_chunk_s": first_chunk_s,
            "chunks": encoded.len(),
            "encoded_bytes": wire,
            "proof_bytes": proof_bytes,
            "restore_s": restored.map(|r| r.0),
            "restore_vs_import": restored.zip(import_s).map(|(r, i)| r.0 / i),
            "roots_equal": restored.map(|r| r.1),
        });
        std::fs::write(path, serde_json::to_string_pretty(&figures)?)?;
    }
    if restored.is_some_and(|r| !r.1) {
        return Err("the restored root differs".into());
    }
    Ok(())
}
