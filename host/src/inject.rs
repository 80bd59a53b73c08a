//! The agent side of the guest's `agent.inject`: a channel per session that the embedding host
//! consumes.
//!
//! Each session registers its owner token here and gets a receiver; the guest's notices for that
//! owner arrive on it. Dropping the [`Session`] runs its end hook (for a session opened by
//! [`ToolHost::open_session`](crate::ToolHost::open_session): kill its running tasks), then
//! unregisters the owner, so later notices for it are reported as `unknown-owner` and dropped by
//! the guest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// Who injected a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// `plugin` for the tools component's notices.
    pub kind: String,
    /// The plugin's name, `tool-bash` for the tools component.
    pub plugin: Option<String>,
}

/// A text for the owner's next model request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    /// The owner token of the session it is for.
    pub owner: String,
    /// The text, for example `background bash task bash-1 finished [status: completed, exit
    /// code: 0]. Read its output with bash_output.`
    pub text: String,
    /// Who injected it.
    pub source: Source,
}

/// An injection for an owner token no session holds (any more): the notice is dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no session has owner token {0:?}")]
pub struct UnknownOwner(pub String);

/// Routes injections to sessions by owner token.
#[derive(Debug, Clone, Default)]
pub struct SessionRouter {
    sessions: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Injection>>>>,
    /// Each session's own names for its tasks.
    names: Arc<crate::task_names::TaskNames>,
}

impl SessionRouter {
    /// Open a session with a fresh random owner token. The router knows no executor, so a
    /// session opened here leaves its tasks running when dropped;
    /// [`ToolHost::open_session`](crate::ToolHost::open_session) opens one that kills them.
    pub fn open(&self, cwd: Option<String>) -> Session {
        let owner = random_owner_token();
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().insert(owner.clone(), tx);
        Session {
            owner,
            cwd,
            injections: rx,
            router: self.clone(),
            on_end: None,
        }
    }

    /// [`SessionRouter::open`] with a given owner token, for tests that need a known one.
    #[cfg(test)]
    pub(crate) fn open_as(&self, owner: &str) -> Session {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().insert(owner.to_string(), tx);
        Session {
            owner: owner.to_string(),
            cwd: None,
            injections: rx,
            router: self.clone(),
            on_end: None,
        }
    }

    /// Deliver `injection` to its owner's session.
    pub fn inject(&self, injection: Injection) -> Result<(), UnknownOwner> {
        let sessions = self.lock();
        let Some(tx) = sessions.get(&injection.owner) else {
            return Err(UnknownOwner(injection.owner));
        };
        let owner = injection.owner.clone();
        tx.send(injection).map_err(|_| UnknownOwner(owner))
    }

    /// The name the session `owner` knows the executor's task `id` by: given now if it has
    /// none and the session is open (an ended session's task keeps the executor's id; its notice
    /// reaches nobody).
    pub(crate) fn name_task(&self, owner: &str, id: &str) -> String {
        // Under the sessions lock, so that the session cannot end (and forget its names)
        // between the check and the naming.
        let sessions = self.lock();
        if sessions.contains_key(owner) {
            self.names.name(owner, id)
        } else {
            self.names
                .named(id)
                .map_or_else(|| id.to_string(), |(_, name)| name)
        }
    }

    /// Each session's own names for its tasks.
    pub(crate) fn names(&self) -> &crate::task_names::TaskNames {
        &self.names
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<Injection>>> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts and
        // removes), so a poisoned lock is still usable.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a session does when it ends, given its owner token.
type EndHook = Box<dyn FnOnce(&str) + Send + Sync>;

/// One agent session: an owner token, a working directory and the notices injected for it.
///
/// Dropping it ends the session: a session opened by
/// [`ToolHost::open_session`](crate::ToolHost::open_session) kills the background tasks it
/// started that are still running, and its owner token is unregistered.
pub struct Session {
    owner: String,
    cwd: Option<String>,
    injections: mpsc::UnboundedReceiver<Injection>,
    router: SessionRouter,
    on_end: Option<EndHook>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("owner", &self.owner)
            .field("cwd", &self.cwd)
            .field("ends_tasks", &self.on_end.is_some())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Runs `hook` with the owner token when the session is dropped, before the token is
    /// unregistered (replacing any hook set before).
    pub(crate) fn on_end(mut self, hook: impl FnOnce(&str) + Send + Sync + 'static) -> Self {
        self.on_end = Some(Box::new(hook));
        self
    }

    /// The session's owner token: tasks it starts carry it, and only its calls reach them.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The session's working directory, against which relative `workdir`s resolve.
    pub fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    /// The caller context for a tool call made by this session.
    pub fn caller(&self) -> crate::Caller {
        crate::Caller {
            owner: Some(self.owner.clone()),
            cwd: self.cwd.clone(),
        }
    }

    /// Every injection that arrived so far, without waiting.
    pub fn drain_injections(&mut self) -> Vec<Injection> {
        let mut out = Vec::new();
        while let Ok(injection) = self.injections.try_recv() {
            out.push(injection);
        }
        out
    }

    /// Wait for the next injection.
    pub async fn next_injection(&mut self) -> Option<Injection> {
        self.injections.recv().await
    }

    /// Split off the receiver, for hosts that consume injections on their own task. The session
    /// stays registered until the returned guard (the session) is dropped.
    pub fn take_receiver(&mut self) -> mpsc::UnboundedReceiver<Injection> {
        let (_, empty) = mpsc::unbounded_channel();
        std::mem::replace(&mut self.injections, empty)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(hook) = self.on_end.take() {
            hook(&self.owner);
        }
        let mut sessions = self.router.lock();
        sessions.remove(&self.owner);
        self.router.names.forget(&self.owner);
    }
}

/// 128 random bits as hex: owner tokens must not be guessable by other sessions.
fn random_owner_token() -> String {
    let hex = dsh_executor::hex::random_token(16).expect("the OS random source is available");
    format!("session-{hex}")
}
