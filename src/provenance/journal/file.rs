//! The journal file: a header (magic, the journal's id), then one record per row:
//! `length: u32 LE | crc32: u32 LE | seq: u64 LE | the row as JSON (length bytes)`, the
//! checksum over `seq` and the JSON.
//!
//! Why JSON: the row's serde form is already the admin API's and round-trips every field
//! (its `lineage` and `routing` are raw JSON text that a binary format would have to escape);
//! a row takes about a microsecond to write on the journal's own thread, and the file can be
//! read with `strings` in an emergency. The length prefix finds the next record, the checksum
//! and the run of sequence numbers tell a record from the torn tail a crash can leave (the
//! end of a `write` that did not finish): the tail is cut off.
//!
//! A bad record with a valid one after it is not a torn tail (a crash only ever tears the
//! end): it is damage (a flipped bit, a zeroed block, a bad sector). Reading then
//! resynchronises: it scans forward for the next offset where a record's length fits, its
//! sequence number continues the run and its checksum holds, and goes on from there, so a
//! damaged record costs that record only ([`Damage`]; `journal.rs` keeps such a file aside).

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
/// Resynchronising past damage checksums at most this many times the journal's size (a
/// candidate is checksummed only where its length fits, its sequence number continues the
/// run and its row starts as JSON does, which garbage almost never passes): the work stays
/// linear even on a file crafted to look like records everywhere.
const RESYNC_WORK: usize = 4;

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
    /// Damage before the last valid record (none: a sound journal, or one with a torn tail
    /// only).
    pub(in crate::provenance) damage: Damage,
}

/// Damage found in a journal: bad bytes with a valid record after them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(in crate::provenance) struct Damage {
    /// Records skipped as damaged: each sequence number missing from the run, each second
    /// copy of a record, and each damaged stretch that held no missing number (garbage
    /// between records, or the file's first record, whose number nothing tells).
    pub(in crate::provenance) records: u64,
    /// Sequence numbers missing from the run: rows lost.
    pub(in crate::provenance) lost: u64,
    /// Second copies of a record (the first is kept).
    pub(in crate::provenance) duplicates: u64,
    /// Bytes skipped while resynchronising.
    pub(in crate::provenance) bytes: u64,
}

