//! A byte ring that keeps the last `cap` bytes of a stream, byte-exact, addressed by whole-stream
//! offsets so that readers can ask for "everything since offset N".

/// The last `cap` bytes of a stream.
///
/// Storage grows with the data up to `cap` and never beyond, so a quiet stream costs little and a
/// loud one costs exactly `cap`. Once full, new bytes overwrite the oldest in place.
#[derive(Debug)]
pub(crate) struct Tail {
    buf: Vec<u8>,
    cap: usize,
    /// Index of the oldest kept byte once the ring is full; 0 while growing.
    head: usize,
    /// Bytes ever pushed: the whole-stream offset of the end.
    total: u64,
}

impl Tail {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            head: 0,
            total: 0,
        }
    }

    /// Bytes kept at most.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Bytes ever pushed.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Whole-stream offset of the oldest kept byte.
    pub(crate) fn start(&self) -> u64 {
        self.total - self.buf.len() as u64
    }

    /// Whether bytes were dropped from memory.
    pub(crate) fn truncated(&self) -> bool {
        self.start() > 0
    }

    pub(crate) fn push(&mut self, mut data: &[u8]) {
        if self.cap == 0 || data.is_empty() {
            self.total += data.len() as u64;
            return;
        }
        self.total += data.len() as u64;
        if data.len() >= self.cap {
            // Only the last `cap` bytes can survive: store them linearly.
            data = &data[data.len() - self.cap..];
            if self.buf.len() < self.cap {
                self.buf.reserve_exact(self.cap - self.buf.len());
                self.buf.resize(self.cap, 0);
            }
            self.buf.copy_from_slice(data);
            self.head = 0;
            return;
        }
        if self.buf.len() < self.cap {
            let take = data.len().min(self.cap - self.buf.len());
            self.grow_for(take);
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        while !data.is_empty() {
            let n = data.len().min(self.cap - self.head);
            self.buf[self.head..self.head + n].copy_from_slice(&data[..n]);
            self.head = (self.head + n) % self.cap;
            data = &data[n..];
        }
    }

    /// Reserves room for `extra` more bytes, doubling but never past `cap`.
    fn grow_for(&mut self, extra: usize) {
        let needed = self.buf.len() + extra;
        if self.buf.capacity() < needed {
            let target = needed.max(self.buf.capacity() * 2).min(self.cap);
            self.buf.reserve_exact(target - self.buf.len());
        }
    }

    /// The kept bytes from whole-stream offset `from` (clamped into the window) to the end, as at
    /// most two slices in order.
    pub(crate) fn slices_from(&self, from: u64) -> (&[u8], &[u8]) {
        let skip = (from.clamp(self.start(), self.total) - self.start()) as usize;
        let (older, newer) = (&self.buf[self.head..], &self.buf[..self.head]);
        if skip < older.len() {
            (&older[skip..], newer)
        } else {
            (&newer[skip - older.len()..], &[])
        }
    }

    /// Appends the kept bytes from `from` to `out`.
    pub(crate) fn copy_from(&self, from: u64, out: &mut Vec<u8>) {
        let (a, b) = self.slices_from(from);
        out.reserve_exact(a.len() + b.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b);
    }

    /// The last `n` kept bytes (fewer if fewer are kept), for looking at how the stream ends.
    pub(crate) fn last_bytes(&self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        self.copy_from(self.total.saturating_sub(n as u64), &mut out);
        out
    }

    /// Releases storage the stream no longer needs: finished streams are retained for reads, so
    /// they should hold only what they keep.
    pub(crate) fn shrink(&mut self) {
        self.buf.rotate_left(self.head);
        self.head = 0;
        self.buf.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(t: &Tail) -> Vec<u8> {
        let mut v = Vec::new();
        t.copy_from(0, &mut v);
        v
    }

    #[test]
    fn keeps_last_bytes_across_wraps() {
        let mut all = Vec::new();
        let mut t = Tail::new(10);
        for (i, len) in [3usize, 4, 5, 1, 9, 10, 2, 23, 7].into_iter().enumerate() {
            let chunk: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
            all.extend_from_slice(&chunk);
            t.push(&chunk);
            let want = &all[all.len().saturating_sub(10)..];
            assert_eq!(kept(&t), want);
            assert_eq!(t.total(), all.len() as u64);
            assert_eq!(t.truncated(), all.len() > 10);
            assert!(t.buf.capacity() <= 10);
        }
    }

    #[test]
    fn exact_cap_is_not_truncated() {
        let mut t = Tail::new(4);
        t.push(b"ab");
        t.push(b"cd");
        assert!(!t.truncated());
        assert_eq!(kept(&t), b"abcd");
        t.push(b"e");
        assert!(t.truncated());
        assert_eq!(kept(&t), b"bcde");
    }

    #[test]
    fn reads_from_offsets() {
        let mut t = Tail::new(5);
        t.push(b"0123456");
        assert_eq!(t.start(), 2);
        let mut v = Vec::new();
        t.copy_from(4, &mut v);
        assert_eq!(v, b"456");
        v.clear();
        t.copy_from(0, &mut v);
        assert_eq!(v, b"23456");
        assert_eq!(t.last_bytes(2), b"56");
        t.push(b"78");
        v.clear();
        t.copy_from(6, &mut v);
        assert_eq!(v, b"678");
        t.shrink();
        assert_eq!(kept(&t), b"45678");
    }
}
