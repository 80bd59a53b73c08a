//! The `[policy: …]` line: a command the host's permission rules kept from running, worded for
//! the model from the facts the host gave (README, contract extension). The line says what was
//! refused, by which rule in which file, why, and that nothing ran, so that the model neither
//! retries the command in another form nor takes a refusal for a failure of the command.

use crate::world::{Refusal, RefusalKind};

/// The whole text of the result of a refused command.
pub fn line(r: &Refusal) -> String {
    let part = format!("`{}`", one_line(&r.part));
    let source = r.source.as_deref().map(one_line).unwrap_or_default();
    let rule = r.rule.as_deref().map(one_line);
    let dont_retry = "The command did not run; do not retry it in another form.";
    match r.kind {
        RefusalKind::Denied => match rule {
            Some(rule) => {
                let message = r
                    .message
                    .as_deref()
                    .map(|m| format!(": {}", one_line(m)))
                    .unwrap_or_default();
                format!(
                    "[policy: denied — {part} matches deny rule {rule} ({source}){message}. {dont_retry}]"
                )
            }
            None => format!(
                "[policy: denied — {part} matches no allow rule and the default verdict is deny ({source}). {dont_retry}]"
            ),
        },
        RefusalKind::Declined => format!(
            "[policy: declined by the user — {part} ({}). {dont_retry}]",
            asked_by(rule.as_deref(), &source, r.message.as_deref())
        ),
        RefusalKind::TimedOut => format!(
            "[policy: not approved in time — {part} ({}) got no answer within {} s. The command did not run.]",
            asked_by(rule.as_deref(), &source, r.message.as_deref()),
            seconds(r.waited_ms.unwrap_or_default())
        ),
        RefusalKind::CannotAsk => {
            let why = match (&rule, &r.message) {
                (Some(rule), _) => format!("matches ask rule {rule} ({source})"),
                (None, Some(construct)) => format!("cannot be analysed ({})", one_line(construct)),
                (None, None) => {
                    format!("matches no allow rule and the default verdict is ask ({source})")
                }
            };
            let allow = r
                .allow_rule
                .as_deref()
                .map(|a| format!(" An operator can allow it with the rule {}.", one_line(a)))
                .unwrap_or_default();
            format!(
                "[policy: needs approval — {part} {why}, and this client cannot ask the user. The command did not run.{allow}]"
            )
        }
        RefusalKind::NotAnalysable => format!(
            "[policy: not analysable — {part}: {}. The command did not run; write it with literal command names and no code expanded at run time.]",
            one_line(
                r.message
                    .as_deref()
                    .unwrap_or("a construct the rules cannot see through")
            )
        ),
    }
}

/// `50`, `1.5`: whole seconds without a fraction, else to a tenth.
fn seconds(ms: u32) -> String {
    if ms.is_multiple_of(1000) {
        (ms / 1000).to_string()
    } else {
        format!("{:.1}", f64::from(ms) / 1000.0)
    }
}

/// Why it was asked: a rule, a part that cannot be analysed, or the default.
fn asked_by(rule: Option<&str>, source: &str, construct: Option<&str>) -> String {
    match (rule, construct) {
        (Some(rule), _) => format!("ask rule {rule}, {source}"),
        (None, Some(construct)) => format!("it cannot be analysed: {}", one_line(construct)),
        (None, None) => format!("the default verdict, {source}"),
    }
}

/// Control characters escaped, so that the line stays one line.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(kind: RefusalKind) -> Refusal {
        Refusal {
            kind,
            part: "git push --force origin main".into(),
            rule: Some("Bash(git push --force *)".into()),
            source: Some("policy.toml:12".into()),
            message: Some("force-pushing rewrites shared history".into()),
            allow_rule: None,
            waited_ms: None,
        }
    }

    #[test]
    fn each_kind_has_its_own_wording() {
        assert_eq!(
            line(&refusal(RefusalKind::Denied)),
            "[policy: denied — `git push --force origin main` matches deny rule Bash(git push --force *) (policy.toml:12): force-pushing rewrites shared history. The command did not run; do not retry it in another form.]"
        );
        let mut ask = refusal(RefusalKind::CannotAsk);
        ask.rule = Some("Bash(git push *)".into());
        ask.message = None;
        ask.allow_rule = Some("Bash(git push --force origin main)".into());
        assert_eq!(
            line(&ask),
            "[policy: needs approval — `git push --force origin main` matches ask rule Bash(git push *) (policy.toml:12), and this client cannot ask the user. The command did not run. An operator can allow it with the rule Bash(git push --force origin main).]"
        );
        let declined = line(&refusal(RefusalKind::Declined));
        assert!(
            declined.starts_with("[policy: declined by the user — `git push"),
            "{declined}"
        );
        let mut timed = refusal(RefusalKind::TimedOut);
        timed.waited_ms = Some(50_000);
        assert!(
            line(&timed).contains("got no answer within 50 s."),
            "{}",
            line(&timed)
        );
        timed.waited_ms = Some(1_500);
        assert!(
            line(&timed).contains("got no answer within 1.5 s."),
            "{}",
            line(&timed)
        );
        let declined_unanalysable = Refusal {
            kind: RefusalKind::Declined,
            part: "$x".into(),
            rule: None,
            source: None,
            message: Some("a command name expanded at run time".into()),
            allow_rule: None,
            waited_ms: None,
        };
        assert_eq!(
            line(&declined_unanalysable),
            "[policy: declined by the user — `$x` (it cannot be analysed: a command name expanded at run time). The command did not run; do not retry it in another form.]"
        );
        let unanalysable = Refusal {
            kind: RefusalKind::NotAnalysable,
            part: "$cmd -rf x\n".into(),
            rule: None,
            source: None,
            message: Some("a command name expanded at run time".into()),
            allow_rule: None,
            waited_ms: None,
        };
        assert_eq!(
            line(&unanalysable),
            "[policy: not analysable — `$cmd -rf x\\n`: a command name expanded at run time. The command did not run; write it with literal command names and no code expanded at run time.]"
        );
    }
}
