//! The journal file: a header (magic, the journal's id), then one record per row:
//! `length: u32 LE | crc32: u32 LE | seq: u64 LE | the row as JSON (length bytes)`, the
//! checksum over `seq` and the JSON.
//!
//! Why JSON: the row's serde form is already the admin API's and round-trips every field
//! (its `lineage` and `routing` are raw JSON text that a binary format would have to escape);
//! a row takes about a microsecond to write on the journal's own thread, and the file can be
//! read with `strings` in an emergency. The length prefix finds the next record, the checksum
//! and the run of sequence numbers tell a record from the torn tail a crash can leave (the
//! end of a `write` that did not finish): reading stops there, and the tail is cut off.

use super::super::sqlite::files::FileId;
use super::super::{LedgerError, LedgerRow};
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

/// The first bytes of a journal (format 1).
const MAGIC: [u8; 8] = *b"LDPJRNL1";
/// Magic and the 16-byte journal id.
pub(super) const HEADER: u64 = 24;
/// Length, checksum, sequence number.
const RECORD_HEAD: usize = 16;
/// A longer record is a corrupt length (a row is a few KiB; previews are capped).
const MAX_RECORD: usize = 64 << 20;

/// What reading a journal found.
#[derive(Debug, Default)]
pub(in crate::provenance) struct Contents {
    /// The rows, with their sequence numbers, in order.
    pub(in crate::provenance) rows: Vec<(u64, LedgerRow)>,
    /// The highest sequence number read (0: none).
    pub(in crate::provenance) last_seq: u64,
    /// Bytes cut off the end: a torn tail.
    pub(in crate::provenance) torn_bytes: u64,
    /// Records whose checksum held but whose row could not be read back (skipped).
    pub(in crate::provenance) unreadable: u64,
}

/// An open journal file, locked against a second process.
pub(in crate::provenance) struct JournalFile {
    path: PathBuf,
    file: File,
    /// The open file's identity (the path is compared with it after each write).
    opened: Option<FileId>,
    id: [u8; 16],
    /// Bytes of whole records (and the header): where the next record goes.
    len: u64,
    /// The encoding buffer, kept between groups.
    buf: Vec<u8>,
}

