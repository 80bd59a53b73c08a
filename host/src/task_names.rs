//! Each session's own task numbering.
//!
//! The executor numbers tasks host-wide (`bash-1`, `bash-2`, … in start order across every
//! session), so a session shown those ids would learn how many tasks the others started. The
//! host gives each session names of its own instead: its first task is `bash-1` whatever ran
//! elsewhere before, and a name is resolved within the calling session only, so another
//! session's task cannot even be named. A caller without an owner token is no session: it sees
//! the executor's ids, as do tasks without an owner.

use std::collections::HashMap;
use std::sync::Mutex;

/// Names a session keeps before those of tasks the executor forgot are dropped.
const FIRST_PRUNE: usize = 1024;

/// The names of every session's tasks. Shared by the session router and the calls' guards.
#[derive(Debug, Default)]
pub struct TaskNames {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<String, Names>,
    /// Executor id → (owner token, the session's name for it).
    named: HashMap<String, (String, String)>,
}

#[derive(Debug)]
struct Names {
    /// The number of the next name.
    next: u64,
    /// Name → executor id.
    ids: HashMap<String, String>,
    /// Past this many names, those of forgotten tasks are dropped.
    prune_at: usize,
}

impl Default for Names {
    fn default() -> Self {
        Names {
            next: 1,
            ids: HashMap::new(),
            prune_at: FIRST_PRUNE,
        }
    }
}

/// The number of a name `bash-N`.
fn number(name: &str) -> u64 {
    name.strip_prefix("bash-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

impl TaskNames {
    /// The name `owner`'s session knows the executor's task `id` by, given now if it has none.
    pub fn name(&self, owner: &str, id: &str) -> String {
        let mut inner = self.lock();
        if let Some((_, name)) = inner.named.get(id) {
            return name.clone();
        }
        let names = inner.sessions.entry(owner.to_string()).or_default();
        let name = format!("bash-{}", names.next);
        names.next += 1;
        names.ids.insert(name.clone(), id.to_string());
        inner
            .named
            .insert(id.to_string(), (owner.to_string(), name.clone()));
        name
    }

    /// The executor's id of the task `owner`'s session names `name`.
    pub fn resolve(&self, owner: &str, name: &str) -> Option<String> {
        self.lock().sessions.get(owner)?.ids.get(name).cloned()
    }

    /// The session (owner token) and the name of the executor's task `id`, if it has one.
    pub fn named(&self, id: &str) -> Option<(String, String)> {
        self.lock().named.get(id).cloned()
    }

    /// Whether `owner`'s session holds so many names that those of tasks the executor forgot
    /// should go ([`TaskNames::prune`]).
    pub fn wants_pruning(&self, owner: &str) -> bool {
        self.lock()
            .sessions
            .get(owner)
            .is_some_and(|n| n.ids.len() > n.prune_at)
    }

    /// Drops `owner`'s names of tasks for which `known` is false (the executor forgot them: their
    /// names would only ever answer "unknown" again), but for the latest [`FIRST_PRUNE`], whose
    /// completion notices may still be on their way. Names are never given anew.
    pub fn prune(&self, owner: &str, known: impl Fn(&str) -> bool) {
        let ids: Vec<String> = match self.lock().sessions.get(owner) {
            Some(names) => {
                let recent = names.next.saturating_sub(FIRST_PRUNE as u64);
                names
                    .ids
                    .iter()
                    .filter(|(name, _)| number(name) < recent)
                    .map(|(_, id)| id.clone())
                    .collect()
            }
            None => return,
        };
        // Asked outside the lock: the executor takes locks of its own.
        let gone: Vec<String> = ids.into_iter().filter(|id| !known(id)).collect();
        let mut inner = self.lock();
        for id in &gone {
            if let Some((_, name)) = inner.named.remove(id)
                && let Some(names) = inner.sessions.get_mut(owner)
            {
                names.ids.remove(&name);
            }
        }
        if let Some(names) = inner.sessions.get_mut(owner) {
            names.prune_at = (2 * names.ids.len()).max(FIRST_PRUNE);
        }
    }

    /// Forgets `owner`'s session (it ended).
    pub fn forget(&self, owner: &str) {
        let mut inner = self.lock();
        if let Some(names) = inner.sessions.remove(owner) {
            for id in names.ids.values() {
                inner.named.remove(id);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every change keeps the two maps in step before the lock is released.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_session_counts_from_one() {
        let names = TaskNames::default();
        assert_eq!(names.name("a", "bash-1"), "bash-1");
        assert_eq!(names.name("b", "bash-2"), "bash-1");
        assert_eq!(names.name("b", "bash-3"), "bash-2");
        assert_eq!(names.name("a", "bash-4"), "bash-2");
        // Named once, whoever asks again.
        assert_eq!(names.name("a", "bash-4"), "bash-2");
        assert_eq!(names.resolve("a", "bash-2").as_deref(), Some("bash-4"));
        assert_eq!(names.resolve("b", "bash-2").as_deref(), Some("bash-3"));
        assert_eq!(names.resolve("b", "bash-3"), None);
        assert_eq!(names.named("bash-3"), Some(("b".into(), "bash-2".into())));
        names.forget("b");
        assert_eq!(names.resolve("b", "bash-1"), None);
        assert_eq!(names.named("bash-3"), None);
        assert_eq!(names.resolve("a", "bash-1").as_deref(), Some("bash-1"));
    }

    #[test]
    fn pruning_drops_forgotten_tasks_and_never_reuses_a_name() {
        let names = TaskNames::default();
        let made = 2 * FIRST_PRUNE + 1;
        for i in 0..made {
            names.name("a", &format!("x-{i}"));
        }
        assert!(names.wants_pruning("a"));
        names.prune("a", |id| id == "x-7");
        assert!(!names.wants_pruning("a"));
        // An old name of a known task stays; old names of forgotten ones go.
        assert_eq!(names.resolve("a", "bash-8").as_deref(), Some("x-7"));
        assert_eq!(names.resolve("a", "bash-1"), None);
        assert_eq!(names.named("x-1"), None);
        // The latest names stay, known or not: their notices may be on their way.
        let last = format!("bash-{made}");
        let last_id = format!("x-{}", made - 1);
        assert_eq!(names.resolve("a", &last).as_deref(), Some(last_id.as_str()));
        assert_eq!(names.name("a", "y"), format!("bash-{}", made + 1));
    }
}
