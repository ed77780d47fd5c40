//! Torture: one database and its model through random commits, SIGKILLs of a
//! child process that commits (at random moments, during open and recovery
//! too), simulated power losses (each write not yet synced dropped, kept or torn
//! at a 512-byte sector), injected I/O errors and full disks; then opens of
//! damaged copies of its files, and random and mutated input to every proof
//! decoder.
//!
//! Some of the faulted operations are rollbacks instead of commits. Regions
//! are 8 blocks with a quarter of each file spare, so the cleaner moves
//! blocks in most commits.
//!
//! After every event the reopened database must hold exactly the last
//! acknowledged commit (or rollback) or the one after it, as the outcome says:
//! `Ok` and `Error::CommitDurable` mean after, `Error::CommitInDoubt` either,
//! any other error before; and its history (`Db::roots`) must be exactly that
//! state's. Every value is read back, at the newest root and at a retained
//! older one, and every commit's witness is verified. A run stops at the
//! first violation, with a non-zero exit.
//!
//! ```sh
//! cargo run --release --features fault-injection --example torture -- --help
//! cargo run --release --features fault-injection --example torture -- \
//!     --kills 1000 --power-losses 1000 --corruptions 10000 --fuzz 10000
//! ```

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use pagetrie::faults::{Faults, PowerLoss};
use pagetrie::trie::hash_value;
use pagetrie::{Db, Error, IoBackend, KeyPath, Options};

mod damage;
mod model;

use damage::{corruptions, fuzz};
use model::{apply, block, key, Model, Rng, State, POOL, WINDOW};

