//! A new database built beside its path and moved there when complete, so it
//! appears whole or not at all: what [`super::Db::import`] and
//! [`super::Db::restore`] share.

use std::fs;
use std::path::{Path, PathBuf};

use crate::io::{create_dir_durable, replace_durably, sync_dir, DirLock, LOCK_FILE};
use crate::Error;

/// `<target>.<suffix>`, locked like a database so that a second build to the
/// same path fails with [`Error::Locked`] instead of deleting this one's work.
pub(super) struct BuildDir {
    dir: PathBuf,
    target: PathBuf,
    _lock: DirLock,
}

impl BuildDir {
    /// Locks the build directory of `target`, which must not exist or be an
    /// empty directory ([`Error::DirectoryNotEmpty`] otherwise).
    pub(super) fn lock(target: &Path, suffix: &str) -> Result<BuildDir, Error> {
        let occupied =
            |t: &Path| t.is_file() || fs::read_dir(t).is_ok_and(|mut d| d.next().is_some());
        if occupied(target) {
            return Err(Error::DirectoryNotEmpty);
        }
        let name = target
            .file_name()
            .ok_or(Error::DirectoryNotEmpty)?
            .to_string_lossy();
        let dir = target.with_file_name(format!("{name}.{suffix}"));
        create_dir_durable(&dir)?;
        let lock = DirLock::acquire(&dir)?;
        // Another build may have finished while this one waited.
        if occupied(target) {
            return Err(Error::DirectoryNotEmpty);
        }
        Ok(BuildDir {
            dir,
            target: target.to_owned(),
            _lock: lock,
        })
    }

    /// The build directory.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the database is built.
    pub(super) fn db_path(&self) -> PathBuf {
        self.dir.join("db")
    }

    /// Removes what an earlier, killed build left: its files first (a
    /// restore's progress among them), durably, then its directories, so
    /// that a kill part-way never leaves progress beside a half-removed
    /// database.
    pub(super) fn clear(&self) -> Result<(), Error> {
        let mut dirs = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n != LOCK_FILE) {
                fs::remove_file(path)?;
            }
        }
        sync_dir(&self.dir)?;
        for dir in dirs {
            fs::remove_dir_all(dir)?;
        }
        Ok(())
    }

    /// Moves the built database (closed by now) to the target, durably, and
    /// removes the build directory.
    pub(super) fn publish(self) -> Result<(), Error> {
        // The build's blocks and buffers are free now; its peak need not stay
        // resident while the database serves.
        crate::block::release_free();
        // On failure the build directory stays: a restore resumes from it,
        // an import clears it.
        replace_durably(&self.db_path(), &self.target)?;
        // The database is in place; what is left is garbage, which a failure
        // to remove must not make look like a failed build.
        let _ = fs::remove_dir_all(&self.dir);
        Ok(())
    }

    /// Removes the build directory after a failed build.
    pub(super) fn discard(self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}