/// A failure on the journal at `path`.
fn failed(path: &Path, reason: impl std::fmt::Display) -> LedgerError {
    LedgerError::Journal {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

impl JournalFile {
    /// Opens the journal at `path` (creating it, and its folder, with a new id when there is
    /// none), locks it, and reads its rows; a torn tail is cut off.
    #[cfg(test)]
    pub(in crate::provenance) fn open(path: &Path) -> Result<(JournalFile, Contents), LedgerError> {
        JournalFile::try_open(path)?.ok_or_else(|| {
            failed(
                path,
                "in use by another process (each gateway writes a journal of its own)",
            )
        })
    }

    /// [`JournalFile::open`], `None` when another process holds the journal (a live gateway's).
    pub(in crate::provenance) fn try_open(
        path: &Path,
    ) -> Result<Option<(JournalFile, Contents)>, LedgerError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| failed(dir, e))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| failed(path, e))?;
        if !lock(&file, path)? {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| failed(path, e))?;
        let (id, contents, good) = match read_header(&bytes) {
            Some(id) => {
                let (contents, good) = read_records(&bytes[HEADER as usize..]);
                (id, contents, HEADER + good as u64)
            }
            // Empty, or cut inside its header (a crash while creating it): a new journal.
            None if bytes.len() < HEADER as usize
                && bytes.iter().zip(MAGIC.iter()).all(|(a, b)| a == b) =>
            {
                let id = *uuid::Uuid::new_v4().as_bytes();
                write_header(&mut file, &id).map_err(|e| failed(path, e))?;
                sync_folder(path);
                (id, Contents::default(), HEADER)
            }
            None => return Err(failed(path, "not a ledger journal (unknown header)")),
        };
        if good < bytes.len() as u64 {
            file.set_len(good).map_err(|e| failed(path, e))?;
        }
        file.seek(SeekFrom::Start(good))
            .map_err(|e| failed(path, e))?;
        let opened = FileId::of(path).ok().flatten();
        let contents = Contents {
            torn_bytes: (bytes.len() as u64).saturating_sub(good),
            ..contents
        };
        Ok(Some((
            JournalFile {
                path: path.to_owned(),
                file,
                opened,
                id,
                len: good,
                buf: Vec::new(),
            },
            contents,
        )))
    }

    /// Creates a new, empty journal with id `id` at `path` (which must not exist), locked.
    pub(in crate::provenance) fn create(
        path: &Path,
        id: [u8; 16],
    ) -> Result<JournalFile, LedgerError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| failed(dir, e))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| failed(path, e))?;
        if !lock(&file, path)? {
            return Err(failed(path, "locked by another process as it was created"));
        }
        write_header(&mut file, &id).map_err(|e| failed(path, e))?;
        sync_folder(path);
        Ok(JournalFile {
            path: path.to_owned(),
            file,
            opened: FileId::of(path).ok().flatten(),
            id,
            len: HEADER,
            buf: Vec::new(),
        })
    }

    /// Deletes the journal (the store holds all its rows).
    pub(in crate::provenance) fn remove(self) -> Result<(), LedgerError> {
        std::fs::remove_file(&self.path).map_err(|e| failed(&self.path, e))?;
        sync_folder(&self.path);
        Ok(())
    }

    /// The journal's id (hex), the key of its mark in the store.
    pub(in crate::provenance) fn id(&self) -> String {
        hex::encode(self.id)
    }

    /// Its path.
    pub(in crate::provenance) fn path(&self) -> &Path {
        &self.path
    }

    /// Its size in bytes.
    pub(in crate::provenance) fn len(&self) -> u64 {
        self.len
    }

    /// Appends `rows`, numbered from `first_seq`, in one `write`, then `fdatasync` when
    /// `sync`. On failure the file is cut back to its last whole record (a partial write must
    /// not sit in front of the next group).
    pub(in crate::provenance) fn append<'r>(
        &mut self,
        rows: impl Iterator<Item = &'r LedgerRow>,
        first_seq: u64,
        sync: bool,
    ) -> Result<(), LedgerError> {
        self.buf.clear();
        for (seq, row) in (first_seq..).zip(rows) {
            encode(&mut self.buf, seq, row);
        }
        let written = self.file.write_all(&self.buf).and_then(|()| {
            if sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        match written {
            Ok(()) => {
                self.len += self.buf.len() as u64;
                // One group's buffer is kept; a rare huge one is not.
                if self.buf.capacity() > 4 << 20 {
                    self.buf = Vec::new();
                }
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                let _ = self.file.seek(SeekFrom::Start(self.len));
                Err(failed(&self.path, e))
            }
        }
    }

    /// Whether the path still names the open file: why not, when it does not (deleted,
    /// replaced).
    pub(in crate::provenance) fn moved(&mut self) -> Option<String> {
        let path = self.path.display();
        match (self.opened, FileId::of(&self.path)) {
            (Some(then), Ok(Some(now))) if then == now => None,
            (None, Ok(now)) => {
                self.opened = now;
                None
            }
            (Some(_), Ok(None)) => Some(format!("{path} was deleted")),
            (Some(_), Ok(Some(_))) => Some(format!("{path} was replaced")),
            (_, Err(e)) => Some(format!("{path}: {e}")),
        }
    }

    /// A new, empty journal with the same id at the path (the old file was deleted or
    /// replaced). A file someone else put there is left alone: renamed aside first.
    pub(in crate::provenance) fn recreate(&mut self) -> Result<(), LedgerError> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| failed(dir, e))?;
        }
        if let Ok(Some(_)) = FileId::of(&self.path) {
            let aside = self
                .path
                .with_extension(format!("foreign-{}", chrono::Utc::now().timestamp_millis()));
            std::fs::rename(&self.path, &aside).map_err(|e| failed(&self.path, e))?;
        }
        let path = self.path.clone();
        *self = JournalFile::create(&path, self.id)?;
        Ok(())
    }

    /// Empties the journal (the store holds every row it had), keeping its header.
    pub(in crate::provenance) fn truncate(&mut self) -> Result<(), LedgerError> {
        self.file
            .set_len(HEADER)
            .and_then(|()| self.file.seek(SeekFrom::Start(HEADER)).map(drop))
            .map_err(|e| failed(&self.path, e))?;
        self.len = HEADER;
        Ok(())
    }
}