/// Torture a pagetrie database: kills, power losses, I/O errors, full disks,
/// damaged files and mutated proofs, each checked against a model.
#[derive(Parser)]
struct Args {
    /// Seed of every random choice (kill timing aside).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// SIGKILLs of a child process that opens the database and commits.
    #[arg(long, default_value_t = 100)]
    kills: u64,
    /// Simulated power losses, most during a commit cut short by a fault.
    #[arg(long, default_value_t = 100)]
    power_losses: u64,
    /// Commits hit by an injected I/O error or a full disk, then reopened.
    #[arg(long, default_value_t = 100)]
    errors: u64,
    /// Opens of copies of the database with a damaged file.
    #[arg(long, default_value_t = 1000)]
    corruptions: u64,
    /// Random and mutated inputs for each proof decoder.
    #[arg(long, default_value_t = 1000)]
    fuzz: u64,
    /// Events of one kind per round before the next kind's turn.
    #[arg(long, default_value_t = 25)]
    round: u64,
    /// The database's directory [default: a temporary one, deleted at the end].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The I/O engine every database runs on; injected faults reach either.
    #[arg(long, value_enum, default_value_t = Engine::Uring)]
    io: Engine,
    /// How often the catalog folds and the history file is rewritten:
    /// `production` as a node runs (folds on their own thread), or `small`,
    /// as often as they can (on the committing thread), so faults cut them.
    #[arg(long, value_enum, default_value_t = Logs::Production)]
    logs: Logs,
    /// Where commits put their blocks, in regions of 8 with a quarter of
    /// the files spare: `clean`, the cleaner moving blocks out of sparse
    /// regions in most commits, or `rewrite`, no cleaner and gaps of up to
    /// 8 cached pages written again between a commit's writes; so faults
    /// land among moves or among rewrites.
    #[arg(long, value_enum, default_value_t = Placing::Clean)]
    placement: Placing,
    /// Internal: run as the child that commits from this block on until killed.
    #[arg(long, hide = true)]
    child_from: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Engine {
    Uring,
    Threads,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Logs {
    Production,
    Small,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Placing {
    Clean,
    Rewrite,
}

/// The engine and log tuning of this run, set once from the arguments.
static SETUP: std::sync::OnceLock<(Engine, Logs, Placing)> = std::sync::OnceLock::new();

fn options(dir: &Path) -> Options {
    let (engine, logs, placing) =
        SETUP
            .get()
            .copied()
            .unwrap_or((Engine::Uring, Logs::Production, Placing::Clean));
    let options = Options::new(dir)
        .commit_workers(2)
        .page_cache_mib(2)
        .value_cache_mib(1)
        .history(WINDOW)
        // Regions of 8 blocks with a quarter spare: commits place their
        // blocks in runs and the cleaner moves blocks in most of them, or
        // they write cached pages again between their writes, so every
        // kill, power loss and error can land among moves or rewrites.
        .region_blocks(8)
        .spare_space_percent(match placing {
            Placing::Clean => 25,
            Placing::Rewrite => 0,
        })
        .clean_regions(placing == Placing::Clean)
        .rewrite_gap_blocks(match placing {
            Placing::Clean => 2,
            Placing::Rewrite => 8,
        })
        .io_backend(match engine {
            Engine::Uring => IoBackend::IoUring,
            Engine::Threads => IoBackend::ThreadPool,
        });
    match logs {
        Logs::Production => options,
        Logs::Small => options
            .catalog_fold_blocks(2)
            .history_trim_blocks(2)
            .fold_in_background(false),
    }
}

/// Reads some keys, writes block `n` and commits it with a witness, which must
/// prove the reads and the update.
fn commit_block(db: &Db, seed: u64, n: u64, model: &Model) -> Result<(), Error> {
    let writes = block(seed, n);
    let session = db.begin_session();
    let reads: Vec<KeyPath> = writes.keys().step_by(3).copied().collect();
    for k in &reads {
        let got = session.read(k)?;
        assert_eq!(got.as_ref(), model.get(k), "a session read a wrong value");
    }
    for (k, v) in &writes {
        session.write(*k, v.clone());
    }
    let out = session.commit_and_prove()?;
    let verified = out.witness.verify(&out.prev_root)?;
    for k in &reads {
        verified.confirm(k, model.get(k).map(|v| hash_value(v)).as_ref())?;
    }
    assert_eq!(out.witness.verify_update(&out.prev_root)?, out.root);
    Ok(())
}

/// Where a reopened database may stand after a commit's outcome.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Allowed {
    Before,
    After,
    Either,
}

fn allowed(outcome: &Result<(), Error>) -> Allowed {
    match outcome {
        Ok(()) | Err(Error::CommitDurable(_)) => Allowed::After,
        Err(Error::CommitInDoubt(_)) => Allowed::Either,
        Err(_) => Allowed::Before,
    }
}

/// The database, its model, and what the run has seen.
struct Torture {
    seed: u64,
    dir: PathBuf,
    rng: Rng,
    /// Blocks acknowledged (some since rolled back).
    n: u64,
    state: State,
    rollbacks: u64,
    kills: u64,
    power_losses: u64,
    errors: u64,
    /// Reopens that found the commit after the last acknowledged one.
    rolled_forward: u64,
    in_doubt: u64,
    /// Pages the sessions that faulted wrote again to join runs
    /// (`Metrics::blocks_rewritten`): faults landed among rewrites.
    rewritten: u64,
}

impl Torture {
    /// Checks the reopened `db` against `allowed`, with `after` the state
    /// the operation in question leads to (`committed`: a commit of block
    /// `n + 1`), and moves the model to where it stands.
    fn settle(
        &mut self,
        db: &Db,
        allowed: Allowed,
        event: &str,
        after: State,
        committed: bool,
    ) -> Result<(), String> {
        let found = db.roots().map_err(|e| format!("roots: {e}"))?;
        let (before_roots, after_roots) = (self.state.roots(), after.roots());
        if before_roots == after_roots {
            eprintln!(
                "note: the operation after block {} leaves the state as it was",
                self.n
            );
        }
        // An operation that changes nothing leaves one state: take it as
        // applied unless the outcome says it was not.
        let is_after =
            if found == after_roots && (found != before_roots || allowed != Allowed::Before) {
                true
            } else if found == before_roots {
                false
            } else {
                return Err(format!(
                    "{event}: a partial commit (root or history matches neither state)"
                ));
            };
        match (allowed, is_after) {
            (Allowed::After, false) => {
                return Err(format!("{event}: acknowledged operation after block {} lost", self.n))
            }
            (Allowed::Before, true) => {
                return Err(format!(
                    "{event}: the operation after block {} failed with an error, yet reopening found it",
                    self.n
                ))
            }
            _ => {}
        }
        if is_after {
            self.state = after;
            self.n += u64::from(committed);
            self.rolled_forward += 1;
        }
        let session = db.begin_session();
        let back = self.rng.below(self.state.history.len() as u64 + 1) as usize;
        let (old_root, old) = (found[back], self.state.version(back));
        for i in 0..POOL {
            let k = key(i);
            let got = session
                .read(&k)
                .map_err(|e| format!("{event}: read: {e}"))?;
            if got.as_ref() != self.state.model.get(&k) {
                return Err(format!("{event}: key {i} reads a wrong value"));
            }
            let got = db
                .read_at(&old_root, &k)
                .map_err(|e| format!("{event}: read_at: {e}"))?;
            if got.as_ref() != old.get(&k) {
                return Err(format!(
                    "{event}: key {i} reads a wrong value {back} commits back"
                ));
            }
        }
        Ok(())
    }

    /// The child's `--io` (0), `--logs` (1) or `--placement` (2)
    /// argument: this run's.
    fn setup_arg(&self, which: usize) -> &'static str {
        match (SETUP.get(), which) {
            (Some((Engine::Threads, _, _)), 0) => "threads",
            (_, 0) => "uring",
            (Some((_, Logs::Small, _)), 1) => "small",
            (_, 1) => "production",
            (Some((_, _, Placing::Rewrite)), _) => "rewrite",
            _ => "clean",
        }
    }

    /// Runs a child that commits from block `n + 1` on, kills it at a random
    /// moment, and checks the reopened database.
    fn kill(&mut self) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .args(["--seed", &self.seed.to_string()])
            .args(["--child-from", &self.n.to_string()])
            .args(["--io", self.setup_arg(0)])
            .args(["--logs", self.setup_arg(1)])
            .args(["--placement", self.setup_arg(2)])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let stdout = child.stdout.take().ok_or("no child stdout")?;
        let reader = std::thread::spawn(move || {
            let mut acked = Vec::new();
            for line in BufReader::new(stdout).lines() {
                match line
                    .ok()
                    .and_then(|l| l.strip_prefix("acked ")?.parse().ok())
                {
                    Some(n) => acked.push(n),
                    None => break,
                }
            }
            acked
        });
        // Up to 60 ms: some kills land in open or recovery, most in commits.
        std::thread::sleep(Duration::from_micros(self.rng.below(60_000)));
        let _ = child.kill();
        let status = child.wait().map_err(|e| e.to_string())?;
        let acked = reader.join().map_err(|_| "reader panicked")?;
        if status.code().is_some() {
            return Err(format!("the child exited by itself: {status}"));
        }
        for n in acked {
            if n != self.n + 1 {
                return Err(format!("the child acknowledged block {n} after {}", self.n));
            }
            self.state = self.state.committed(&block(self.seed, n));
            self.n = n;
        }
        let db = Db::open(options(&self.dir)).map_err(|e| format!("reopen after kill: {e}"))?;
        let after = self.state.committed(&block(self.seed, self.n + 1));
        self.settle(&db, Allowed::Either, "kill", after, true)?;
        self.kills += 1;
        Ok(())
    }

