//! Permission questions put to the person behind an MCP session, as `elicitation/create`.
//!
//! The question shows the whole command (every line), its working directory, the parts that
//! need approval and the rule that asked; the answer is one choice: allow once, allow for this
//! session (the normalised rule it grants is named), or deny. A client that did not declare the
//! elicitation capability cannot be asked: the command is refused as such. A request of a
//! revision that forbids server-to-client requests (2026-07-28) gets the same form in its result
//! instead ([`super::input_required`]). Declining, cancelling, an answer that is not
//! one of the choices, and no answer in time all refuse it.

use std::time::Duration;

use dsh_executor::BoxFuture;
use rmcp::model::{
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, EnumSchema,
};
use rmcp::service::{ElicitationMode, Peer, RoleServer, ServiceError};

use crate::policy::{Answer, Approver, Question};
use dsh_policy::decide::visible;

/// The property of the answer, and its values.
const CHOICE: &str = "decision";
const ONCE: &str = "allow_once";
const SESSION: &str = "allow_for_session";
const DENY: &str = "deny";

/// Asks through one session's client.
pub(super) struct Elicitation {
    peer: Peer<RoleServer>,
}

impl Elicitation {
    pub(super) fn new(peer: Peer<RoleServer>) -> Self {
        Self { peer }
    }
}

impl Approver for Elicitation {
    fn ask(&self, question: Question, timeout: Duration) -> BoxFuture<'static, Answer> {
        // A request of revision 2026-07-28 is answered from its own round, never by a request
        // to the client.
        if let Some(answer) = super::input_required::in_round(&question, timeout) {
            return Box::pin(std::future::ready(answer));
        }
        let peer = self.peer.clone();
        Box::pin(async move {
            if !peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form)
            {
                return Answer::CannotAsk;
            }
            let Some(params) = form(&question) else {
                return Answer::CannotAsk;
            };
            match peer
                .create_elicitation_with_timeout(params, Some(timeout))
                .await
            {
                Ok(result) => answer(&result, question.session_rule.is_some()),
                Err(ServiceError::Timeout { .. }) => Answer::TimedOut,
                Err(e) => {
                    tracing::warn!("the permission question could not be asked: {e}");
                    Answer::CannotAsk
                }
            }
        })
    }
}

/// The form that puts `question` to the person; none where it cannot be written as one.
pub(super) fn form(question: &Question) -> Option<ElicitRequestParams> {
    Some(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(question),
        requested_schema: schema(question)?,
    })
}

/// What the person's answer to [`form`] comes to: only an accepted choice that was offered
/// approves (`session_offered`: the question offered "for this session").
pub(super) fn answer(result: &ElicitResult, session_offered: bool) -> Answer {
    match result.action {
        ElicitationAction::Accept => match result
            .content
            .as_ref()
            .and_then(|c| c.get(CHOICE))
            .and_then(|v| v.as_str())
        {
            Some(ONCE) => Answer::Once,
            Some(SESSION) if session_offered => Answer::Session,
            _ => Answer::Declined,
        },
        // Decline, cancel, and anything a later revision adds.
        _ => Answer::Declined,
    }
}

/// What the person reads.
fn message(q: &Question) -> String {
    let mut out = String::from("A command needs your approval before it runs.\n\nCommand:\n");
    // Line by line, each shown with its hidden characters escaped (a carriage return or a
    // bidirectional override would make the person read another command than the one that runs).
    for line in q.command.split('\n') {
        out.push_str("    ");
        out.push_str(&visible(line));
        out.push('\n');
    }
    out.push_str(&format!("\nWorking directory: {}\n", visible(&q.cwd)));
    if !q.parts.is_empty() {
        out.push_str("\nNeeds approval:\n");
        for part in &q.parts {
            out.push_str(&format!("    {part}\n"));
        }
    }
    let why = match (&q.rule, &q.source, &q.construct) {
        (Some(rule), Some(source), _) => format!("ask rule {rule} ({source})"),
        (_, _, Some(construct)) => format!("it cannot be analysed: {construct}"),
        (None, Some(source), _) => format!("no rule allows it; the default is to ask ({source})"),
        _ => "the permission rules".to_string(),
    };
    out.push_str(&format!("\nAsked because of: {why}\n"));
    out
}

/// One required choice; "for this session" only where a grant can be made.
fn schema(q: &Question) -> Option<ElicitationSchema> {
    let mut values = vec![ONCE.to_string()];
    let mut titles = vec!["Allow once".to_string()];
    if let Some(rule) = &q.session_rule {
        values.push(SESSION.to_string());
        titles.push(format!("Allow {rule} for the rest of this session"));
    }
    values.push(DENY.to_string());
    titles.push("Deny".to_string());
    let choice: EnumSchema = EnumSchema::builder(values)
        .enum_titles(titles)
        .ok()?
        .title("Decision")
        .build();
    ElicitationSchema::builder()
        .required_enum_schema(CHOICE, choice)
        .title("Permission")
        .build()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The person reads the command that runs: a carriage return cannot redraw the line, a
    /// bidirectional override cannot reverse it, and every line is shown.
    #[test]
    fn the_message_shows_hidden_characters_and_every_line() {
        let q = Question {
            command: "ls\rrm -rf ~ # \u{202e}sl\nsecond line\r\n".into(),
            cwd: "/work".into(),
            parts: vec!["rm -rf ~".into()],
            rule: Some("Bash(rm *)".into()),
            source: Some("p.toml:3".into()),
            construct: None,
            session_rule: None,
        };
        let m = message(&q);
        assert!(
            m.contains("    ls\\rrm -rf ~ # \\u{202e}sl\n    second line\\r\n"),
            "{m}"
        );
        assert!(!m.contains('\r') && !m.contains('\u{202e}'), "{m}");
    }
}
