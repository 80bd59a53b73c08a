//! From a verdict to what a host does with it: the question put to a person, and the refusal a
//! command gets when it is denied or not approved.
//!
//! `dsh-host` and the policy middleware component both go through these functions, so that a
//! command asked or refused by one is asked or refused, with the same words, by the other.

use crate::{Cause, Finding};

/// What a person is asked about a command that needs approval.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// The whole command, every line of it.
    pub command: String,
    /// Where it would run.
    pub cwd: String,
    /// The parts of it that need approval.
    pub parts: Vec<String>,
    /// The rule that asked (`Bash(git push *)`), none for the policy's default or a part that
    /// cannot be analysed.
    pub rule: Option<String>,
    /// Where that rule or default is set (`FILE:LINE`).
    pub source: Option<String>,
    /// Why it cannot be analysed, if that is why.
    pub construct: Option<String>,
    /// What approving it "for this session" grants; none when only "once" is possible.
    pub session_rule: Option<String>,
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Run it, this once.
    Once,
    /// Run it, and allow [`Question::session_rule`] for the rest of the session.
    Session,
    /// Do not run it.
    Declined,
    /// No answer in time.
    TimedOut,
    /// Nobody can be asked (the client cannot show a question).
    CannotAsk,
}

/// Why a command did not run. Mirrors the WIT `refusal-kind` enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedKind {
    Denied,
    Declined,
    TimedOut,
    CannotAsk,
    NotAnalysable,
}

/// A refusal, in the fields of the WIT `policy-refusal` record (less `waited-ms`, which only the
/// host that waited knows).
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub kind: RefusedKind,
    pub part: String,
    pub rule: Option<String>,
    pub source: Option<String>,
    pub message: Option<String>,
    pub allow_rule: Option<String>,
}

/// The question for an ask `finding` about `command`, run in `cwd`.
pub fn question(finding: &Finding, command: &str, cwd: &str) -> Question {
    let (rule, source, construct) = match &finding.cause {
        Cause::Rule { rule, source, .. } => (Some(rule.clone()), Some(source.clone()), None),
        Cause::Default { source } => (None, Some(source.clone()), None),
        Cause::Unanalysable { construct } => (None, None, Some(visible(construct))),
    };
    Question {
        command: command.to_string(),
        cwd: cwd.to_string(),
        parts: finding.pending.clone(),
        rule,
        source,
        construct,
        session_rule: finding.session_rule.clone(),
    }
}

/// The refusal of a finding: denied (or not analysable) when nobody was asked (`answer` none),
/// else as answered. `Once` and `Session` are not refusals; given one, the refusal reads as
/// declined, so that no mistake of a caller lets a command through.
pub fn refusal(finding: Finding, answer: Option<Answer>) -> Refused {
    let (kind, rule, source, message) = match finding.cause {
        Cause::Rule {
            rule,
            source,
            message,
        } => (RefusedKind::Denied, Some(rule), Some(source), message),
        Cause::Default { source } => (RefusedKind::Denied, None, Some(source), None),
        // A construct may quote the command's own words.
        Cause::Unanalysable { construct } => (
            RefusedKind::NotAnalysable,
            None,
            None,
            Some(visible(&construct)),
        ),
    };
    let kind = match answer {
        None => kind,
        Some(Answer::Declined | Answer::Once | Answer::Session) => RefusedKind::Declined,
        Some(Answer::TimedOut) => RefusedKind::TimedOut,
        Some(Answer::CannotAsk) => RefusedKind::CannotAsk,
    };
    let asked = answer.is_some();
    Refused {
        kind,
        part: finding.part,
        // An ask rule's message is for the person asked; the model gets the rule and its line.
        message: if asked && rule.is_some() {
            None
        } else {
            message
        },
        rule,
        source,
        allow_rule: if kind == RefusedKind::CannotAsk {
            finding.allow_rule
        } else {
            None
        },
    }
}

/// `text` as a person or a model may safely read it: line breaks, tabs and other control
/// characters (a carriage return redraws a terminal's line), and the invisible characters that
/// reorder or hide text (bidirectional overrides and isolates, zero-width characters, the byte
/// order mark, the soft hyphen), written as escapes, so that what is shown is what runs.
pub fn visible(text: &str) -> String {
    // Printable ASCII and spaces, most text, are shown as they are.
    if text.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{3164}'
            | '\u{ffa0}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{e0000}'..='\u{e007f}'
            | '\u{e0100}'..='\u{e01ef}'
            | '\u{feff}' => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::visible;

    #[test]
    fn hidden_and_reordering_characters_are_shown_as_escapes() {
        assert_eq!(visible("ls\rrm -rf ~"), "ls\\rrm -rf ~");
        assert_eq!(visible("echo \u{202e}fr- mr"), "echo \\u{202e}fr- mr");
        assert_eq!(visible("r\u{200b}m"), "r\\u{200b}m");
        assert_eq!(visible("a\nb\tc\u{1b}[2J"), "a\\nb\\tc\\x1b[2J");
        assert_eq!(visible("git push \u{e9}t\u{e9}"), "git push \u{e9}t\u{e9}");
        assert_eq!(visible("a\u{2028}b\u{e0041}"), "a\\u{2028}b\\u{e0041}");
    }
}
