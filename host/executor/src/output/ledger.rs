//! The bytes spill files may hold, per session and per executor, and which files go when a
//! budget is full.
//!
//! Every spill file is an [`Entry`] from its creation until it is deleted, counted against its
//! session (owner token) and against the executor's total. A write that would go beyond either
//! budget first makes room by deleting *finished* files, oldest first:
//! - past the session's budget, that session's own oldest;
//! - past the executor's total, the oldest of the session holding most bytes,
//!
//! so a session flooding the disk loses its own old files while a quiet session keeps its own,
//! and new output keeps a full file while old files go. A file still being written is never
//! deleted here: when only such files are left, the write gets what fits and its file is capped
//! (as a file at its own cap is). A deleted file that held a complete stream is marked
//! [evicted](Entry::evicted), so that a later read can say so instead of just "(unavailable)".
//!
//! Deletion happens under the ledger's lock, so a file is deleted once and its bytes are given
//! back once, whether its task's eviction, a failed write or this budget gets there first.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::fs::AtFlags;
use rustix::io::Errno;

/// Where a file stands, for the budget.
const WRITING: u8 = 0;
/// Finished holding its complete stream: may go, and is then marked evicted.
const COMPLETE: u8 = 1;
/// Finished without its complete stream (capped): may go, silently, as nobody is shown it.
const PARTIAL: u8 = 2;
/// Deleted (or could not be, and is given up on).
const GONE: u8 = 3;

/// One spill file on the books.
#[derive(Debug)]
pub(crate) struct Entry {
    owner: Option<String>,
    /// The directory it was created in, and its name there: deleted relative to it.
    dir: Arc<OwnedFd>,
    name: String,
    /// Bytes counted for it. Changed only under the ledger's lock.
    bytes: AtomicU64,
    phase: AtomicU8,
    evicted: AtomicBool,
}

impl Entry {
    /// Deleted to make room while it held a complete stream.
    pub(crate) fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    /// No longer on disk (or given up on): its path must not be shown.
    pub(crate) fn gone(&self) -> bool {
        self.phase.load(Ordering::Acquire) == GONE
    }
}

/// The spill budgets of one executor.
#[derive(Debug)]
pub(crate) struct Ledger {
    total: u64,
    per_session: u64,
    books: Mutex<Books>,
}

#[derive(Debug, Default)]
struct Books {
    used: u64,
    /// Sessions with files on the books (or bytes that could not be deleted).
    sessions: HashMap<Option<String>, Account>,
}

#[derive(Debug, Default)]
struct Account {
    used: u64,
    /// Its files, oldest first.
    files: VecDeque<Arc<Entry>>,
}

