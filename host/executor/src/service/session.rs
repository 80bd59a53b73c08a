//! A session's protocol state, whatever carries its messages: its `run` and `start` calls by
//! request id (each runs once), where each task's reads stand, and its task-done events not yet
//! acknowledged. The stdio server holds one; a pool node holds one per session placed on it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::wire::{self, Offsets, Outcome, RpcError, code};
use crate::{Executor, Read, Task};

/// Where answers go: a connection's writer, a message's reply subject.
pub(crate) trait Sink: Send + Sync {
    /// Sends one whole line (a closed destination drops it: its client is gone).
    fn send(&self, line: String);
}

/// Answers request `id` on `to`.
pub(crate) fn answer(to: &dyn Sink, id: &Value, result: Result<Value, RpcError>) {
    to.send(match result {
        Ok(value) => wire::response(id, &value),
        Err(error) => wire::error_response(id, &error),
    });
}

/// A line told apart: a request (with an id), a notification (without), or nothing to act on
/// (a response from the client: the protocol asks the client nothing).
pub(crate) enum Message {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    Ignored,
    /// Not a JSON-RPC message: the error, answered to `id` when there is one (a notification
    /// gets no answer).
    Invalid {
        id: Option<Value>,
        error: RpcError,
    },
}

/// Reads one line.
pub(crate) fn parse(line: &[u8]) -> Message {
    let message: wire::Incoming = match serde_json::from_slice(line) {
        Ok(message) => message,
        Err(err) => {
            return Message::Invalid {
                id: Some(Value::Null),
                error: RpcError::new(code::PARSE_ERROR, format!("not a JSON-RPC message: {err}")),
            };
        }
    };
    let Some(method) = message.method else {
        if message.result.is_none() && message.error.is_none() {
            return Message::Invalid {
                id: Some(message.id.unwrap_or(Value::Null)),
                error: RpcError::new(code::INVALID_REQUEST, "a message needs a method"),
            };
        }
        return Message::Ignored;
    };
    if message.jsonrpc.as_deref() != Some("2.0") {
        return Message::Invalid {
            id: message.id,
            error: RpcError::new(code::INVALID_REQUEST, "jsonrpc must be \"2.0\""),
        };
    }
    match message.id {
        Some(id) => Message::Request {
            id,
            method,
            params: message.params,
        },
        None => Message::Notification {
            method,
            params: message.params,
        },
    }
}

/// The `run` and `start` calls by request id: in flight (with who waits for the answer) or done
/// (with the answer, for repeats).
#[derive(Default)]
struct Calls {
    entries: HashMap<String, Call>,
    /// Done ids, oldest first, at most [`wire::REMEMBERED_REQUESTS`].
    done: VecDeque<String>,
}

enum Call {
    InFlight {
        /// Where to answer, and the JSON-RPC ids, of the first request and of each repeat so far.
        waiters: Vec<(Arc<dyn Sink>, Value)>,
        abort: CancellationToken,
    },
    Done(Value),
}

/// Where a task's reads through the protocol stand.
#[derive(Default)]
struct ReadState {
    /// The end of what has been answered: the next delta starts here.
    end: Offsets,
    /// The last answer and its start, answered again to a read from that start.
    last: Option<(Offsets, Read)>,
}

/// Tasks' reads remembered before those of forgotten tasks are dropped.
const READ_STATES: usize = 4096;

#[derive(Default)]
struct EventLog {
    next: u64,
    /// Sent but not acknowledged, in order.
    unacked: VecDeque<wire::Event>,
}

impl EventLog {
    /// Numbers an event and keeps it until acknowledged: at most [`wire::UNACKED_EVENTS`], the
    /// oldest dropped past it (a client that never acknowledges cannot grow the server).
    fn record(&mut self, task: Task) -> wire::Event {
        self.next += 1;
        let event = wire::Event {
            seq: self.next,
            task,
        };
        self.unacked.push_back(event.clone());
        if self.unacked.len() > wire::UNACKED_EVENTS {
            self.unacked.pop_front();
            tracing::warn!("the executor client acknowledges no events; the oldest is dropped");
        }
        event
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere leaves the tables consistent (each update is one step).
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A method's parameters, or the JSON-RPC error naming why they do not decode.
pub(crate) fn params<T: DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    serde_json::from_value(params.unwrap_or(Value::Null))
        .map_err(|err| RpcError::new(code::INVALID_PARAMS, format!("invalid params: {err}")))
}

/// One session's state, on the executor it runs its commands on.
pub(crate) struct Session {
    executor: Arc<dyn Executor>,
    calls: Mutex<Calls>,
    reads: Mutex<HashMap<String, ReadState>>,
    log: Mutex<EventLog>,
}

impl Session {
    pub(crate) fn new(executor: Arc<dyn Executor>) -> Session {
        Session {
            executor,
            calls: Mutex::new(Calls::default()),
            reads: Mutex::new(HashMap::new()),
            log: Mutex::new(EventLog::default()),
        }
    }

