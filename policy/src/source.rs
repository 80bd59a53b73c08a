//! Policy files: TOML (`[permissions]`) and JSON (the agent CLI's settings shape), each rule kept
//! with its file and line. Anything that does not read is an error naming the file and line:
//! nothing is silently dropped.

use serde::Deserialize;
use std::fmt;

use crate::rule::{self, Parsed, Pattern};
use crate::{Decision, LoadError};

/// One rule, where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub decision: Decision,
    pub pattern: Pattern,
    /// As written, e.g. `Bash(git push *)`.
    pub text: String,
    /// `FILE:LINE`.
    pub source: String,
    pub message: Option<String>,
}

/// What one file says.
#[derive(Debug, Default)]
pub(crate) struct FileRules {
    pub rules: Vec<Rule>,
    pub default: Option<(Decision, String)>,
    pub unanalysable: Option<(Decision, String)>,
    /// Rules naming other tools, skipped.
    pub skipped: usize,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

fn error(file: &str, line: Option<usize>, message: impl fmt::Display) -> LoadError {
    LoadError {
        file: file.to_string(),
        line,
        message: message.to_string(),
    }
}

fn decision(name: &str, allow_allowed: bool) -> Option<Decision> {
    match name {
        "allow" if allow_allowed => Some(Decision::Allow),
        "ask" => Some(Decision::Ask),
        "deny" => Some(Decision::Deny),
        _ => None,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    permissions: toml::Spanned<TomlPermissions>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlPermissions {
    default: Option<toml::Spanned<String>>,
    unanalysable: Option<toml::Spanned<String>>,
    #[serde(default)]
    allow: Vec<toml::Spanned<Entry>>,
    #[serde(default)]
    ask: Vec<toml::Spanned<Entry>>,
    #[serde(default)]
    deny: Vec<toml::Spanned<Entry>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Entry {
    Rule(String),
    WithMessage(RuleWithMessage),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleWithMessage {
    rule: String,
    message: Option<String>,
}

pub(crate) fn load_toml(file: &str, text: &str) -> Result<FileRules, LoadError> {
    let parsed: TomlFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start));
        error(file, line, e.message())
    })?;
    let permissions = parsed.permissions.into_inner();
    let mut out = FileRules::default();
    for (key, value, allow_allowed) in [
        ("default", &permissions.default, true),
        ("unanalysable", &permissions.unanalysable, false),
    ] {
        if let Some(value) = value {
            let line = line_of(text, value.span().start);
            let Some(d) = decision(value.get_ref(), allow_allowed) else {
                let expected = if allow_allowed {
                    "\"allow\", \"ask\" or \"deny\""
                } else {
                    "\"ask\" or \"deny\""
                };
                return Err(error(
                    file,
                    Some(line),
                    format!("{key} = {:?}: expected {expected}", value.get_ref()),
                ));
            };
            let slot = if key == "default" {
                &mut out.default
            } else {
                &mut out.unanalysable
            };
            *slot = Some((d, format!("{file}:{line}")));
        }
    }
    for (list, d) in [
        (permissions.deny, Decision::Deny),
        (permissions.ask, Decision::Ask),
        (permissions.allow, Decision::Allow),
    ] {
        for entry in list {
            let line = line_of(text, entry.span().start);
            let (text, message) = match entry.into_inner() {
                Entry::Rule(rule) => (rule, None),
                Entry::WithMessage(RuleWithMessage { rule, message }) => (rule, message),
            };
            add(&mut out, file, line, d, text, message)?;
        }
    }
    Ok(out)
}

fn add(
    out: &mut FileRules,
    file: &str,
    line: usize,
    decision: Decision,
    text: String,
    message: Option<String>,
) -> Result<(), LoadError> {
    match rule::parse(&text) {
        Ok(Parsed::Mine(pattern)) => out.rules.push(Rule {
            decision,
            pattern,
            text: text.trim().to_string(),
            source: format!("{file}:{line}"),
            message,
        }),
        Ok(Parsed::OtherTool) => out.skipped += 1,
        Err(e) => return Err(error(file, Some(line), e)),
    }
    Ok(())
}

/// Any JSON value in which no object names a key twice. A JSON parser keeps the last of two
/// `"deny"` lists and silently drops the first: a settings file that names a key twice is
/// refused instead, at the line of the second.
struct NoDuplicateKeys;

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeys {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(self)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "the key \"{key}\" appears twice in one object (which one counts would be silent)"
                )));
            }
            map.next_value::<NoDuplicateKeys>()?;
        }
        Ok(self)
    }
}

pub(crate) fn load_json(file: &str, text: &str) -> Result<FileRules, LoadError> {
    serde_json::from_str::<NoDuplicateKeys>(text).map_err(|e| error(file, Some(e.line()), e))?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| error(file, Some(e.line()), e))?;
    let Some(top) = value.as_object() else {
        return Err(error(file, Some(1), "expected a JSON object"));
    };
    let Some(permissions) = top.get("permissions") else {
        return Err(error(file, Some(1), "no \"permissions\" object"));
    };
    let Some(permissions) = permissions.as_object() else {
        return Err(error(
            file,
            find_line(text, "\"permissions\"", 0),
            "\"permissions\" must be an object",
        ));
    };
    let start = text.find("\"permissions\"").unwrap_or(0);
    let mut out = FileRules::default();
    for (key, value) in permissions {
        let key_at = text[start..]
            .find(&format!("\"{key}\""))
            .map(|i| i + start)
            .unwrap_or(start);
        let key_line = line_of(text, key_at);
        match key.as_str() {
            "allow" | "ask" | "deny" => {
                let d = decision(key, true).unwrap_or(Decision::Deny);
                let Some(items) = value.as_array() else {
                    return Err(error(
                        file,
                        Some(key_line),
                        format!("\"{key}\" must be a list of rules"),
                    ));
                };
                let mut from = key_at;
                for item in items {
                    let Some(rule) = item.as_str() else {
                        return Err(error(
                            file,
                            Some(key_line),
                            format!("\"{key}\" holds something that is not a rule string"),
                        ));
                    };
                    let quoted = serde_json::to_string(rule).unwrap_or_default();
                    let at = text[from..].find(&quoted).map(|i| i + from).unwrap_or(from);
                    from = at + quoted.len().min(text.len() - at);
                    add(&mut out, file, line_of(text, at), d, rule.to_string(), None)?;
                }
            }
            "defaultMode" => {
                let d = match value.as_str() {
                    Some("default" | "acceptEdits") => Decision::Ask,
                    Some("bypassPermissions") => Decision::Allow,
                    Some("dontAsk" | "plan") => Decision::Deny,
                    _ => {
                        return Err(error(
                            file,
                            Some(key_line),
                            format!(
                                "defaultMode {value}: expected \"default\", \"acceptEdits\", \"plan\", \"dontAsk\" or \"bypassPermissions\""
                            ),
                        ));
                    }
                };
                out.default = Some((d, format!("{file}:{key_line}")));
            }
            // The CLI's own keys, about its other tools and its file access.
            "additionalDirectories" | "disableBypassPermissionsMode" => {}
            other => {
                return Err(error(
                    file,
                    Some(key_line),
                    format!("unknown key \"{other}\" in \"permissions\""),
                ));
            }
        }
    }
    Ok(out)
}

fn find_line(text: &str, needle: &str, from: usize) -> Option<usize> {
    text[from..].find(needle).map(|i| line_of(text, i + from))
}