    /// Commits a few blocks with a fault plan, arms a random fault for the
    /// last, then loses power (or, for an error event, just closes) and
    /// checks the reopened database; sometimes its recovery is faulted too.
    fn fault(&mut self, power_loss: bool) -> Result<(), String> {
        let faults = Arc::new(Faults::none());
        let db = Db::open(options(&self.dir).faults(faults.clone()))
            .map_err(|e| format!("open: {e}"))?;
        for _ in 0..self.rng.below(3) {
            let n = self.n + 1;
            commit_block(&db, self.seed, n, &self.state.model)
                .map_err(|e| format!("block {n} without faults: {e}"))?;
            self.state = self.state.committed(&block(self.seed, n));
            self.n = n;
        }
        // A quarter of the faulted operations are rollbacks.
        let retained = self.state.history.len() as u64;
        let rollback =
            (retained > 0 && self.rng.below(4) == 0).then(|| 1 + self.rng.below(retained) as usize);
        let kind = self.rng.below(if power_loss { 7 } else { 6 });
        match kind {
            0 => faults.fail_writes_after(self.rng.below(40), self.rng.below(2) == 0),
            1 => faults.fail_one_sync_after(self.rng.below(6)),
            2 => faults.disk_full_after(self.rng.below(40)),
            3 => faults.fail_reads(true),
            // From the n-th sync on, every one fails: where that is the slot
            // map's, its erasure fails too, and the commit is in doubt.
            4 => faults.fail_syncs_after(self.rng.below(5)),
            // The io_uring ring dies mid-commit (nothing on the thread pool).
            5 => faults.kill_ring_after(self.rng.below(40)),
            _ => {} // a power loss after a commit that succeeded
        }
        let (outcome, after) = match rollback {
            Some(k) => {
                self.rollbacks += 1;
                (db.rollback(k).map(drop), self.state.rolled_back(k))
            }
            None => (
                commit_block(&db, self.seed, self.n + 1, &self.state.model),
                self.state.committed(&block(self.seed, self.n + 1)),
            ),
        };
        if matches!(outcome, Err(Error::StaleSession)) {
            return Err("a lone session was stale".into());
        }
        if matches!(outcome, Err(Error::CommitInDoubt(_))) {
            self.in_doubt += 1;
        }
        let allowed = allowed(&outcome);
        // Pages written again to join runs, in sessions that faulted.
        self.rewritten += db.metrics().blocks_rewritten;
        faults.clear();
        let event = if power_loss {
            let seed = self.rng.next();
            let loss = match self.rng.below(3) {
                0 => PowerLoss::DropAll,
                1 => PowerLoss::Random(seed),
                _ => PowerLoss::Torn(seed),
            };
            db.lose_power(loss).map_err(|e| e.to_string())?;
            format!("power loss {loss:?} after {outcome:?}")
        } else {
            drop(db);
            format!("reopen after {outcome:?}")
        };
        // A quarter of reopens run recovery into a failing write first.
        if self.rng.below(4) == 0 {
            let faults = Arc::new(Faults::none());
            faults.fail_writes_after(self.rng.below(3), true);
            if let Ok(db) = Db::open(options(&self.dir).faults(faults)) {
                self.settle(&db, allowed, &event, after, rollback.is_none())?;
                return self.count(power_loss);
            }
        }
        let db = Db::open(options(&self.dir)).map_err(|e| format!("{event}: reopen: {e}"))?;
        self.settle(&db, allowed, &event, after, rollback.is_none())?;
        self.count(power_loss)
    }

