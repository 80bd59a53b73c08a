//! Permission questions for requests of revision 2026-07-28, which has no server-to-client
//! requests: the multi round-trip pattern.
//!
//! A call that needs approval is answered with an input-required result instead of running: the
//! question (the same `elicitation/create` form [`super::elicit`] sends) under [`KEY`], and a
//! `requestState`. The client asks the person and calls again with the same arguments, the
//! answer under [`KEY`] and the state; only then can the command run.
//!
//! The state is the client's to carry, never to make: it is sealed with a key of this process
//! (HMAC-SHA256) to the session, the tool and a digest of its arguments, expires with the ask
//! timeout, and names a question the session holds pending, which the first call presenting it
//! consumes. So a state altered or forged, presented by another session or with other arguments,
//! or presented a second time, is refused with an error and runs nothing; an authentic state
//! presented after its expiry refuses the command as timed out. The model has no part in this:
//! the question and the answer travel in the protocol's own fields, never in tool arguments.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, ElicitRequest, ElicitResult, InputRequest, InputRequiredResult,
    RequestStateCodec, RequestStateError, SealOptions,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::lock;
use crate::policy::{Answer, Question};

/// The key of the question in `inputRequests`, and of its answer in `inputResponses`.
pub(super) const KEY: &str = "dsh-permission";

/// Questions one session may hold pending at once; beyond, the oldest is dropped (its state is
/// then refused as used).
const MAX_PENDING: usize = 64;

/// How much longer than its state a pending question is kept, so that an authentic state is
/// never found missing before it expires.
const PENDING_SLACK: Duration = Duration::from_secs(5);

tokio::task_local! {
    /// The round of the request being served, for the session's approver.
    static ROUND: Arc<Round>;
}

/// One request's round: the answer it carries, and the question it could not answer.
pub(super) struct Round {
    /// Whether the request's client declared form elicitation.
    can_ask: bool,
    answer: Mutex<Option<Given>>,
    asked: Mutex<Option<(Question, Duration)>>,
}

/// A person's answer, and the command it answers.
struct Given {
    /// `(command, cwd)`; `None` for any question of the call (an expired state, which is bound
    /// to these arguments, refuses whatever they would ask).
    to: Option<(String, String)>,
    answer: Answer,
}

/// What the session's approver answers within a round (`None` outside one): the round's answer
/// where it answers this question, once; else the question is kept for the input-required
/// result, and the "cannot ask" returned here is never shown (the call's result is replaced).
pub(super) fn in_round(question: &Question, timeout: Duration) -> Option<Answer> {
    ROUND.try_with(|round| round.answer(question, timeout)).ok()
}

impl Round {
    fn new(can_ask: bool, given: Option<Given>) -> Arc<Round> {
        Arc::new(Round {
            can_ask,
            answer: Mutex::new(given),
            asked: Mutex::new(None),
        })
    }

    fn answer(&self, question: &Question, timeout: Duration) -> Answer {
        if !self.can_ask || super::elicit::form(question).is_none() {
            return Answer::CannotAsk;
        }
        let mut given = lock(&self.answer);
        let answers = given.as_ref().is_some_and(|g| {
            g.to.as_ref()
                .is_none_or(|(command, cwd)| *command == question.command && *cwd == question.cwd)
        });
        if answers && let Some(g) = given.take() {
            return g.answer;
        }
        *lock(&self.asked) = Some((question.clone(), timeout));
        Answer::CannotAsk
    }

    /// Run `call` within this round.
    pub(super) async fn run<F: Future>(self: &Arc<Self>, call: F) -> F::Output {
        ROUND.scope(self.clone(), call).await
    }

    /// The question the call needed answered, and the time the person is given.
    pub(super) fn asked(&self) -> Option<(Question, Duration)> {
        lock(&self.asked).take()
    }
}

/// The questions one session holds pending.
#[derive(Default)]
pub(super) struct Rounds {
    pending: Mutex<Vec<Pending>>,
}

struct Pending {
    nonce: String,
    command: String,
    cwd: String,
    session_offered: bool,
    until: Instant,
}

