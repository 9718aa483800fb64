//! The files a SQLite ledger lives in (database, `-wal`, `-shm`) and which files they were
//! when the ledger opened them.
//!
//! Why: an open SQLite connection goes on writing to its file descriptors after the files are
//! deleted or replaced under it; every commit still succeeds, and the rows vanish with the last
//! descriptor (issue 13, item 11: 0 of 200 acknowledged rows after a restart). The writer
//! therefore compares the paths with the files it opened after each commit, before it
//! acknowledges anything: two `stat`s beside a commit.

use super::LedgerError;
use std::path::{Path, PathBuf};

/// A file's identity: device and inode (a path that names another file has another identity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::provenance) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The file at `path` now; `None` when there is none.
    pub(in crate::provenance) fn of(path: &Path) -> std::io::Result<Option<FileId>> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Some(FileId::from_metadata(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    #[cfg(unix)]
    fn from_metadata(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt as _;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }

    /// Elsewhere an open file cannot be deleted; only a missing file is noticed.
    #[cfg(not(unix))]
    fn from_metadata(_: &std::fs::Metadata) -> FileId {
        FileId { dev: 0, ino: 0 }
    }
}

/// The database file and its two companions, with the identities they had at open.
pub(super) struct Files {
    /// The database path, as configured.
    pub(super) db: String,
    /// Database, `-wal`, `-shm`.
    paths: [PathBuf; 3],
    ids: [Option<FileId>; 3],
}

impl Files {
    /// The files of the database at `db` as they are now (just after the ledger opened them).
    pub(super) fn opened(db: &str) -> Files {
        let paths = [
            PathBuf::from(db),
            PathBuf::from(format!("{db}-wal")),
            PathBuf::from(format!("{db}-shm")),
        ];
        let ids = [0, 1, 2].map(|i| FileId::of(&paths[i]).ok().flatten());
        Files {
            db: db.to_owned(),
            paths,
            ids,
        }
    }

    /// What no longer is the file the ledger opened: the database or its WAL (the rows are in
    /// them; the `-shm` index is rebuilt from them). `None` when both still are.
    pub(super) fn moved(&mut self) -> Option<String> {
        for i in [0, 1] {
            let path = self.paths[i].display();
            match (self.ids[i], FileId::of(&self.paths[i])) {
                (Some(then), Ok(Some(now))) if then == now => {}
                // Not there at open (a WAL appears with the first write): learn it now.
                (None, Ok(now)) => self.ids[i] = now,
                (Some(_), Ok(None)) => return Some(format!("{path} was deleted")),
                (Some(_), Ok(Some(_))) => return Some(format!("{path} was replaced")),
                (_, Err(e)) => return Some(format!("{path}: {e}")),
            }
        }
        None
    }

    /// The first of the three paths that holds a file the ledger did not open.
    pub(super) fn foreign(&self, which: &[usize]) -> Option<String> {
        which.iter().find_map(|&i| {
            let path = self.paths[i].display();
            match FileId::of(&self.paths[i]) {
                Ok(None) => None,
                Ok(Some(now)) if Some(now) == self.ids[i] => None,
                Ok(Some(_)) => Some(format!("{path} is a file this ledger did not open")),
                Err(e) => Some(format!("{path}: {e}")),
            }
        })
    }

    /// A new name next to the database for a copy of its rows.
    pub(super) fn rescue_path(&self) -> PathBuf {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        PathBuf::from(format!("{}.rescued-{ms}", self.db))
    }

    /// Creates the database's folder if it was deleted too.
    pub(super) fn create_folder(&self) -> Result<(), LedgerError> {
        match self.paths[0].parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => std::fs::create_dir_all(dir).map_err(|source| io(dir, source)),
            None => Ok(()),
        }
    }

    /// Puts `rescue` (a complete database, no connection open on the old files) at the
    /// database path. The old files' leftovers go first; a file the ledger did not open at any
    /// of the three paths stops it (that is someone else's database now, and an old `-wal`
    /// would be replayed into the new file).
    pub(super) fn place(&self, rescue: &Path) -> Result<(), LedgerError> {
        if let Some(reason) = self.foreign(&[0, 1, 2]) {
            return Err(LedgerError::Detached {
                path: self.db.clone(),
                reason: format!("{reason}; the rows are kept in {}", rescue.display()),
            });
        }
        for path in &self.paths {
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(path, e)),
                _ => {}
            }
        }
        std::fs::rename(rescue, &self.paths[0]).map_err(|e| io(rescue, e))?;
        // The rename itself must survive a crash.
        if let Some(dir) = self.paths[0].parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Err(e) = std::fs::File::open(dir).and_then(|d| d.sync_all()) {
                tracing::warn!(dir = %dir.display(), error = %e, "could not sync the ledger's folder");
            }
        }
        Ok(())
    }
}

/// An I/O failure on `path`.
pub(super) fn io(path: &Path, source: std::io::Error) -> LedgerError {
    LedgerError::Io {
        path: path.display().to_string(),
        source,
    }
}
