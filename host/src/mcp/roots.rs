//! A session's working directory from the roots its client offers.
//!
//! A client that declares the `roots` capability in `initialize` is asked `roots/list` once it
//! sent `notifications/initialized`, and again on each `notifications/roots/list_changed`. When
//! the first root of the answer is a `file://` URI naming a directory, that directory is the
//! session's cwd (relative `workdir`s resolve against it) for every call made from then on;
//! otherwise the session uses the server's default (`--cwd`, else the server's own cwd), and one
//! log line says why the root was not used. Each answer replaces the previous one whole, so roots
//! that became unusable fall back to the default rather than to an older root.
//!
//! A call made while an answer is outstanding waits for it, at most [`ROOTS_WAIT`]: clients
//! answer `roots/list` at once, and a command started in the default directory just before the
//! client's root was known could write where it was not meant to. The first call that waits in
//! vain makes the default the session's cwd (one log line) until an answer comes, so a client
//! that never answers costs one delay, not one per call. Calls already running keep the
//! directory they started with.
//!
//! Revision 2026-07-28 has no server-to-client requests, so its sessions are never asked and use
//! the default.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::Root;
use rmcp::{Peer, RoleServer};
use tokio::sync::watch;

/// The longest a call waits for the client's answer to `roots/list`.
pub const ROOTS_WAIT: Duration = Duration::from_secs(5);

/// Where a session's calls run.
pub(super) struct SessionCwd {
    /// The server's default: `--cwd`, or `None` for the server's own cwd.
    default: Option<String>,
    state: watch::Sender<State>,
    /// The client declared the `roots` capability (on a revision that lets the server ask).
    declared: AtomicBool,
    /// Counts the questions asked; only the latest one's answer applies.
    asked: AtomicU64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// An answer to `roots/list` is awaited.
    Asking,
    /// The cwd of the calls from now on.
    Known(Option<String>),
}

impl SessionCwd {
    pub(super) fn new(default: Option<String>) -> Self {
        Self {
            state: watch::Sender::new(State::Known(default.clone())),
            default,
            declared: AtomicBool::new(false),
            asked: AtomicU64::new(0),
        }
    }

    /// The client declared `roots` in `initialize`: it will be asked once initialized, and calls
    /// wait for its answer from now on.
    pub(super) fn expect_roots(&self) {
        self.declared.store(true, Ordering::SeqCst);
        self.state.send_replace(State::Asking);
    }

    /// Ask the client for its roots (when it declared them) and apply the answer to later calls.
    pub(super) fn ask(self: &Arc<Self>, peer: Peer<RoleServer>) {
        if !self.declared.load(Ordering::SeqCst) {
            return;
        }
        let question = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        self.state.send_replace(State::Asking);
        let this = self.clone();
        // Ends with the answer, or when the session's connection goes.
        tokio::spawn(async move {
            let cwd = match peer.list_roots().await {
                Ok(answer) => this.choose(&answer.roots),
                // The session ended first: no call will need the answer.
                Err(rmcp::service::ServiceError::TransportClosed) => {
                    tracing::debug!("session ended before the client answered roots/list");
                    return;
                }
                Err(e) => {
                    this.not_used(&format!("roots/list failed: {e}"));
                    this.default.clone()
                }
            };
            this.answered(question, cwd);
        });
    }

    /// The cwd from the answer to question number `question`, unless a later one was asked.
    fn answered(&self, question: u64, cwd: Option<String>) {
        if self.asked.load(Ordering::SeqCst) == question {
            self.state.send_replace(State::Known(cwd));
        }
    }

    /// The cwd for a call starting now: waits while an answer to `roots/list` is outstanding, at
    /// most [`ROOTS_WAIT`].
    pub(super) async fn current(&self) -> Option<String> {
        let mut state = self.state.subscribe();
        let waited =
            tokio::time::timeout(ROOTS_WAIT, state.wait_for(|s| matches!(s, State::Known(_))))
                .await;
        // `self` holds the sender, so the wait ends only with a known cwd or the timeout.
        if let Ok(Ok(known)) = waited
            && let State::Known(cwd) = &*known
        {
            return cwd.clone();
        }
        // Waited in vain: the default from now on, unless the answer came meanwhile.
        let mut cwd = self.default.clone();
        let gave_up = self.state.send_if_modified(|s| match s {
            State::Asking => {
                *s = State::Known(self.default.clone());
                true
            }
            State::Known(known) => {
                cwd = known.clone();
                false
            }
        });
        if gave_up {
            self.not_used(&format!(
                "the client has not answered roots/list within {} s (its answer still applies \
                 to later calls when it comes)",
                ROOTS_WAIT.as_secs()
            ));
        }
        cwd
    }

    /// The cwd the roots give: the first root's directory, else the default.
    fn choose(&self, roots: &[Root]) -> Option<String> {
        match root_dir(roots) {
            Ok(dir) => {
                tracing::info!("session cwd: {dir}, the client's first root");
                Some(dir)
            }
            Err(reason) => {
                self.not_used(&reason);
                self.default.clone()
            }
        }
    }

