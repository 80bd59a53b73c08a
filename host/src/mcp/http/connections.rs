//! The HTTP server's connections: how many are open, which have shown the token, and which to
//! close when there are too many.
//!
//! A connection is unauthenticated until a request on it carried the bearer token. Anyone who
//! can reach the port can open such connections, so they are capped apart from the others:
//! when a new connection would pass `--http-max-unauthenticated`, or any would pass
//! `--http-max-connections`, the oldest unauthenticated connection is closed to make room. The
//! oldest, because an authenticated client's new connection is unauthenticated only until the
//! headers of its first request arrive, which from a working client is at once: idle or slow
//! connections opened before it are closed first. When every connection is authenticated and
//! the cap is reached, a new one is refused.
//!
//! Connections hold descriptors, and so do the host's commands: at start the soft descriptor
//! limit is raised to the hard one, and the connection cap is kept [`RESERVED_DESCRIPTORS`]
//! below it, so that accepting does not run out of descriptors while a connection could be
//! closed instead.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Descriptors kept for the host itself (its runtime, the component cache, spill files, the
/// pipes of running commands) when the descriptor limit caps connections.
pub(super) const RESERVED_DESCRIPTORS: u64 = 128;

/// The fewest connections a low descriptor limit leaves.
const MIN_CONNECTIONS: u64 = 16;

/// How often, at most, closing connections to make room is logged as a warning.
const SHED_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// The open connections and their caps.
pub(super) struct Connections {
    table: Mutex<Table>,
    max_connections: usize,
    max_unauthenticated: usize,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    /// The unauthenticated connections, oldest first (ids grow), each with the token that
    /// closes it.
    unauthenticated: BTreeMap<u64, CancellationToken>,
    authenticated: usize,
    /// Connections closed to make room since the last warning, and when that was.
    shed_unreported: u64,
    warned: Option<Instant>,
}

impl Table {
    fn open(&self) -> usize {
        self.unauthenticated.len() + self.authenticated
    }

    /// Close the oldest unauthenticated connection; whether there was one.
    fn shed_oldest(&mut self) -> bool {
        let Some((_, close)) = self.unauthenticated.pop_first() else {
            return false;
        };
        close.cancel();
        self.shed_unreported += 1;
        true
    }
}

