//! One output stream of a command: an in-memory tail plus a spill file, fed by a pump that reads
//! the pipe through one fixed buffer, and read either whole (foreground) or incrementally.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::output::spill::{Spill, SpillTarget};
use crate::output::tail::Tail;
use crate::{StreamDelta, StreamOutput};

/// Size of the pump's read buffer, allocated once per stream and reused for every read.
const READ_BUF: usize = 32 * 1024;

/// A stream's kept output. Shared between its pump and its readers.
#[derive(Debug)]
pub(crate) struct Output {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    tail: Tail,
    spill: Spill,
    /// No more bytes will come.
    closed: bool,
}

impl Output {
    pub(crate) fn new(max_bytes: u64, spill: SpillTarget) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                tail: Tail::new(usize::try_from(max_bytes).unwrap_or(usize::MAX)),
                spill: Spill::new(spill),
                closed: false,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere must not make output unreadable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends bytes. The first overflow starts the spill file with the complete stream so far,
    /// which is still all in memory at that moment. The spill write happens under the lock so
    /// that a reader never sees a spill path whose file lags behind the tail; writes go to the
    /// page cache and readers only take this lock briefly.
    pub(crate) fn write(&self, data: &[u8]) {
        let mut inner = self.lock();
        let Inner { tail, spill, .. } = &mut *inner;
        if !spill.started() && tail.total() + data.len() as u64 > tail.cap() as u64 {
            spill.begin();
            let (a, b) = tail.slices_from(0);
            spill.write(a);
            spill.write(b);
        }
        spill.write(data);
        tail.push(data);
    }

    /// Bytes written so far, kept or not.
    pub(crate) fn total(&self) -> u64 {
        self.lock().tail.total()
    }

    /// The stream ended: close the spill file and trim memory to what is kept.
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        inner.spill.close();
        inner.tail.shrink();
    }

    /// Deletes the stream's spill file (returning its bytes to the spill budget) and keeps the
    /// stream memory-only from now on, even if more bytes come. For a task evicted from the
    /// finished list, whose output nobody can read any more.
    pub(crate) fn discard_spill(&self) {
        self.lock().spill.discard();
    }

    /// Everything kept, for a finished foreground command.
    pub(crate) fn snapshot(&self) -> StreamOutput {
        let inner = self.lock();
        let mut bytes = Vec::new();
        inner.tail.copy_from(0, &mut bytes);
        StreamOutput {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            truncated: inner.tail.truncated(),
            spill_path: inner.spill.complete_path(),
            spill_evicted: inner.spill.evicted(),
        }
    }

    /// Everything kept so far of a stream that may still be open, and the whole-stream offset it
    /// ends at, taken together so that a reader starting there gets exactly what came after.
    /// For a foreground command handed over to the task table: the call returns the snapshot,
    /// the task's reads start at the offset. As with [`read_since`](Self::read_since), an
    /// incomplete UTF-8 sequence at the end of an open stream is left for the next read.
    pub(crate) fn snapshot_so_far(&self) -> (StreamOutput, u64) {
        let (all, next) = self.read_since(0);
        let snapshot = StreamOutput {
            text: all.text,
            // Lossy from offset 0 is exactly "the window no longer starts at the beginning".
            truncated: all.lossy,
            spill_path: all.spill_path,
            spill_evicted: all.spill_evicted,
        };
        (snapshot, next)
    }

    /// Output since whole-stream offset `from`, and the offset to read from next time.
    ///
    /// When `from` fell out of the window the whole window is returned, flagged lossy. While the
    /// stream is open, an incomplete UTF-8 sequence at the end is left for the next read rather
    /// than shown as replacement characters.
    pub(crate) fn read_since(&self, from: u64) -> (StreamDelta, u64) {
        let inner = self.lock();
        let tail = &inner.tail;
        let lossy = from < tail.start();
        let mut end = tail.total();
        if !inner.closed {
            end -= incomplete_utf8_suffix(&tail.last_bytes(3)) as u64;
        }
        let begin = from.clamp(tail.start(), end.max(tail.start()));
        let mut bytes = Vec::new();
        tail.copy_from(begin, &mut bytes);
        bytes.truncate((end.saturating_sub(begin)) as usize);
        let delta = StreamDelta {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            lossy,
            spill_path: inner.spill.complete_path(),
            spill_evicted: inner.spill.evicted(),
        };
        (delta, begin.max(end))
    }
}