    pub(crate) fn executor(&self) -> &Arc<dyn Executor> {
        &self.executor
    }

    /// One of the executor's methods, answered on `to` now or, for `run` and `start`, when it
    /// ends. False when `method` is not one of them (nothing was answered).
    pub(crate) fn request(
        self: &Arc<Self>,
        to: Arc<dyn Sink>,
        id: Value,
        method: &str,
        params: Option<Value>,
    ) -> bool {
        match method {
            "run" | "start" => match self::params::<wire::StartParams>(params) {
                Ok(call) => self.clone().call(to, id, method == "run", call),
                Err(error) => answer(to.as_ref(), &id, Err(error)),
            },
            "resolve" | "read" | "kill" | "get" | "owner_of" | "list" | "events" => {
                let result = self.quick(method, params);
                answer(to.as_ref(), &id, result);
            }
            _ => return false,
        }
        true
    }

    /// A notification: answered with nothing, whatever it holds.
    pub(crate) fn notified(&self, method: &str, params: Option<Value>) {
        match method {
            "cancel" => {
                if let Ok(cancel) = self::params::<wire::CancelParams>(params)
                    && let Some(Call::InFlight { abort, .. }) =
                        lock(&self.calls).entries.get(&cancel.request_id)
                {
                    abort.cancel();
                }
            }
            "ack" => {
                if let Ok(ack) = self::params::<wire::Cursor>(params) {
                    lock(&self.log).unacked.retain(|e| e.seq > ack.cursor);
                }
            }
            other => tracing::debug!(method = other, "unknown notification ignored"),
        }
    }

    /// The operations answered at once.
    fn quick(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        let exec = &self.executor;
        Ok(match method {
            "resolve" => {
                let p: wire::ResolveParams = self::params(params)?;
                wire::to_value(Outcome::from(exec.resolve(p.request)))
            }
            "read" => return self.read(self::params(params)?),
            "kill" => {
                let p: wire::TaskParams = self::params(params)?;
                wire::to_value(Outcome::from(exec.kill(&p.task)))
            }
            "get" => {
                let p: wire::TaskParams = self::params(params)?;
                wire::to_value(Outcome::from(exec.get(&p.task)))
            }
            "owner_of" => {
                let p: wire::TaskParams = self::params(params)?;
                wire::to_value(exec.owner_of(&p.task))
            }
            "list" => wire::to_value(exec.list()),
            "events" => {
                let p: wire::Cursor = self::params(params)?;
                let mut log = lock(&self.log);
                log.unacked.retain(|e| e.seq > p.cursor);
                wire::to_value(&log.unacked)
            }
            other => {
                return Err(RpcError::new(
                    code::METHOD_NOT_FOUND,
                    format!("no method {other:?}"),
                ));
            }
        })
    }

    /// `run` or `start` under request id `call.request_id`: the first time it runs; a repeat
    /// waits for or gets the first one's answer.
    fn call(
        self: Arc<Self>,
        from: Arc<dyn Sink>,
        id: Value,
        foreground: bool,
        call: wire::StartParams,
    ) {
        let abort = CancellationToken::new();
        {
            let mut calls = lock(&self.calls);
            match calls.entries.get_mut(&call.request_id) {
                Some(Call::Done(done)) => {
                    let done = done.clone();
                    drop(calls);
                    return answer(from.as_ref(), &id, Ok(done));
                }
                Some(Call::InFlight { waiters, .. }) => return waiters.push((from, id)),
                None => {
                    calls.entries.insert(
                        call.request_id.clone(),
                        Call::InFlight {
                            waiters: vec![(from, id)],
                            abort: abort.clone(),
                        },
                    );
                }
            }
        }
        tokio::spawn(async move {
            let result = if foreground {
                wire::to_value(Outcome::from(self.executor.run(call.spec, abort).await))
            } else {
                wire::to_value(Outcome::from(self.executor.start(call.spec).await))
            };
            let waiters = {
                let mut calls = lock(&self.calls);
                let previous = calls
                    .entries
                    .insert(call.request_id.clone(), Call::Done(result.clone()));
                calls.done.push_back(call.request_id);
                while calls.done.len() > wire::REMEMBERED_REQUESTS {
                    if let Some(old) = calls.done.pop_front() {
                        calls.entries.remove(&old);
                    }
                }
                match previous {
                    Some(Call::InFlight { waiters, .. }) => waiters,
                    _ => Vec::new(),
                }
            };
            for (to, id) in waiters {
                answer(to.as_ref(), &id, Ok(result.clone()));
            }
        });
    }