impl Damage {
    /// Whether any was found.
    pub(in crate::provenance) fn any(&self) -> bool {
        self.records > 0
    }
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
    /// none), locks it, and reads its rows; a torn tail is cut off, unless the journal is
    /// damaged (then nothing is: the file is kept as found).
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
        let torn_bytes = (bytes.len() as u64).saturating_sub(good);
        // A damaged journal is kept whole, as evidence; it is never appended to.
        let len = if contents.damage.any() {
            bytes.len() as u64
        } else {
            if torn_bytes > 0 {
                file.set_len(good).map_err(|e| failed(path, e))?;
            }
            good
        };
        file.seek(SeekFrom::Start(len))
            .map_err(|e| failed(path, e))?;
        let opened = FileId::of(path).ok().flatten();
        let contents = Contents {
            torn_bytes,
            ..contents
        };
        Ok(Some((
            JournalFile {
                path: path.to_owned(),
                file,
                opened,
                id,
                len,
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

    /// Renames a damaged journal aside, `NAME.damaged-MILLIS` (no longer a journal's name:
    /// never adopted again, never deleted), for whoever looks into it; its new path.
    pub(in crate::provenance) fn keep_aside(self) -> Result<PathBuf, LedgerError> {
        let mut name = self.path.file_name().unwrap_or_default().to_owned();
        name.push(format!(
            ".damaged-{}",
            chrono::Utc::now().timestamp_millis()
        ));
        let aside = self.path.with_file_name(name);
        std::fs::rename(&self.path, &aside).map_err(|e| failed(&self.path, e))?;
        sync_folder(&aside);
        Ok(aside)
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

/// A record that reads whole at an offset.
struct Record<'b> {
    seq: u64,
    /// Its length with its head.
    size: usize,
    /// The row's JSON.
    json: &'b [u8],
}

/// The little-endian `u32` at `at`, when `bytes` has it.
fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The little-endian `u64` at `at`, when `bytes` has it.
fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    let mut word = [0; 8];
    word.copy_from_slice(b);
    Some(u64::from_le_bytes(word))
}

/// The record at `at`, if one is there whole: its length within the file and
/// [`MAX_RECORD`], its checksum holding, its sequence number not 0 (numbers start at 1).
fn record_at(bytes: &[u8], at: usize) -> Option<Record<'_>> {
    let len = u32_at(bytes, at)? as usize;
    if len > MAX_RECORD {
        return None;
    }
    let size = RECORD_HEAD + len;
    let body = bytes.get(at + 8..at.checked_add(size)?)?;
    if crc32fast::hash(body) != u32_at(bytes, at + 4)? {
        return None;
    }
    let seq = u64_at(body, 0)?;
    (seq != 0).then(|| Record {
        seq,
        size,
        json: &body[8..],
    })
}

/// Where resynchronising after damage at `from` ended.
enum Resync {
    /// A valid record continuing the run starts here.
    At(usize),
    /// Nothing valid after `from`: a torn tail.
    Nothing,
    /// Too much work checked in vain ([`RESYNC_WORK`]): the rest is taken as damaged.
    GaveUp,
}

/// Scans forward from `from` (where no record reads) for the next record of the run after
/// `last` (0: none read yet). Only a plausible offset is checksummed: its length fits the
/// file, its row starts with `{`, and its sequence number continues the run (above `last`,
/// by at most the records the skipped bytes could have held). `work` is what checksumming
/// may still cost.
fn resync(bytes: &[u8], from: usize, last: u64, work: &mut usize) -> Resync {
    let Some(end) = bytes.len().checked_sub(RECORD_HEAD) else {
        return Resync::Nothing;
    };
    for at in from + 1..=end {
        let Some(len) = u32_at(bytes, at).map(|l| l as usize) else {
            break;
        };
        if len == 0 || len > MAX_RECORD || len > end - at {
            continue;
        }
        if bytes.get(at + RECORD_HEAD) != Some(&b'{') {
            continue;
        }
        let Some(seq) = u64_at(bytes, at + 8) else {
            break;
        };
        // Each record lost in between took at least a head's bytes.
        let room = ((at - from) / RECORD_HEAD) as u64;
        let continues = if last == 0 {
            seq != 0
        } else {
            seq > last && seq - last - 1 <= room
        };
        if !continues {
            continue;
        }
        let Some(left) = work.checked_sub(len + 8) else {
            return Resync::GaveUp;
        };
        *work = left;
        if record_at(bytes, at).is_some() {
            return Resync::At(at);
        }
    }
    Resync::Nothing
}

/// The records in `bytes` (after the header) and where the last valid one ends (after it:
/// a torn tail). A record that does not read (cut short, its checksum failing, its length
/// absurd) with a valid record of the run somewhere after it is damage: reading goes on from
/// that record ([`resync`]) and [`Damage`] says what was skipped. A second copy of a
/// record is skipped.
pub(super) fn read_records(bytes: &[u8]) -> (Contents, usize) {
    let mut contents = Contents::default();
    let damage = &mut contents.damage;
    let (mut at, mut end) = (0, 0);
    // Damaged bytes just before `at`.
    let mut skipped = 0;
    let mut work = bytes.len().saturating_mul(RESYNC_WORK);
    while at < bytes.len() {
        let Some(record) = record_at(bytes, at) else {
            match resync(bytes, at, contents.last_seq, &mut work) {
                Resync::At(next) => {
                    skipped += next - at;
                    at = next;
                    continue;
                }
                Resync::Nothing => break,
                Resync::GaveUp => {
                    damage.records += 1;
                    damage.bytes += (bytes.len() - at) as u64;
                    tracing::error!(
                        offset = at,
                        "a damaged ledger journal looks like records everywhere; the rest of it \
                         is not read"
                    );
                    break;
                }
            }
        };
        let (seq, last) = (record.seq, contents.last_seq);
        at += record.size;
        end = at;
        if last != 0 && seq <= last {
            damage.records += 1;
            damage.duplicates += 1;
            continue;
        }
        let missing = if last == 0 { 0 } else { seq - last - 1 };
        if skipped > 0 || missing > 0 {
            damage.records += missing.max(1);
            damage.lost += missing;
            damage.bytes += skipped as u64;
            skipped = 0;
        }
        contents.last_seq = seq;
        match serde_json::from_slice::<LedgerRow>(record.json) {
            Ok(row) => contents.rows.push((seq, row)),
            Err(e) => {
                contents.unreadable += 1;
                tracing::error!(seq, error = %e, "a journal record could not be read back; skipped");
            }
        }
    }
    (contents, end)
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

    /// Records of `n` rows numbered 1..=n (task `t<seq>`), as `read_records` reads them
    /// (no header), and each record's byte range.
    fn records(n: u64) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
        let (mut bytes, mut ranges) = (Vec::new(), Vec::new());
        for seq in 1..=n {
            let start = bytes.len();
            encode(&mut bytes, seq, &row(&format!("t{seq}"), "s", seq as i64));
            ranges.push(start..bytes.len());
        }
        (bytes, ranges)
    }

    /// The sequence numbers read back, each checked against its row's task id.
    fn seqs(c: &Contents) -> Vec<u64> {
        for (seq, row) in &c.rows {
            assert_eq!(
                row.task_id,
                format!("t{seq}"),
                "record {seq} holds another row"
            );
        }
        c.rows.iter().map(|(s, _)| *s).collect()
    }

    /// 1..=n without `lost`.
    fn all_but(n: u64, lost: &[u64]) -> Vec<u64> {
        (1..=n).filter(|s| !lost.contains(s)).collect()
    }

    fn damage(records: u64, lost: u64, duplicates: u64, bytes: usize) -> Damage {
        Damage {
            records,
            lost,
            duplicates,
            bytes: bytes as u64,
        }
    }

    const N: u64 = 20;

    /// Every bit of a middle record's length, checksum and sequence number, and a bit of
    /// every byte of its row: that record alone is lost, counted as damage, and every record
    /// after it is read (the old reader stopped there: 10 of 20 rows lost, called a torn
    /// tail).
    #[test]
    fn a_bit_flipped_anywhere_in_a_middle_record_loses_that_record_only() {
        let (bytes, at) = records(N);
        let r = at[10].clone();
        let want = all_but(N, &[11]);
        for i in r.clone() {
            let bits = if i - r.start < RECORD_HEAD {
                0..8
            } else {
                i % 8..i % 8 + 1
            };
            for bit in bits {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                let (c, end) = read_records(&b);
                let field = match i - r.start {
                    0..4 => "length",
                    4..8 => "checksum",
                    8..16 => "sequence number",
                    _ => "row",
                };
                let what = format!("{field}, byte {} bit {bit}", i - r.start);
                assert_eq!(seqs(&c), want, "{what}");
                assert_eq!(c.damage, damage(1, 1, 0, r.len()), "{what}");
                assert_eq!(end, b.len(), "{what}: nothing torn");
            }
        }
    }

    /// A length field set to what a damaged disk may hold: none loses more than its record
    /// (one pointing at the record after next still finds the next one).
    #[test]
    fn a_damaged_length_loses_its_record_only() {
        let (bytes, at) = records(N);
        let r = at[10].clone();
        let len = (r.len() - RECORD_HEAD) as u32;
        let to_next_but_one = (at[12].start - r.start - RECORD_HEAD) as u32;
        for bad in [
            0,
            1,
            len - 1,
            len + 1,
            to_next_but_one,
            MAX_RECORD as u32,
            MAX_RECORD as u32 + 1,
            u32::MAX,
        ] {
            let mut b = bytes.clone();
            b[r.start..r.start + 4].copy_from_slice(&bad.to_le_bytes());
            let (c, end) = read_records(&b);
            assert_eq!(seqs(&c), all_but(N, &[11]), "length {bad}");
            assert_eq!(c.damage, damage(1, 1, 0, r.len()), "length {bad}");
            assert_eq!(end, b.len());
        }
    }

    /// A crash tears only the end: every cut of the last record reads as the records before
    /// it, with no damage; a cut at a record's end reads as the records up to it.
    #[test]
    fn truncations_are_a_torn_tail_not_damage() {
        let (bytes, at) = records(N);
        let last = at[N as usize - 1].clone();
        for cut in last.start + 1..last.end {
            let (c, end) = read_records(&bytes[..cut]);
            assert_eq!(seqs(&c), all_but(N, &[N]), "cut at {cut}");
            assert_eq!(
                (c.damage, end),
                (Damage::default(), last.start),
                "cut at {cut}"
            );
        }
        for (i, r) in at.iter().enumerate() {
            let (c, end) = read_records(&bytes[..r.end]);
            assert_eq!(seqs(&c), (1..=i as u64 + 1).collect::<Vec<_>>());
            assert_eq!((c.damage, end), (Damage::default(), r.end));
        }
    }

    /// A zeroed block (a lost page) across records: exactly the records it touches are lost.
    /// At the very start the first number lost is unknown, so the stretch counts as one; at
    /// the very end it reads as a torn tail (nothing valid after it).
    #[test]
    fn a_zeroed_block_loses_exactly_the_records_it_touches() {
        let (bytes, at) = records(N);
        let cases = [
            // (from, length)
            (at[5].start + 7, 2000),
            (at[3].end - 1, 2),
            (at[8].start, at[9].end - at[8].start),
            (at[0].start, at[2].end + 5),
        ];
        for (from, len) in cases {
            let zeroed = from..from + len;
            let mut b = bytes.clone();
            b[zeroed.clone()].fill(0);
            let touched: Vec<u64> = (1..=N)
                .filter(|s| {
                    let r = &at[*s as usize - 1];
                    r.start < zeroed.end && zeroed.start < r.end
                })
                .collect();
            let (c, end) = read_records(&b);
            assert_eq!(seqs(&c), all_but(N, &touched), "zeroed {zeroed:?}");
            let first = &at[touched[0] as usize - 1];
            let after = &at[*touched.last().unwrap() as usize];
            let skipped = after.start - first.start;
            let expected = if touched[0] == 1 {
                damage(1, 0, 0, skipped)
            } else {
                let n = touched.len() as u64;
                damage(n, n, 0, skipped)
            };
            assert_eq!(c.damage, expected, "zeroed {zeroed:?}");
            assert_eq!(end, b.len());
        }
        let tail = at[N as usize - 2].start + 3;
        let mut b = bytes.clone();
        b[tail..].fill(0);
        let (c, end) = read_records(&b);
        assert_eq!(seqs(&c), all_but(N, &[N - 1, N]));
        assert_eq!(
            (c.damage, end),
            (Damage::default(), at[N as usize - 2].start)
        );
    }

    /// A record written twice (next to itself, or further on) is read once.
    #[test]
    fn a_duplicated_record_is_kept_once() {
        let (bytes, at) = records(N);
        for after in [10, 13, N as usize - 1] {
            let mut b = bytes[..at[after].end].to_vec();
            b.extend_from_slice(&bytes[at[10].clone()]);
            b.extend_from_slice(&bytes[at[after].end..]);
            let (c, end) = read_records(&b);
            assert_eq!(seqs(&c), all_but(N, &[]), "copy after record {}", after + 1);
            assert_eq!(c.damage, damage(1, 0, 1, 0));
            assert_eq!(end, b.len());
        }
    }

    /// Several damaged records, apart or side by side, a damaged record and then a torn
    /// tail, and the first record damaged.
    #[test]
    fn several_damaged_records_and_a_torn_tail_after_damage() {
        let (bytes, at) = records(N);
        let flip = |b: &mut Vec<u8>, seq: usize| b[at[seq - 1].start + 30] ^= 0x04;
        let len = |seqs: &[usize]| seqs.iter().map(|s| at[s - 1].len()).sum::<usize>();
        let mut b = bytes.clone();
        flip(&mut b, 11);
        flip(&mut b, 13);
        let (c, _) = read_records(&b);
        assert_eq!(seqs(&c), all_but(N, &[11, 13]));
        assert_eq!(c.damage, damage(2, 2, 0, len(&[11, 13])));

        let mut b = bytes.clone();
        flip(&mut b, 11);
        flip(&mut b, 12);
        let (c, _) = read_records(&b);
        assert_eq!(seqs(&c), all_but(N, &[11, 12]));
        assert_eq!(c.damage, damage(2, 2, 0, len(&[11, 12])));

        let mut b = bytes[..at[N as usize - 1].start + 9].to_vec();
        flip(&mut b, 5);
        let (c, end) = read_records(&b);
        assert_eq!(seqs(&c), all_but(N, &[5, N]));
        assert_eq!(c.damage, damage(1, 1, 0, len(&[5])));
        assert_eq!(end, at[N as usize - 1].start, "the torn tail is still cut");

        let mut b = bytes.clone();
        flip(&mut b, 1);
        let (c, _) = read_records(&b);
        assert_eq!(seqs(&c), all_but(N, &[1]));
        assert_eq!(c.damage, damage(1, 0, 0, len(&[1])));
    }

    /// Garbage reads as nothing, and a file made to look like a record at every 32nd byte
    /// (each length reaching the end: checksumming them all would take the square of its
    /// size) is given up on after a bounded amount of work.
    #[test]
    fn garbage_is_read_in_bounded_work() {
        let mut rng = fastrand::Rng::with_seed(37);
        let garbage: Vec<u8> = (0..1 << 20).map(|_| rng.u8(..)).collect();
        let (c, end) = read_records(&garbage);
        assert!(c.rows.is_empty());
        assert_eq!((c.damage, end), (Damage::default(), 0));

        let size = 4 << 20;
        let mut crafted = vec![b' '; size];
        for at in (0..size - RECORD_HEAD - 1).step_by(32) {
            let len = (size - at - RECORD_HEAD) as u32;
            crafted[at..at + 4].copy_from_slice(&len.to_le_bytes());
            crafted[at + 4..at + 8].copy_from_slice(&[0; 4]);
            crafted[at + 8..at + 16].copy_from_slice(&1u64.to_le_bytes());
            crafted[at + RECORD_HEAD] = b'{';
        }
        let (c, end) = read_records(&crafted);
        assert!(c.rows.is_empty());
        assert_eq!(
            (c.damage.records, end),
            (1, 0),
            "given up on, kept as damaged"
        );
    }

    /// A damaged journal opened is kept whole (nothing cut: it is evidence); a torn one
    /// has its tail cut.
    #[test]
    fn a_damaged_journal_is_not_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.journal");
        let (mut j, _) = JournalFile::open(&path).unwrap();
        let written = rows(5);
        j.append(written.iter(), 1, false).unwrap();
        drop(j);
        let mut bytes = std::fs::read(&path).unwrap();
        let whole = bytes.len();
        bytes[HEADER as usize + 40] ^= 0x01;
        bytes.truncate(whole - 3);
        std::fs::write(&path, &bytes).unwrap();
        let (_, c) = JournalFile::open(&path).unwrap();
        assert_eq!(
            c.rows.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            [2, 3, 4]
        );
        assert!(c.damage.any() && c.torn_bytes > 0);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes.len() as u64);
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