/// Takes the file's exclusive lock (false: another process holds it). A live gateway holds
/// its journal's: another one starting beside it adopts only journals nobody holds (those of
/// gateways that died).
#[cfg(unix)]
fn lock(file: &File, path: &Path) -> Result<bool, LedgerError> {
    use rustix::fs::{flock, FlockOperation};
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(false),
        Err(e) => Err(failed(path, std::io::Error::from(e))),
    }
}

/// Elsewhere journals are not locked: one gateway per journal place.
#[cfg(not(unix))]
fn lock(_: &File, _: &Path) -> Result<bool, LedgerError> {
    Ok(true)
}

/// Writes a header at the start of an empty file and makes it durable.
fn write_header(file: &mut File, id: &[u8; 16]) -> std::io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    let mut header = Vec::with_capacity(HEADER as usize);
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(id);
    file.write_all(&header)?;
    file.sync_all()
}

/// Makes a new file's name durable (its folder's entry).
fn sync_folder(path: &Path) {
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => dir,
        None => Path::new("."),
    };
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not sync the journal's folder");
    }
}

/// The journal id, when `bytes` start with a whole header.
fn read_header(bytes: &[u8]) -> Option<[u8; 16]> {
    let header = bytes.get(..HEADER as usize)?;
    if header[..MAGIC.len()] != MAGIC {
        return None;
    }
    header[MAGIC.len()..].try_into().ok()
}

/// Appends one record for `row` to `buf`.
pub(super) fn encode(buf: &mut Vec<u8>, seq: u64, row: &LedgerRow) {
    let start = buf.len();
    buf.extend_from_slice(&[0; RECORD_HEAD]);
    // A row is plain data: serialising it into memory cannot fail (an error would be a
    // non-string map key, which it has none of); a row that did anyway is written empty and
    // skipped as unreadable at replay.
    if serde_json::to_writer(&mut *buf, row).is_err() {
        buf.truncate(start + RECORD_HEAD);
    }
    let len = (buf.len() - start - RECORD_HEAD) as u32;
    buf[start + 8..start + 16].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&buf[start + 8..]);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// The records in `bytes` (after the header) up to the first that is cut short, fails its
