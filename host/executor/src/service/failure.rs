//! Why a call to a far executor got no answer, and the error each operation reports for it:
//! one account for the stdio service's client and the pool's front, told in each one's words.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::wire::{self, RpcError};
use crate::ExecError;

/// Whom a failed call was for, as its errors name them.
pub(crate) trait Party {
    /// A call that was provably never acted on, by an operation that may start a command.
    fn not_started(reason: &str) -> String;
    /// The same, by an operation that starts nothing.
    fn not_reached(reason: &str) -> String;
    /// The one that runs the commands (`executor service`, `executor node`).
    const RUNNER: &'static str;
}

/// The stdio service's client.
#[derive(Debug, Clone)]
pub(crate) struct Service;

impl Party for Service {
    fn not_started(reason: &str) -> String {
        format!("the executor service is gone ({reason}); the command did not start")
    }
    fn not_reached(reason: &str) -> String {
        format!("the executor service was not reached ({reason})")
    }
    const RUNNER: &'static str = "executor service";
}

/// The pool's front.
#[derive(Debug, Clone)]
pub(crate) struct Pool;

impl Party for Pool {
    fn not_started(reason: &str) -> String {
        format!("the executor pool did not take the command ({reason}); the command did not start")
    }
    fn not_reached(reason: &str) -> String {
        format!("the executor pool was not reached ({reason})")
    }
    const RUNNER: &'static str = "executor node";
}

/// Why a call got no answer.
#[derive(Debug, Clone)]
pub(crate) enum Failure<P> {
    /// Provably never acted on: never (completely) sent, nobody was listening, or refused
    /// unstarted.
    NotSent(String),
    /// Sent, and the far side went away (or never answered) before answering.
    Lost(String),
    /// The far side answered with a protocol error, or an answer that does not decode.
    Protocol(RpcError),
    #[doc(hidden)]
    _Party(std::convert::Infallible, PhantomData<P>),
}

impl<P: Party> Failure<P> {
    /// The contract-shaped error for an operation that may start a command.
    pub(crate) fn starting(self) -> ExecError {
        let runner = P::RUNNER;
        match self {
            Failure::NotSent(reason) => ExecError::SpawnFailed(P::not_started(&reason)),
            Failure::Lost(reason) => ExecError::Internal(format!(
                "the {runner} was lost ({reason}) while the command was in flight; it may or \
                 may not have run"
            )),
            Failure::Protocol(error) => ExecError::Internal(format!(
                "the {runner} failed the call ({}); the command may or may not have run",
                error.message
            )),
            Failure::_Party(never, _) => match never {},
        }
    }

    /// The error for an operation that starts nothing.
    pub(crate) fn other(self) -> ExecError {
        let runner = P::RUNNER;
        match self {
            Failure::NotSent(reason) => ExecError::Internal(P::not_reached(&reason)),
            Failure::Lost(reason) => {
                ExecError::Internal(format!("the {runner} is gone ({reason})"))
            }
            Failure::Protocol(error) => {
                ExecError::Internal(format!("the {runner} failed the call: {}", error.message))
            }
            Failure::_Party(never, _) => match never {},
        }
    }
}

impl<P> Failure<P> {
    /// An answer's `result` as `T`, or a protocol failure saying it does not decode.
    pub(crate) fn decode<T: DeserializeOwned>(value: Value) -> Result<T, Self> {
        serde_json::from_value(value).map_err(|err| {
            Failure::Protocol(RpcError::new(
                wire::code::INVALID_PARAMS,
                format!("an answer that does not decode: {err}"),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts<P: Party>() -> Vec<String> {
        let all = || {
            [
                Failure::<P>::NotSent("r".into()),
                Failure::Lost("r".into()),
                Failure::Protocol(RpcError::new(1, "m")),
            ]
        };
        all()
            .into_iter()
            .map(Failure::starting)
            .chain(all().into_iter().map(Failure::other))
            .map(|err| format!("{err:?}"))
            .collect()
    }

    #[test]
    fn each_party_says_what_became_of_the_call_in_its_words() {
        assert_eq!(
            texts::<Service>(),
            [
                r#"SpawnFailed("the executor service is gone (r); the command did not start")"#,
                r#"Internal("the executor service was lost (r) while the command was in flight; it may or may not have run")"#,
                r#"Internal("the executor service failed the call (m); the command may or may not have run")"#,
                r#"Internal("the executor service was not reached (r)")"#,
                r#"Internal("the executor service is gone (r)")"#,
                r#"Internal("the executor service failed the call: m")"#,
            ]
        );
        assert_eq!(
            texts::<Pool>(),
            [
                r#"SpawnFailed("the executor pool did not take the command (r); the command did not start")"#,
                r#"Internal("the executor node was lost (r) while the command was in flight; it may or may not have run")"#,
                r#"Internal("the executor node failed the call (m); the command may or may not have run")"#,
                r#"Internal("the executor pool was not reached (r)")"#,
                r#"Internal("the executor node is gone (r)")"#,
                r#"Internal("the executor node failed the call: m")"#,
            ]
        );
    }
}