impl Ledger {
    /// `total` bytes for every file of the executor, `per_session` for those of one session.
    pub(crate) fn new(total: u64, per_session: u64) -> Self {
        Self {
            total,
            per_session,
            books: Mutex::new(Books::default()),
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    fn lock(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes counted in all.
    #[cfg(test)]
    pub(crate) fn used(&self) -> u64 {
        self.lock().used
    }

    /// Whether a new file of `owner`'s session could get a byte, after making room.
    pub(crate) fn has_room(&self, owner: Option<&str>) -> bool {
        let mut books = self.lock();
        let key = owner.map(str::to_string);
        self.make_room(&mut books, &key, 1);
        self.room(&books, &key) > 0
    }

    /// Puts a freshly created file on the books, as being written.
    pub(crate) fn open(&self, owner: Option<&str>, dir: Arc<OwnedFd>, name: &str) -> Arc<Entry> {
        let entry = Arc::new(Entry {
            owner: owner.map(str::to_string),
            dir,
            name: name.to_string(),
            bytes: AtomicU64::new(0),
            phase: AtomicU8::new(WRITING),
            evicted: AtomicBool::new(false),
        });
        let mut books = self.lock();
        books
            .sessions
            .entry(entry.owner.clone())
            .or_default()
            .files
            .push_back(entry.clone());
        entry
    }

    /// Grants up to `want` more bytes to `entry`'s file, making room first; returns how many
    /// (fewer once nothing more can go).
    pub(crate) fn reserve(&self, entry: &Entry, want: u64) -> u64 {
        let mut books = self.lock();
        if entry.phase.load(Ordering::Acquire) == GONE {
            return 0;
        }
        self.make_room(&mut books, &entry.owner, want);
        let granted = want.min(self.room(&books, &entry.owner));
        books.used += granted;
        books.sessions.entry(entry.owner.clone()).or_default().used += granted;
        entry.bytes.fetch_add(granted, Ordering::AcqRel);
        granted
    }

    /// The file will not grow any more; `complete` when it holds its whole stream. From now on
    /// it may be deleted to make room.
    pub(crate) fn finish(&self, entry: &Entry, complete: bool) {
        let _books = self.lock();
        let phase = if complete { COMPLETE } else { PARTIAL };
        let _ = entry
            .phase
            .compare_exchange(WRITING, phase, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Deletes the file for its own stream (its task was forgotten, or it failed) and gives its
    /// bytes back. Not an eviction.
    pub(crate) fn delete(&self, entry: &Arc<Entry>) {
        let mut books = self.lock();
        Self::remove(&mut books, entry, false);
    }

    /// Room left for `owner`'s session now.
    fn room(&self, books: &Books, owner: &Option<String>) -> u64 {
        let session = books.sessions.get(owner).map_or(0, |a| a.used);
        self.total
            .saturating_sub(books.used)
            .min(self.per_session.saturating_sub(session))
    }

    /// Deletes finished files until `want` more bytes of `owner`'s session fit, or none is left
    /// to delete: the session's own oldest past its budget, the fullest session's oldest past
    /// the total.
    fn make_room(&self, books: &mut Books, owner: &Option<String>, want: u64) {
        loop {
            let session = books.sessions.get(owner).map_or(0, |a| a.used);
            if session.saturating_add(want) <= self.per_session {
                break;
            }
            if !Self::evict_oldest(books, owner) {
                break;
            }
        }
        while books.used.saturating_add(want) > self.total {
            // The session holding most that still has a finished file to give.
            let fullest = books
                .sessions
                .iter()
                .filter(|(_, account)| account.files.iter().any(|e| finished(e)))
                .max_by_key(|(_, account)| account.used)
                .map(|(key, _)| key.clone());
            match fullest {
                Some(key) if Self::evict_oldest(books, &key) => {}
                _ => break,
            }
        }
    }

    /// Deletes the oldest finished file of `owner`'s session; `false` when it has none.
    fn evict_oldest(books: &mut Books, owner: &Option<String>) -> bool {
        let Some(entry) = books
            .sessions
            .get(owner)
            .and_then(|account| account.files.iter().find(|e| finished(e)).cloned())
        else {
            return false;
        };
        Self::remove(books, &entry, true);
        true
    }

    /// Deletes `entry`'s file and takes it off the books, once. A file that cannot be deleted
    /// stays counted (its bytes are still on disk) but is given up on.
    fn remove(books: &mut Books, entry: &Arc<Entry>, eviction: bool) {
        let was = entry.phase.swap(GONE, Ordering::AcqRel);
        if was == GONE {
            return;
        }
        let deleted = match rustix::fs::unlinkat(&*entry.dir, entry.name.as_str(), AtFlags::empty())
        {
            Ok(()) | Err(Errno::NOENT) => true,
            Err(err) => {
                tracing::warn!(name = %entry.name, %err, "cannot delete a spill file; its bytes stay counted");
                false
            }
        };
        if eviction && was == COMPLETE {
            entry.evicted.store(true, Ordering::Release);
            tracing::debug!(name = %entry.name, "spill file evicted to stay within the spill budget");
        }
        let Some(account) = books.sessions.get_mut(&entry.owner) else {
            return;
        };
        account.files.retain(|e| !Arc::ptr_eq(e, entry));
        if deleted {
            let bytes = entry.bytes.swap(0, Ordering::AcqRel);
            account.used = account.used.saturating_sub(bytes);
            books.used = books.used.saturating_sub(bytes);
        }
        if account.used == 0 && account.files.is_empty() {
            books.sessions.remove(&entry.owner);
        }
    }
}

fn finished(entry: &Entry) -> bool {
    matches!(entry.phase.load(Ordering::Acquire), COMPLETE | PARTIAL)
}