/// checksum, or breaks the run of sequence numbers; and where that whole part ends.
pub(super) fn read_records(bytes: &[u8]) -> (Contents, usize) {
    let mut contents = Contents::default();
    let mut at = 0;
    while let Some(head) = bytes.get(at..at + RECORD_HEAD) {
        let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let (len, crc) = (word(0) as usize, word(4));
        if len > MAX_RECORD {
            break;
        }
        let Some(body) = bytes.get(at + 8..at + RECORD_HEAD + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        let mut seq = [0; 8];
        seq.copy_from_slice(&body[..8]);
        let seq = u64::from_le_bytes(seq);
        if contents.last_seq != 0 && seq != contents.last_seq + 1 {
            break;
        }
        contents.last_seq = seq;
        match serde_json::from_slice::<LedgerRow>(&body[8..]) {
            Ok(row) => contents.rows.push((seq, row)),
            Err(e) => {
                contents.unreadable += 1;
                tracing::error!(seq, error = %e, "a journal record could not be read back; skipped");
            }
        }
        at += RECORD_HEAD + len;
    }
    (contents, at)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

    use super::*;
    use crate::provenance::sqlite::tests::row;

    fn rows(n: usize) -> Vec<LedgerRow> {
        (0..n)
            .map(|i| row(&format!("t{i}"), "s", i as i64))
            .collect()
    }

    #[test]
    fn rows_round_trip_and_a_reopened_journal_keeps_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/ledger.journal");
        let (mut j, c) = JournalFile::open(&path).unwrap();
        assert!(c.rows.is_empty());
        let id = j.id();
        let written = rows(3);
        j.append(written.iter(), 7, false).unwrap();
        j.append(written[..1].iter(), 10, true).unwrap();
        drop(j);
        let (j, c) = JournalFile::open(&path).unwrap();
        assert_eq!(j.id(), id);
        let seqs: Vec<u64> = c.rows.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, [7, 8, 9, 10]);
        assert_eq!(c.rows[1].1, written[1]);
        assert_eq!((c.last_seq, c.torn_bytes), (10, 0));
    }

    /// A crash in the middle of a `write` leaves part of a record: every cut of the last
    /// record, and a flipped byte in it, reads as the records before it, and the tail is
    /// cut off so that the next record follows the last whole one.
    #[test]
    fn a_torn_or_corrupt_tail_is_detected_and_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.journal");
        let (mut j, _) = JournalFile::open(&path).unwrap();
        let written = rows(3);
        j.append(written[..2].iter(), 1, false).unwrap();
        let whole = j.len();
        j.append(written[2..].iter(), 3, false).unwrap();
        let full = std::fs::read(&path).unwrap();
        drop(j);
        let mut cuts: Vec<Vec<u8>> = (whole as usize + 1..full.len())
            .step_by(7)
            .map(|end| full[..end].to_vec())
            .collect();
        let mut flipped = full.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0x20;
        cuts.push(flipped);
        for bytes in cuts {
            std::fs::write(&path, &bytes).unwrap();
            let (mut j, c) = JournalFile::open(&path).unwrap();
            let seqs: Vec<u64> = c.rows.iter().map(|(s, _)| *s).collect();
            assert_eq!(seqs, [1, 2], "{} bytes", bytes.len());
            assert_eq!(c.torn_bytes, bytes.len() as u64 - whole);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
            j.append(written[2..].iter(), 3, false).unwrap();
            drop(j);
            let (_, c) = JournalFile::open(&path).unwrap();
            assert_eq!(c.last_seq, 3);
        }
    }

    #[test]
    fn a_second_process_cannot_open_a_journal_in_use_nor_a_foreign_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.journal");
        let (_j, _) = JournalFile::open(&path).unwrap();
        let Err(e) = JournalFile::open(&path) else {
            panic!("opened twice")
        };
        assert!(e.to_string().contains("in use by another process"), "{e}");
        let other = dir.path().join("other");
        std::fs::write(&other, b"hello world, this is not a journal").unwrap();
        let Err(e) = JournalFile::open(&other) else {
            panic!("opened a foreign file")
        };
        assert!(e.to_string().contains("not a ledger journal"), "{e}");
    }

    #[test]
    fn truncating_keeps_the_header_and_a_deleted_file_is_noticed_and_recreated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.journal");
        let (mut j, _) = JournalFile::open(&path).unwrap();
        j.append(rows(2).iter(), 1, false).unwrap();
        j.truncate().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), HEADER);
        assert_eq!(j.moved(), None);
        std::fs::remove_file(&path).unwrap();
        assert!(j.moved().unwrap().contains("was deleted"));
        let id = j.id();
        j.recreate().unwrap();
        assert_eq!(j.moved(), None);
        j.append(rows(1).iter(), 3, false).unwrap();
        drop(j);
        let (j, c) = JournalFile::open(&path).unwrap();
        assert_eq!((j.id(), c.last_seq), (id, 3));
    }
}