    /// A read from explicit offsets: the next delta when they are the previous answer's end,
    /// that answer again when they are its start.
    fn read(&self, p: wire::ReadParams) -> Result<Value, RpcError> {
        let mut reads = lock(&self.reads);
        if !reads.contains_key(&p.task) && reads.len() >= READ_STATES {
            reads.retain(|task, _| self.executor.get(task).is_ok());
        }
        let end = reads
            .get(&p.task)
            .map(|state| state.end)
            .unwrap_or_default();
        if p.from == end {
            // An empty answer ends where it starts, so a read from its end is always the next
            // one: its denials are not delivered twice (nor again if that answer was lost).
            let read = match self.executor.read_output(&p.task) {
                Ok(read) => read,
                // An unknown or forgotten task leaves no read state behind.
                Err(err) => return Ok(wire::to_value(Outcome::<wire::ReadAnswer>::Err(err))),
            };
            let state = reads.entry(p.task.clone()).or_default();
            let to = p.from.after(&read);
            state.end = to;
            state.last = Some((p.from, read.clone()));
            return Ok(wire::to_value(Outcome::Ok(wire::ReadAnswer {
                from: p.from,
                to,
                read,
            })));
        }
        match reads.get(&p.task).and_then(|state| state.last.as_ref()) {
            Some((start, read)) if *start == p.from => {
                Ok(wire::to_value(Outcome::Ok(wire::ReadAnswer {
                    from: *start,
                    to: end,
                    read: read.clone(),
                })))
            }
            last => Err(RpcError::new(
                code::STALE_OFFSETS,
                format!(
                    "read offsets of {} ({}) are neither the previous answer's start ({}) nor \
                     its end ({end})",
                    p.task,
                    p.from,
                    last.map_or(end, |(start, _)| *start),
                ),
            )),
        }
    }

    /// Whether a `run` or `start` with this request id is in flight or remembered.
    pub(crate) fn knows(&self, request_id: &str) -> bool {
        lock(&self.calls).entries.contains_key(request_id)
    }

    /// Foreground runs in flight.
    pub(crate) fn runs_in_flight(&self) -> usize {
        lock(&self.calls)
            .entries
            .values()
            .filter(|call| matches!(call, Call::InFlight { .. }))
            .count()
    }

    /// Numbers a task-done event and keeps it until acknowledged.
    pub(crate) fn record(&self, task: Task) -> wire::Event {
        lock(&self.log).record(task)
    }

    /// Stops every foreground run in flight, as an abort stops it (a foreground run is not the
    /// executor's task, so its shutdown does not reach it).
    pub(crate) fn abort_runs(&self) {
        for call in lock(&self.calls).entries.values() {
            if let Call::InFlight { abort, .. } = call {
                abort.cancel();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(n: usize) -> Task {
        Task {
            id: format!("bash-{n}"),
            command: "true".to_string(),
            owner: None,
            state: crate::TaskState::Completed,
            exit_code: Some(0),
            signal: None,
            relocated: None,
        }
    }

    #[test]
    fn events_never_acknowledged_are_kept_up_to_the_bound_newest_first_kept() {
        let mut log = EventLog::default();
        let flood = wire::UNACKED_EVENTS + 1000;
        for n in 1..=flood {
            assert_eq!(log.record(task(n)).seq, n as u64);
            assert!(
                log.unacked.len() <= wire::UNACKED_EVENTS,
                "after {n} events"
            );
        }
        assert_eq!(log.unacked.len(), wire::UNACKED_EVENTS);
        // The newest are kept, in order.
        assert_eq!(
            log.unacked.front().map(|e| e.seq),
            Some((flood - wire::UNACKED_EVENTS + 1) as u64)
        );
        assert_eq!(log.unacked.back().map(|e| e.seq), Some(flood as u64));
    }
}