    fn count(&mut self, power_loss: bool) -> Result<(), String> {
        match power_loss {
            true => self.power_losses += 1,
            false => self.errors += 1,
        }
        Ok(())
    }
}

/// The child: opens the database and commits blocks `from + 1`, ... until
/// killed, saying "acked n" after each.
fn child(args: &Args, from: u64) -> ExitCode {
    let Some(dir) = &args.dir else {
        return ExitCode::FAILURE;
    };
    let db = match Db::open(options(dir)) {
        Ok(db) => db,
        Err(e) => {
            eprintln!("child: open: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The state it opened (rollbacks make it other than blocks 1 to `from`;
    // the parent checks it), so the child can check its reads and witnesses.
    let mut model = Model::new();
    for i in 0..POOL {
        match db.read(&key(i)) {
            Ok(Some(v)) => {
                model.insert(key(i), v);
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("child: read: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut stdout = std::io::stdout();
    for n in from + 1.. {
        if let Err(e) = commit_block(&db, args.seed, n, &model) {
            eprintln!("child: block {n}: {e}");
            return ExitCode::FAILURE;
        }
        apply(&mut model, &block(args.seed, n));
        if writeln!(stdout, "acked {n}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn run(args: &Args) -> Result<(), String> {
    let started = Instant::now();
    let temp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().join("db"));
    if dir.exists() {
        return Err(format!(
            "{} exists: torture needs a fresh directory",
            dir.display()
        ));
    }
    let mut t = Torture {
        seed: args.seed,
        dir,
        rng: Rng::new(args.seed),
        n: 0,
        state: State::default(),
        rollbacks: 0,
        kills: 0,
        power_losses: 0,
        errors: 0,
        rolled_forward: 0,
        in_doubt: 0,
        rewritten: 0,
    };
    println!(
        "torture: seed {}, {} kills, {} power losses, {} errors, {} corruptions, {} fuzz inputs per decoder; {:?} I/O engine, {:?} log tuning, {:?} placement",
        args.seed, args.kills, args.power_losses, args.errors, args.corruptions, args.fuzz, args.io, args.logs, args.placement
    );
    let mut round = 0;
    while t.kills < args.kills || t.power_losses < args.power_losses || t.errors < args.errors {
        round += 1;
        for _ in 0..args.round {
            if t.kills < args.kills {
                t.kill()?;
            }
        }
        for _ in 0..args.round {
            if t.power_losses < args.power_losses {
                t.fault(true)?;
            }
            if t.errors < args.errors {
                t.fault(false)?;
            }
        }
        println!(
            "round {round}: {} kills, {} power losses, {} errors; {} blocks committed, {} faulted rollbacks, {} found rolled forward, {} pages rewritten in faulted sessions, {:.0?}",
            t.kills, t.power_losses, t.errors, t.n, t.rollbacks, t.rolled_forward, t.rewritten, started.elapsed()
        );
    }

    // Panics inside catch_unwind are counted, not printed.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let c = corruptions(&t.dir, &t.state, args.corruptions, &mut t.rng);
    std::panic::set_hook(default_hook);
    let c = c?;
    println!(
        "corruptions: {} trials: {} refused at open, {} opened ({} read errors), {} panics, {} wrong values",
        c.trials, c.refused, c.opened, c.read_errors, c.panics, c.wrong
    );
    let db = Db::open(options(&t.dir)).map_err(|e| e.to_string())?;
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let fuzzed = fuzz(&db, &t.state.model, args.fuzz, &mut t.rng);
    std::panic::set_hook(default_hook);
    let (inputs, decoded, panics) = fuzzed?;
    println!("fuzz: {inputs} inputs to 4 decoders (path, multi-proof, witness, chunk): {decoded} decoded and checked, {panics} panics");
    let ok = c.panics == 0 && c.wrong == 0 && panics == 0;
    println!(
        "summary: seed {} ({:?}, {:?} logs, {:?} placement): {} kills, {} power losses, {} errors ({} in doubt), {} blocks, {} pages rewritten in faulted sessions; 0 lost, 0 partial; corruptions {} trials, {} panics, {} wrong values; fuzz {} inputs, {} panics; {:.1?}: {}",
        args.seed,
        args.io,
        args.logs,
        args.placement,
        t.kills,
        t.power_losses,
        t.errors,
        t.in_doubt,
        t.n,
        t.rewritten,
        c.trials,
        c.panics,
        c.wrong,
        inputs,
        panics,
        started.elapsed(),
        if ok { "PASS" } else { "FAIL" }
    );
    if !ok {
        return Err("damaged files or proofs were mishandled".into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let _ = SETUP.set((args.io, args.logs, args.placement));
    if let Some(from) = args.child_from {
        return child(&args, from);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("torture: FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}
