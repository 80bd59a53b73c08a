//! Starts served fairly between sessions.
//!
//! Every start takes a spawn helper, and helpers beyond the ready ones are forked one at a time
//! by the one factory: that is where a burst of starts queues. Left to a lock, one session's
//! burst of fifty starts would put another session's single start behind most of them. The gate
//! lets [`CAPACITY`] takes through at once and serves the waiting ones round-robin over
//! sessions (owner tokens; starts without one count as one session), oldest first within a
//! session: a start waits for at most one take of each other session that is waiting, plus those
//! already under way, whatever the size of any burst.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Takes served at once: the ready helpers a burst finds.
const CAPACITY: usize = 2;

#[derive(Debug, Default)]
pub(crate) struct FairGate {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Takes under way.
    busy: usize,
    /// Per session, its waiting starts, oldest first.
    waiting: HashMap<Option<String>, VecDeque<oneshot::Sender<Pass>>>,
    /// The sessions with waiting starts, in the order they are served.
    turn: VecDeque<Option<String>>,
}

/// Leave to take a helper; the next waiting start goes when it is dropped.
#[derive(Debug)]
pub(crate) struct Pass {
    gate: Arc<FairGate>,
}

impl FairGate {
    /// Waits for this session's turn to take a helper.
    pub(crate) async fn enter(self: &Arc<Self>, owner: Option<&str>) -> Pass {
        let wait = {
            let mut guard = self.lock();
            let state = &mut *guard;
            if state.busy < CAPACITY && state.turn.is_empty() {
                state.busy += 1;
                return Pass { gate: self.clone() };
            }
            let (tx, rx) = oneshot::channel();
            let owner = owner.map(str::to_string);
            let queue = state.waiting.entry(owner.clone()).or_default();
            if queue.is_empty() {
                state.turn.push_back(owner);
            }
            queue.push_back(tx);
            rx
        };
        match wait.await {
            Ok(pass) => pass,
            // The gate hands every waiter a pass or drops it only with itself; a dropped sender
            // means the gate is gone, and nothing is left to be fair to.
            Err(_) => {
                self.lock().busy += 1;
                Pass { gate: self.clone() }
            }
        }
    }

    /// A take ended: the next session in turn gets its oldest waiting start through.
    fn leave(self: &Arc<Self>) {
        let mut guard = self.lock();
        let state = &mut *guard;
        state.busy -= 1;
        while state.busy < CAPACITY {
            let Some(owner) = state.turn.pop_front() else {
                return;
            };
            let Some(queue) = state.waiting.get_mut(&owner) else {
                continue;
            };
            let Some(next) = queue.pop_front() else {
                state.waiting.remove(&owner);
                continue;
            };
            if queue.is_empty() {
                state.waiting.remove(&owner);
            } else {
                state.turn.push_back(owner);
            }
            state.busy += 1;
            // A start that gave up waiting (its call was aborted) drops its receiver: the pass
            // comes back with the error and is dropped here, which frees its place again.
            if let Err(pass) = next.send(Pass { gate: self.clone() }) {
                drop(guard);
                drop(pass);
                return;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change keeps `turn` and `waiting` in step before the lock is released.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.gate.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// With the gate full, a burst of one session and a single start of another: the single
    /// start is served second, not after the burst.
    #[tokio::test]
    async fn a_burst_does_not_put_another_session_last() {
        let gate = Arc::new(FairGate::default());
        let held: Vec<Pass> = vec![gate.enter(Some("b")).await, gate.enter(Some("b")).await];
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        let start = |owner: &'static str, label: String| {
            let gate = gate.clone();
            let order = order.clone();
            tokio::spawn(async move {
                let pass = gate.enter(Some(owner)).await;
                order.lock().unwrap().push(label);
                tokio::time::sleep(Duration::from_millis(2)).await;
                drop(pass);
            })
        };
        for i in 0..10 {
            waiters.push(start("b", format!("b{i}")));
            tokio::task::yield_now().await;
        }
        waiters.push(start("a", "a".into()));
        tokio::task::yield_now().await;
        drop(held);
        for w in waiters {
            w.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        let a_at = order.iter().position(|l| l == "a").unwrap();
        assert!(a_at <= 2, "{order:?}");
        // Within a session, oldest first.
        let bs: Vec<&String> = order.iter().filter(|l| l.starts_with('b')).collect();
        let sorted: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
        assert_eq!(bs, sorted.iter().collect::<Vec<_>>());
    }

    /// A waiter that gives up leaves no place taken.
    #[tokio::test]
    async fn an_abandoned_wait_frees_its_place() {
        let gate = Arc::new(FairGate::default());
        let held = [gate.enter(None).await, gate.enter(None).await];
        let abandoned =
            tokio::time::timeout(Duration::from_millis(10), gate.enter(Some("x"))).await;
        assert!(abandoned.is_err());
        drop(held);
        let _one = gate.enter(Some("y")).await;
        let _two = tokio::time::timeout(Duration::from_millis(100), gate.enter(Some("z")))
            .await
            .expect("the abandoned place is free again");
    }
}