/// How many bytes at the end of `bytes` form the start of a UTF-8 sequence still missing its
/// continuation bytes (0 when the end is complete or plainly invalid).
pub(crate) fn incomplete_utf8_suffix(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 == 0x80 {
            continue; // continuation byte: look further back for the lead
        }
        let needed = match b {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        return if back < needed { back } else { 0 };
    }
    0
}

/// Copies a pipe into `out` until EOF (or a read error, which ends the stream the same way).
pub(crate) async fn pump(mut pipe: impl AsyncRead + Unpin, out: Arc<Output>) {
    let mut buf = vec![0u8; READ_BUF];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => out.write(&buf[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    out.close();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(cap: u64, dir: &std::path::Path) -> Arc<Output> {
        let spill = crate::output::spill::SpillDir::new(Some(dir.to_path_buf()));
        Output::new(cap, crate::output::spill::targets(&spill, 1 << 20).0)
    }

    #[test]
    fn incomplete_sequences_are_detected() {
        assert_eq!(incomplete_utf8_suffix(b"abc"), 0);
        assert_eq!(incomplete_utf8_suffix(b"a\xc3"), 1);
        assert_eq!(incomplete_utf8_suffix("é".as_bytes()), 0);
        assert_eq!(incomplete_utf8_suffix(b"\xe2\x82"), 2);
        assert_eq!(incomplete_utf8_suffix(b"\xf0\x9f\x98"), 3);
        assert_eq!(incomplete_utf8_suffix(b"a\xff"), 0);
    }

    #[test]
    fn incremental_reads_hold_back_a_split_character_until_closed() {
        let dir = tempfile::tempdir().unwrap();
        let out = output(100, dir.path());
        out.write(b"caf\xc3");
        let (delta, next) = out.read_since(0);
        assert_eq!((delta.text.as_str(), delta.lossy, next), ("caf", false, 3));
        out.write(b"\xa9!");
        let (delta, next) = out.read_since(next);
        assert_eq!((delta.text.as_str(), next), ("é!", 6));
        out.write(b"\xc3");
        out.close();
        let (delta, next) = out.read_since(next);
        assert_eq!((delta.text.as_str(), next), ("\u{FFFD}", 7));
    }

    #[test]
    fn a_snapshot_so_far_and_the_reads_after_it_split_the_stream_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let out = output(8, dir.path());
        out.write(b"ab\xc3");
        let (snapshot, at) = out.snapshot_so_far();
        assert_eq!(
            (snapshot.text.as_str(), snapshot.truncated, at),
            ("ab", false, 2)
        );
        assert_eq!(snapshot.spill_path, None);
        out.write(b"\xa9cd");
        let (delta, next) = out.read_since(at);
        assert_eq!((delta.text.as_str(), delta.lossy, next), ("écd", false, 6));
        out.write(b"efghi");
        let (snapshot, at) = out.snapshot_so_far();
        assert_eq!(
            (snapshot.text.as_str(), snapshot.truncated, at),
            ("\u{FFFD}cdefghi", true, 11)
        );
        let path = snapshot
            .spill_path
            .expect("the open spill file holds everything so far");
        assert_eq!(std::fs::read(path).unwrap(), b"ab\xc3\xa9cdefghi");
    }

    #[test]
    fn overflow_spills_the_whole_stream_and_reads_become_lossy() {
        let dir = tempfile::tempdir().unwrap();
        let out = output(4, dir.path());
        out.write(b"abc");
        assert_eq!(out.read_since(0).0.spill_path, None);
        out.write(b"defg");
        let (delta, next) = out.read_since(0);
        assert_eq!((delta.text.as_str(), delta.lossy, next), ("defg", true, 7));
        out.close();
        let path = out.snapshot().spill_path.unwrap();
        assert_eq!(std::fs::read(path).unwrap(), b"abcdefg");
        assert!(out.snapshot().truncated);
    }
}