    fn not_used(&self, reason: &str) {
        let default = match &self.default {
            Some(dir) => format!("--cwd {dir}"),
            None => "the server's working directory".to_string(),
        };
        tracing::warn!("session cwd: no client root used ({reason}); using {default}");
    }
}

/// The directory the first root names, or why there is none.
fn root_dir(roots: &[Root]) -> Result<String, String> {
    let Some(root) = roots.first() else {
        return Err("the client offers no roots".into());
    };
    let uri = &root.uri;
    let url = url::Url::parse(uri).map_err(|e| format!("the first root {uri:?} is no URI: {e}"))?;
    if url.scheme() != "file" {
        return Err(format!("the first root {uri:?} is not a file:// URI"));
    }
    // Without a trailing slash or `.` components, as `--cwd` would give it.
    let path: std::path::PathBuf = url
        .to_file_path()
        .map_err(|()| format!("the first root {uri:?} names no local path"))?
        .components()
        .collect();
    match std::fs::metadata(&path) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "the first root {uri:?} names {}, which is not a directory",
                path.display()
            ));
        }
        Err(e) => {
            return Err(format!(
                "the first root {uri:?} names {}: {e}",
                path.display()
            ));
        }
    }
    path.into_os_string()
        .into_string()
        .map_err(|path| format!("the first root {uri:?} names a path that is not UTF-8: {path:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(uris: &[&str]) -> Vec<Root> {
        uris.iter().map(|u| Root::new(*u)).collect()
    }

    #[test]
    fn the_first_file_root_that_is_a_directory_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let spaced = dir.path().join("a b");
        std::fs::create_dir(&spaced).unwrap();
        let uri = url::Url::from_directory_path(&spaced).unwrap();
        assert!(uri.as_str().ends_with("/a%20b/"), "{uri}");
        assert_eq!(
            root_dir(&roots(&[uri.as_str(), "file:///"])).unwrap(),
            spaced.to_str().unwrap()
        );
        assert_eq!(root_dir(&roots(&["file:///"])).unwrap(), "/");
        let plain = format!("file://{}", dir.path().display());
        assert_eq!(
            root_dir(&roots(&[&plain])).unwrap(),
            dir.path().to_str().unwrap()
        );
        let localhost = format!("file://localhost{}", dir.path().display());
        assert_eq!(
            root_dir(&roots(&[&localhost])).unwrap(),
            dir.path().to_str().unwrap()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_waits_for_the_answer() {
        let cwd = Arc::new(SessionCwd::new(Some("/default".into())));
        assert_eq!(cwd.current().await.as_deref(), Some("/default"));
        cwd.expect_roots();
        let question = cwd.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let answering = cwd.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            answering.answered(question, Some("/root".into()));
        });
        let started = tokio::time::Instant::now();
        assert_eq!(cwd.current().await.as_deref(), Some("/root"));
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        // An answer to an earlier question does not undo a later one's.
        let later = cwd.asked.fetch_add(1, Ordering::SeqCst) + 1;
        cwd.answered(later, Some("/later".into()));
        cwd.answered(question, Some("/root".into()));
        assert_eq!(cwd.current().await.as_deref(), Some("/later"));
    }

    #[tokio::test(start_paused = true)]
    async fn without_an_answer_only_the_first_call_waits() {
        let cwd = SessionCwd::new(None);
        cwd.expect_roots();
        let started = tokio::time::Instant::now();
        assert_eq!(cwd.current().await, None);
        assert_eq!(started.elapsed(), ROOTS_WAIT);
        let again = tokio::time::Instant::now();
        assert_eq!(cwd.current().await, None);
        assert_eq!(again.elapsed(), Duration::ZERO);
        // The late answer still applies.
        cwd.answered(cwd.asked.load(Ordering::SeqCst), Some("/late".into()));
        assert_eq!(cwd.current().await.as_deref(), Some("/late"));
    }

    #[test]
    fn unusable_roots_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        let reason = |uris: &[&str]| root_dir(&roots(uris)).unwrap_err();
        assert_eq!(reason(&[]), "the client offers no roots");
        assert!(
            reason(&["https://example.com/x"]).contains("is not a file:// URI"),
            "{}",
            reason(&["https://example.com/x"])
        );
        assert!(reason(&["not a uri"]).contains("is no URI"));
        assert!(reason(&["file://other-host/tmp"]).contains("names no local path"));
        let missing = format!("file://{}/missing", dir.path().display());
        assert!(reason(&[&missing]).contains("No such file or directory"));
        let not_dir = format!("file://{}", file.display());
        assert!(reason(&[&not_dir]).contains("which is not a directory"));
        // Only the first root counts.
        let good = format!("file://{}", dir.path().display());
        assert!(root_dir(&roots(&[&missing, &good])).is_err());
    }
}
