//! Server-Sent Events read from bytes as they arrive: lines are found in the bytes and an
//! event's `data` is decoded to text only once the event is whole, so a multi-byte character
//! that a network read splits arrives whole. Bounded twice: the event under way (its data and
//! the line under way) may not grow past the answer cap, and every byte read counts against
//! the stream's cap ([`super::STREAM_BYTES_PER_ANSWER_BYTE`] times the answer cap) — data,
//! comments, blank lines, fields and events it skips alike — so a stream of what the decoder
//! throws away (`: x` comment lines without end) stops there like any other answer.
//!
//! (Hand-written rather than `eventsource-stream`: that crate buffers an event without bound.)

use std::collections::VecDeque;

/// The stream, or the event under way, passed its cap: which, as the failure's reason says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Oversize {
    /// Every byte read together passed the stream's cap.
    Stream(usize),
    /// The event under way passed the answer cap.
    Event(usize),
}

impl std::fmt::Display for Oversize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Oversize::Stream(cap) => write!(f, "a stream larger than {cap} bytes"),
            Oversize::Event(cap) => write!(f, "an event larger than {cap} bytes"),
        }
    }
}

/// Splits a byte stream into SSE events (lines end in `\n` or `\r\n`; a blank line ends an
/// event), keeping each event's `data` lines joined by `\n`. Other fields and comments are
/// skipped; an event without data is none.
#[derive(Debug)]
pub(super) struct SseDecoder {
    /// The bytes of the line under way (no `\n` seen yet).
    line: Vec<u8>,
    /// The data of the event under way.
    data: Vec<u8>,
    /// Whether the event under way has a `data` line (an empty one counts).
    has_data: bool,
    /// Bytes fed so far, every one of them.
    read: usize,
    /// Most bytes of `line` and `data` together: the answer cap.
    event_cap: usize,
    /// Most bytes fed.
    stream_cap: usize,
    /// The cap passed, once one was (the stream failed for its size).
    oversize: Option<Oversize>,
}

impl SseDecoder {
    /// A decoder whose event under way may hold at most `cap` bytes (the answer cap), and
    /// which reads at most [`super::STREAM_BYTES_PER_ANSWER_BYTE`] times that.
    pub(super) fn new(cap: usize) -> SseDecoder {
        SseDecoder {
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            read: 0,
            event_cap: cap,
            stream_cap: cap.saturating_mul(super::STREAM_BYTES_PER_ANSWER_BYTE),
            oversize: None,
        }
    }

    /// The cap the stream passed, if it failed for its size.
    pub(super) fn past_cap(&self) -> Option<Oversize> {
        self.oversize
    }

    /// Reads `chunk`, appending the data of each event it completes to `out`; past the
    /// stream's cap (counting `chunk` whole, whatever it holds), nothing of it is read.
    pub(super) fn feed(
        &mut self,
        chunk: &[u8],
        out: &mut VecDeque<String>,
    ) -> Result<(), Oversize> {
        self.read = self.read.saturating_add(chunk.len());
        if let Some(o) = self.oversize {
            return Err(o);
        }
        if self.read > self.stream_cap {
            return Err(*self.oversize.insert(Oversize::Stream(self.stream_cap)));
        }
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = rest.split_at(end);
            rest = &tail[1..];
            if self.line.is_empty() {
                self.line_done(head, out);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                self.line_done(&line, out);
                line.clear();
                // Keep the allocation for the next partial line.
                self.line = line;
            }
            self.check()?;
        }
        self.line.extend_from_slice(rest);
        self.check()
    }

    fn check(&mut self) -> Result<(), Oversize> {
        if self.line.len() + self.data.len() > self.event_cap {
            return Err(*self.oversize.insert(Oversize::Event(self.event_cap)));
        }
        Ok(())
    }

    /// One whole line (without its `\n`).
    fn line_done(&mut self, line: &[u8], out: &mut VecDeque<String>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if std::mem::take(&mut self.has_data) {
                let data = std::mem::take(&mut self.data);
                // Whole: only bytes that are not UTF-8 at all are replaced.
                out.push_back(
                    String::from_utf8(data)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                );
            }
            return;
        }
        if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(pieces: &[&[u8]], cap: usize) -> Result<Vec<String>, Oversize> {
        let mut d = SseDecoder::new(cap);
        let mut out = VecDeque::new();
        for p in pieces {
            d.feed(p, &mut out)?;
        }
        Ok(out.into())
    }

    #[test]
    fn a_character_split_across_reads_arrives_whole_at_every_split_point() {
        let text = "data: {\"c\":\"héllo wörld ✓ 你好 🎉\"}\r\n\r\ndata: a\ndata: b\n\n: comment\nevent: x\n\n";
        let bytes = text.as_bytes();
        let want = vec![
            "{\"c\":\"héllo wörld ✓ 你好 🎉\"}".to_owned(),
            "a\nb".to_owned(),
        ];
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let got = events(&[&bytes[..i], &bytes[i..j], &bytes[j..]], 1024).unwrap();
                assert_eq!(got, want, "split at {i} and {j}");
            }
        }
        // One byte at a time.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(events(&singles, 1024).unwrap(), want);
    }

    #[test]
    fn a_stream_is_bounded_and_bytes_that_are_no_utf8_are_replaced() {
        assert_eq!(events(&[b"data: 1\n"], 8).unwrap(), Vec::<String>::new());
        assert_eq!(events(&[b"data: 123456789\n"], 8), Err(Oversize::Event(8)));
        assert_eq!(events(&[b"data: 12", b"3"], 8), Err(Oversize::Event(8)));
        // Every byte counts against the stream's cap: events handed out, and what is skipped.
        let many = "data: 1234\n\n".repeat(100);
        let stream = |n: usize| n.div_ceil(super::super::STREAM_BYTES_PER_ANSWER_BYTE);
        assert_eq!(
            events(&[many.as_bytes()], stream(many.len()))
                .unwrap()
                .len(),
            100
        );
        let cap = stream(many.len()) - 1;
        assert_eq!(
            events(&[many.as_bytes()], cap),
            Err(Oversize::Stream(
                cap * super::super::STREAM_BYTES_PER_ANSWER_BYTE
            ))
        );
        for skipped in [
            ": x\n",
            "\n",
            "\r\n",
            "event: e\n",
            "id: 1\n",
            "retry: 9\n",
            "foo\n",
        ] {
            let mut d = SseDecoder::new(1024);
            let most = 1024 * super::super::STREAM_BYTES_PER_ANSWER_BYTE;
            let mut out = VecDeque::new();
            let mut fed = 0;
            while d.feed(skipped.as_bytes(), &mut out).is_ok() {
                fed += skipped.len();
                assert!(fed <= most, "{skipped:?}");
            }
            assert!(out.is_empty() && d.past_cap().is_some(), "{skipped:?}");
            assert!(fed > most - skipped.len(), "{skipped:?}: stopped at {fed}");
        }
        assert_eq!(events(&[b"data: a\xffb\n\n"], 64).unwrap(), ["a\u{fffd}b"]);
        // No data, no event; an empty data line is an empty event.
        assert_eq!(events(&[b"id: 1\n\ndata:\n\n"], 64).unwrap(), [""]);
    }
}
