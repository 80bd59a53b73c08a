//! The host's record of what the sandbox denied one command, as its spawn helper reports it:
//! distinct denials in the order they happened, read from a cursor (a foreground result takes
//! all, a background task's reads take what came since the previous one).

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

use crate::{Denial, Denials};

/// Distinct denials kept per command; more are only counted.
const KEPT: usize = 256;

/// Denials beyond [`KEPT`] told apart (by a hash) so that a repeat is not counted again; past
/// this many, each is counted.
const TOLD_APART: usize = 4096;

/// One command's denials.
#[derive(Debug, Default)]
pub(crate) struct DenialLog {
    inner: Mutex<Logged>,
}

#[derive(Debug, Default)]
struct Logged {
    seen: Vec<Denial>,
    /// Distinct denials beyond [`KEPT`], only counted.
    beyond: u32,
    /// The hashes of those counted, up to [`TOLD_APART`].
    counted: HashSet<u64>,
    hasher: RandomState,
}

/// How far a reader has read a [`DenialLog`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    seen: usize,
    beyond: u32,
}

impl DenialLog {
    /// Records `denial` unless it was recorded already.
    pub(crate) fn add(&self, denial: Denial) {
        let mut logged = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if logged.seen.contains(&denial) {
            return;
        }
        if logged.seen.len() < KEPT {
            logged.seen.push(denial);
            return;
        }
        let hash = logged.hasher.hash_one(&denial);
        if logged.counted.contains(&hash) {
            return;
        }
        if logged.counted.len() < TOLD_APART {
            logged.counted.insert(hash);
        }
        logged.beyond = logged.beyond.saturating_add(1);
    }

    /// The denials after `cursor`, and the cursor after them.
    pub(crate) fn since(&self, cursor: Cursor) -> (Denials, Cursor) {
        let logged = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut denials = Denials::default();
        for denial in logged.seen.iter().skip(cursor.seen) {
            denials.add(denial.clone());
        }
        denials.more = denials
            .more
            .saturating_add(logged.beyond.saturating_sub(cursor.beyond));
        let next = Cursor {
            seen: logged.seen.len(),
            beyond: logged.beyond,
        };
        (denials, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DenialReason, DeniedAccess};

    fn write(path: &str) -> Denial {
        Denial {
            access: DeniedAccess::Write,
            target: path.to_string(),
            reason: DenialReason::OutsideWritableRoots,
        }
    }

    #[test]
    fn distinct_denials_in_order_from_a_cursor() {
        let log = DenialLog::default();
        let (none, cursor) = log.since(Cursor::default());
        assert!(none.is_empty());
        assert_eq!(cursor, Cursor::default());
        log.add(write("/a"));
        log.add(write("/a"));
        log.add(write("/b"));
        let (first, cursor) = log.since(cursor);
        assert_eq!(first.first, vec![write("/a"), write("/b")]);
        assert_eq!(first.more, 0);
        for name in ["/c", "/d", "/e", "/f"] {
            log.add(write(name));
        }
        // A repeat of an earlier one is not new.
        log.add(write("/a"));
        let (then, cursor) = log.since(cursor);
        assert_eq!(then.first, vec![write("/c"), write("/d"), write("/e")]);
        assert_eq!(then.more, 1);
        assert!(log.since(cursor).0.is_empty());
        // From the start: all of them.
        let (all, _) = log.since(Cursor::default());
        assert_eq!(all.first.len(), 3);
        assert_eq!(all.more, 3);
    }

    #[test]
    fn beyond_the_kept_ones_only_counted_once() {
        let log = DenialLog::default();
        for n in 0..KEPT + 5 {
            log.add(write(&format!("/{n}")));
        }
        let (all, cursor) = log.since(Cursor::default());
        assert_eq!(all.more as usize, KEPT + 5 - 3);
        assert!(log.since(cursor).0.is_empty());
        assert_eq!(log.since(cursor).0.more, 0);
        // Repeats of those beyond, retried, are not counted again.
        for _ in 0..3 {
            for n in KEPT..KEPT + 5 {
                log.add(write(&format!("/{n}")));
            }
        }
        assert!(log.since(cursor).0.is_empty());
        log.add(write("/new"));
        assert_eq!(log.since(cursor).0.more, 1);
    }
}