impl Rounds {
    /// The round of a request of `owner`'s session: a first one, or one carrying the answer to
    /// the question its state names. `arguments` is the call's arguments object as JSON.
    pub(super) fn begin(
        &self,
        owner: &str,
        request: &CallToolRequestParams,
        arguments: &str,
        can_ask: bool,
    ) -> Result<Arc<Round>, McpError> {
        let Some(state) = &request.request_state else {
            if request.input_responses.is_some() {
                return Err(refused(
                    "inputResponses without the requestState of the result that asked",
                ));
            }
            return Ok(Round::new(can_ask, None));
        };
        let binding = binding(owner, &request.name, arguments);
        let nonce = match codec()?.open_with(state, &binding) {
            Ok(nonce) => nonce,
            Err(RequestStateError::Expired) => {
                let given = Given {
                    to: None,
                    answer: Answer::TimedOut,
                };
                return Ok(Round::new(can_ask, Some(given)));
            }
            Err(e) => {
                return Err(refused(&format!(
                    "the requestState does not verify ({e}): it was altered, or issued to \
                     another session or for other arguments"
                )));
            }
        };
        let response = request
            .input_responses
            .as_ref()
            .and_then(|responses| responses.get(KEY))
            .ok_or_else(|| refused(&format!("inputResponses holds no answer under \"{KEY}\"")))?;
        let result: ElicitResult = serde_json::from_value(response.clone()).map_err(|e| {
            refused(&format!(
                "the answer under \"{KEY}\" is not an elicitation result: {e}"
            ))
        })?;
        let nonce = String::from_utf8_lossy(&nonce);
        let pending = self
            .take(&nonce)
            .ok_or_else(|| refused("the requestState was already used"))?;
        let given = Given {
            answer: super::elicit::answer(&result, pending.session_offered),
            to: Some((pending.command, pending.cwd)),
        };
        Ok(Round::new(can_ask, Some(given)))
    }

    /// The input-required result that puts `question` to the person behind `owner`'s session,
    /// for a call of tool `name` with `arguments`; the person has `timeout` to answer.
    pub(super) fn input_required(
        &self,
        owner: &str,
        name: &str,
        arguments: &str,
        question: Question,
        timeout: Duration,
    ) -> Result<InputRequiredResult, McpError> {
        let codec = codec()?;
        let params = super::elicit::form(&question)
            .ok_or_else(|| McpError::internal_error("the question cannot be written", None))?;
        let nonce = dsh_executor::hex::random_token(16).map_err(|e| {
            McpError::internal_error(format!("no randomness for the request state: {e}"), None)
        })?;
        {
            let mut pending = lock(&self.pending);
            let now = Instant::now();
            pending.retain(|p| p.until > now);
            if pending.len() >= MAX_PENDING {
                pending.remove(0);
            }
            pending.push(Pending {
                nonce: nonce.clone(),
                session_offered: question.session_rule.is_some(),
                command: question.command,
                cwd: question.cwd,
                until: now + timeout + PENDING_SLACK,
            });
        }
        let state = codec.seal_with(
            nonce.as_bytes(),
            &SealOptions::new()
                .associated_data(&binding(owner, name, arguments))
                .ttl(timeout),
        );
        let requests = BTreeMap::from([(
            KEY.to_string(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        )]);
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// The pending question `nonce` names, taken: a state is good for one call.
    fn take(&self, nonce: &str) -> Option<Pending> {
        let mut pending = lock(&self.pending);
        let found = pending.iter().position(|p| p.nonce == nonce)?;
        Some(pending.remove(found))
    }
}

/// What a state is sealed to: the session's owner token, the tool, and a digest of the
/// arguments with their keys in order (so that a client re-encoding the same object matches).
fn binding(owner: &str, name: &str, arguments: &str) -> Vec<u8> {
    let canonical = serde_json::from_str::<Value>(arguments)
        .map(|mut v| {
            v.sort_all_objects();
            v.to_string()
        })
        .unwrap_or_else(|_| arguments.to_string());
    let mut out = Vec::with_capacity(owner.len() + name.len() + 34);
    out.extend_from_slice(owner.as_bytes());
    out.push(0);
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    out.extend_from_slice(&Sha256::digest(canonical.as_bytes()));
    out
}

/// The sealing key, made once per process: a state outlives neither the process nor its session.
fn codec() -> Result<&'static RequestStateCodec, McpError> {
    static CODEC: OnceLock<Result<RequestStateCodec, String>> = OnceLock::new();
    CODEC
        .get_or_init(|| {
            let mut key = [0u8; 32];
            getrandom::fill(&mut key).map_err(|e| e.to_string())?;
            RequestStateCodec::try_new(key.to_vec()).map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| McpError::internal_error(format!("no request-state key: {e}"), None))
}

/// The error of a retry whose state or answer cannot be used: nothing ran.
fn refused(why: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "{why}; nothing was run. Call the tool again without requestState to be asked anew."
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same object with its keys in another order binds the same; other values do not.
    #[test]
    fn the_binding_reads_the_arguments_not_their_encoding() {
        let a = binding("o", "bash", r#"{"command":"ls","description":"d"}"#);
        let b = binding("o", "bash", r#"{ "description": "d", "command": "ls" }"#);
        assert_eq!(a, b);
        assert_ne!(
            a,
            binding("o", "bash", r#"{"command":"ls ","description":"d"}"#)
        );
        assert_ne!(
            a,
            binding("p", "bash", r#"{"command":"ls","description":"d"}"#)
        );
        assert_ne!(
            a,
            binding("o", "bash_kill", r#"{"command":"ls","description":"d"}"#)
        );
    }
}