impl Connections {
    pub(super) fn new(max_connections: usize, max_unauthenticated: usize) -> Arc<Self> {
        Arc::new(Self {
            table: Mutex::new(Table::default()),
            max_connections,
            max_unauthenticated,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table stays consistent across a panic: each change is one insert or removal.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new connection, made by closing the oldest unauthenticated one if need
    /// be; `None` when every connection is authenticated and there is no room.
    pub(super) fn admit(self: &Arc<Self>) -> Option<Admission> {
        let mut table = self.lock();
        if table.unauthenticated.len() >= self.max_unauthenticated {
            table.shed_oldest();
        }
        if table.open() >= self.max_connections && !table.shed_oldest() {
            return None;
        }
        self.warn_of_shedding(&mut table);
        let id = table.next_id;
        table.next_id += 1;
        let close = CancellationToken::new();
        table.unauthenticated.insert(id, close.clone());
        Some(Admission {
            connections: self.clone(),
            id,
            authenticated: AtomicBool::new(false),
            close,
        })
    }

    /// Close the oldest unauthenticated connection, for a descriptor to accept with; whether
    /// there was one.
    pub(super) fn shed_one(&self) -> bool {
        let mut table = self.lock();
        let shed = table.shed_oldest();
        self.warn_of_shedding(&mut table);
        shed
    }

    /// Open connections: unauthenticated ones, authenticated ones.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let table = self.lock();
        (table.unauthenticated.len(), table.authenticated)
    }

    /// A warning for connections closed to make room, at most every
    /// [`SHED_WARNING_INTERVAL`]: under a flood there would be one per connection.
    fn warn_of_shedding(&self, table: &mut Table) {
        if table.shed_unreported == 0
            || table
                .warned
                .is_some_and(|at| at.elapsed() < SHED_WARNING_INTERVAL)
        {
            return;
        }
        tracing::warn!(
            "closed {} unauthenticated HTTP connection(s) to make room: {} open, {} of them \
             unauthenticated (--http-max-connections {}, --http-max-unauthenticated {})",
            table.shed_unreported,
            table.open(),
            table.unauthenticated.len(),
            self.max_connections,
            self.max_unauthenticated
        );
        table.shed_unreported = 0;
        table.warned = Some(Instant::now());
    }
}

/// One open connection's place; dropping it frees the place.
pub(super) struct Admission {
    connections: Arc<Connections>,
    id: u64,
    authenticated: AtomicBool,
    /// Cancelled when the connection is to be closed to make room.
    close: CancellationToken,
}

impl Admission {
    /// A request on the connection carried the token: it is never closed to make room.
    pub(super) fn authenticate(&self) {
        if self.authenticated.load(Ordering::Relaxed) {
            return;
        }
        let mut table = self.connections.lock();
        // Not found: it was just closed to make room, and goes.
        if table.unauthenticated.remove(&self.id).is_some() {
            table.authenticated += 1;
            self.authenticated.store(true, Ordering::Relaxed);
        }
    }

    /// Resolves once the connection is to be closed to make room.
    pub(super) async fn closed(&self) {
        self.close.cancelled().await;
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut table = self.connections.lock();
        if self.authenticated.load(Ordering::Relaxed) {
            table.authenticated -= 1;
        } else {
            // Already gone when it was closed to make room.
            table.unauthenticated.remove(&self.id);
        }
    }
}

/// Raise the soft descriptor limit to the hard one; the soft limit then in force (`None`:
/// unlimited).
pub(super) fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current?;
    // Linux refuses an unlimited descriptor limit; its default ceiling (fs.nr_open) is 2^20.
    let target = limit.maximum.unwrap_or(1 << 20);
    if target <= current {
        return Some(current);
    }
    let raised = Rlimit {
        current: Some(target),
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::debug!("raised the descriptor limit from {current} to {target}");
            Some(target)
        }
        Err(e) => {
            tracing::warn!("cannot raise the descriptor limit from {current} to {target}: {e}");
            Some(current)
        }
    }
}

/// The connection cap under a soft descriptor limit of `descriptors`: `requested`, or fewer
/// when the limit leaves less room beside [`RESERVED_DESCRIPTORS`].
pub(super) fn connection_cap(requested: usize, descriptors: Option<u64>) -> usize {
    let Some(limit) = descriptors else {
        return requested;
    };
    let room = limit
        .saturating_sub(RESERVED_DESCRIPTORS)
        .max(MIN_CONNECTIONS);
    requested.min(usize::try_from(room).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_unauthenticated_connection_makes_room() {
        let connections = Connections::new(10, 2);
        let first = connections.admit().unwrap();
        let second = connections.admit().unwrap();
        let third = connections.admit().unwrap();
        assert!(first.close.is_cancelled());
        assert!(!second.close.is_cancelled() && !third.close.is_cancelled());
        assert_eq!(connections.counts(), (2, 0));
        drop(first);
        assert_eq!(connections.counts(), (2, 0));
        second.authenticate();
        assert_eq!(connections.counts(), (1, 1));
        drop(second);
        drop(third);
        assert_eq!(connections.counts(), (0, 0));
    }

    #[test]
    fn authenticated_connections_are_kept_and_fill_the_cap() {
        let connections = Connections::new(2, 2);
        let a = connections.admit().unwrap();
        a.authenticate();
        let b = connections.admit().unwrap();
        // At the cap: the unauthenticated one goes for the new one.
        let c = connections.admit().unwrap();
        assert!(b.close.is_cancelled() && !a.close.is_cancelled());
        // A connection closed to make room does not count when it authenticates late.
        b.authenticate();
        c.authenticate();
        assert_eq!(connections.counts(), (0, 2));
        assert!(connections.admit().is_none());
        assert!(!connections.shed_one());
        drop(a);
        assert!(connections.admit().is_some());
        drop(b);
        assert_eq!(connections.counts(), (0, 1));
    }

    #[test]
    fn the_descriptor_limit_caps_connections() {
        assert_eq!(connection_cap(1024, None), 1024);
        assert_eq!(connection_cap(1024, Some(400)), 272);
        assert_eq!(connection_cap(100, Some(400)), 100);
        assert_eq!(connection_cap(1024, Some(20)), 16);
    }
}
