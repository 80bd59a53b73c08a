//! Permission rules for the bash tools: allow, ask or deny a command before it runs.
//!
//! The command is parsed as bash parses it (`brush-parser`), and every simple command bash would
//! run, wherever it sits, is checked ([`segments`]), with the commands behind wrappers and the
//! code given to shells ([`wrappers`]). What cannot be analysed is asked or denied, never
//! allowed. The strictest verdict of all segments wins: deny > ask > allow. `SEMANTICS.md`
//! states the rules in full.
//!
//! The crate is pure: no files, processes or clocks, so that the host and a middleware
//! component (`wasm32`) decide alike. Callers read the files and pass their text.

mod comsub;
pub mod decide;
mod fast;
mod rule;
mod segments;
mod source;
mod words;
mod wrappers;

use std::borrow::Cow;
use std::fmt;

use rule::{Pattern, Token};
use segments::{Kind, Segment, Word};
use source::Rule;

/// A verdict, ordered from the loosest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

impl Decision {
    pub fn name(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

/// A policy file that could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for LoadError {}

/// The rules of every policy file, merged.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    /// The `Bash` rules that may match a command by its name (indices into `rules`, in file
    /// order): those that start with the name and those in `wild`, which start with a wildcard
    /// or a flag and may match any command.
    by_name: std::collections::HashMap<String, Vec<usize>>,
    wild: Vec<usize>,
    default: (Decision, String),
    unanalysable: (Decision, String),
    skipped: usize,
}

/// One call to decide on.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub command: &'a str,
    /// The working directory the command runs in (relative `Write` globs and targets).
    pub cwd: &'a str,
    /// The home directory (`~/` in `Write` globs and targets).
    pub home: Option<&'a str>,
}

/// Why a segment got its verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Cause {
    /// A rule matched.
    Rule {
        rule: String,
        source: String,
        message: Option<String>,
    },
    /// No rule matched: the policy's default (`source` names where it is set).
    Default { source: String },
    /// The engine cannot tell what would run.
    Unanalysable { construct: String },
}

/// The segment a verdict is about.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The segment's source text (a command, or a written file's name).
    pub part: String,
    pub cause: Cause,
    /// For ask: the rule line that would allow exactly this segment, when one can.
    pub allow_rule: Option<String>,
    /// For ask: what approving it "for this session" grants (a normalised prefix rule).
    pub session_rule: Option<String>,
    /// Every segment that needs approval (ask), in source order.
    pub pending: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Allow,
    Ask(Finding),
    Deny(Finding),
}

/// Allow rules granted for one session by a person ("for this session").
#[derive(Debug, Clone, Default)]
pub struct Grants {
    rules: Vec<(String, Vec<Token>)>,
}

impl Grants {
    /// Add a grant (`Bash(git push *)`); an error for a rule that does not parse.
    pub fn add(&mut self, rule: &str) -> Result<(), String> {
        match rule::parse(rule) {
            Ok(rule::Parsed::Mine(Pattern::Command(tokens))) => {
                if !self.rules.iter().any(|(r, _)| r == rule) {
                    self.rules.push((rule.to_string(), tokens));
                }
                Ok(())
            }
            Ok(_) => Err(format!("{rule:?} is not a Bash(…) rule")),
            Err(e) => Err(e.0),
        }
    }

    pub fn rules(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().map(|(r, _)| r.as_str())
    }
}

const BUILTIN: &str = "the built-in default";

/// The shell's own glue, allowed when no rule says otherwise.
const GLUE: &[&str] = &[
    "cd", "pushd", "popd", "dirs", "pwd", "true", "false", ":", "echo", "printf", "test", "[",
    "exit", "return", "shift", "set", "unset", "wait", "break", "continue", "read", "local",
    "export", "declare", "typeset", "readonly",
];

impl Policy {
    /// Read the policy files given as `(name, text)`; the name's extension picks the format
    /// (`.json` is the agent CLI's settings shape, anything else TOML).
    pub fn from_sources(sources: &[(String, String)]) -> Result<Policy, LoadError> {
        let mut policy = Policy {
            rules: Vec::new(),
            by_name: Default::default(),
            wild: Vec::new(),
            default: (Decision::Ask, BUILTIN.to_string()),
            unanalysable: (Decision::Ask, BUILTIN.to_string()),
            skipped: 0,
        };
        let mut default_set = false;
        for (name, text) in sources {
            let file = if name.ends_with(".json") {
                source::load_json(name, text)?
            } else {
                source::load_toml(name, text)?
            };
            policy.rules.extend(file.rules);
            policy.skipped += file.skipped;
            if let Some(d) = file.default {
                // The first file to set it sets it; later ones only make it stricter.
                if !default_set || d.0 > policy.default.0 {
                    policy.default = d;
                }
                default_set = true;
            }
            if let Some(u) = file.unanalysable
                && u.0 >= policy.unanalysable.0
            {
                policy.unanalysable = u;
            }
        }
        if policy.default.0 > policy.unanalysable.0 {
            policy.unanalysable = policy.default.clone();
        }
        for (i, rule) in policy.rules.iter().enumerate() {
            match &rule.pattern {
                Pattern::Command(tokens) => match tokens.first() {
                    Some(Token::Word(name)) if !name.starts_with('-') => {
                        policy.by_name.entry(name.clone()).or_default().push(i)
                    }
                    _ => policy.wild.push(i),
                },
                Pattern::Write(_) => {}
            }
        }
        // Merged once here rather than on every segment checked.
        for indices in policy.by_name.values_mut() {
            indices.extend(&policy.wild);
            indices.sort_unstable();
        }
        Ok(policy)
    }

    /// The `Bash` rules that may match a command named `name`, in file order.
    fn command_rules<'a>(&'a self, name: Option<&str>) -> impl Iterator<Item = &'a Rule> + Clone {
        let indices = name.and_then(|n| self.by_name.get(n)).unwrap_or(&self.wild);
        indices.iter().map(|&i| &self.rules[i])
    }

    /// Rules naming other tools of the agent CLI, skipped.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// How many rules apply.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// The verdict for unmatched commands and where it is set.
    pub fn default_verdict(&self) -> (Decision, &str) {
        (self.default.0, &self.default.1)
    }

    /// Decide on `call`.
    pub fn evaluate(&self, call: &Call, grants: &Grants) -> Verdict {
        self.evaluate_with(call, grants, true)
    }

    /// [`Policy::evaluate`] with every command read by the parser, never the fast path: for the
    /// test that checks the two against each other.
    #[doc(hidden)]
    pub fn evaluate_by_parser(&self, call: &Call, grants: &Grants) -> Verdict {
        self.evaluate_with(call, grants, false)
    }

    fn evaluate_with(&self, call: &Call, grants: &Grants, fast: bool) -> Verdict {
        let control = |c: char| (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}';
        // Printable ASCII, line breaks and tabs, most commands, hold no control character:
        // known without decoding characters.
        let plain = call
            .command
            .bytes()
            .all(|b| matches!(b, b' '..=b'~' | b'\n' | b'\t'));
        let first_control = if plain {
            None
        } else {
            call.command.chars().find(|c| control(*c))
        };
        let mut segments = if let Some(c) = first_control {
            // Unanalysable; still read (the character as a blank) for deny and ask rules.
            let blanked: String = call
                .command
                .chars()
                .map(|c| if control(c) { ' ' } else { c })
                .collect();
            let mut segments = segments::collect(&blanked, true, fast);
            segments.push(unanalysable_whole(
                call.command,
                format!(
                    "a control character ({}) in the command",
                    c.escape_unicode()
                ),
            ));
            segments
        } else {
            segments::collect(call.command, false, fast)
        };
        if segments.len() > segments::MAX_SEGMENTS {
            let count = segments.len();
            segments.push(unanalysable_whole(
                call.command,
                format!("more than {} commands ({count})", segments::MAX_SEGMENTS),
            ));
        }
        // After a `cd`, a relative path written to is relative to a directory not known here.
        let moves = segments.iter().any(|s| {
            matches!(&s.kind, Kind::Command { words, .. }
                if words.first().is_some_and(|w| matches!(w.text.as_str(), "cd" | "pushd" | "popd")))
        });
        let call = &Call {
            cwd: if moves || !call.cwd.starts_with('/') {
                ""
            } else {
                call.cwd
            },
            ..*call
        };
        let mut worst: Option<(Decision, u8, Finding, &Segment)> = None;
        let mut pending = Vec::with_capacity(segments.len());
        for segment in &segments {
            let (decision, finding) = self.segment(segment, call, grants);
            if decision == Decision::Allow {
                continue;
            }
            if decision == Decision::Ask {
                pending.push(finding.part.clone());
            }
            // Among equal verdicts, a rule's reason names the most, then the earliest.
            let rank = match finding.cause {
                Cause::Rule { .. } => 2,
                Cause::Unanalysable { .. } => 1,
                Cause::Default { .. } => 0,
            };
            let better = match &worst {
                None => true,
                Some((d, r, _, _)) => decision > *d || (decision == *d && rank > *r),
            };
            if better {
                worst = Some((decision, rank, finding, segment));
            }
        }
        let Some((decision, _, mut finding, segment)) = worst else {
            return Verdict::Allow;
        };
        // The rules that would allow a segment are written out only for the one reported.
        if matches!(finding.cause, Cause::Default { .. }) {
            (finding.allow_rule, finding.session_rule) = self.allow_rules(segment, call);
        }
        if decision == Decision::Deny {
            Verdict::Deny(finding)
        } else {
            finding.pending = pending;
            Verdict::Ask(finding)
        }
    }

    /// For a segment no rule matched: the rule line that would allow exactly it, and what
    /// approving it "for this session" would grant, where there are such.
    fn allow_rules(&self, segment: &Segment, call: &Call) -> (Option<String>, Option<String>) {
        match &segment.kind {
            Kind::Command { words, assigns, .. } => {
                let env_clean = !assigns.iter().any(|a| changes_what_runs(a));
                if self.default.0 == Decision::Ask
                    && env_clean
                    && !words.is_empty()
                    && !words.iter().any(|w| w.dynamic)
                {
                    let texts: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
                    (Some(exact_rule(&texts)), Some(session_rule(&texts)))
                } else {
                    (None, None)
                }
            }
            Kind::Write { target, .. } => (
                target
                    .as_deref()
                    .and_then(|t| resolve(t, call))
                    .map(|path| format!("Write({path})")),
                None,
            ),
        }
    }

    fn segment(&self, segment: &Segment, call: &Call, grants: &Grants) -> (Decision, Finding) {
        let finding = |cause: Cause| Finding {
            part: escape(&segment.text),
            cause,
            allow_rule: None,
            session_rule: None,
            pending: Vec::new(),
        };
        // An allowed segment's finding is never shown (nor its text escaped).
        let allowed = || Finding {
            part: String::new(),
            cause: Cause::Default {
                source: String::new(),
            },
            allow_rule: None,
            session_rule: None,
            pending: Vec::new(),
        };
        // Once no deny or ask rule matched: a probe allows nothing of its own, and what cannot
        // be analysed gets the policy's verdict for that.
        let past_deny_and_ask = || {
            if segment.probe {
                return Some((Decision::Allow, allowed()));
            }
            segment.unanalysable.as_ref().map(|construct| {
                (
                    self.unanalysable.0,
                    finding(Cause::Unanalysable {
                        construct: construct.clone(),
                    }),
                )
            })
        };
        let from_rule = |rule: &Rule| {
            finding(Cause::Rule {
                rule: rule.text.clone(),
                source: rule.source.clone(),
                message: rule.message.clone(),
            })
        };
        match &segment.kind {
            Kind::Command {
                words,
                assigns,
                wrapper,
            } => {
                let texts: Vec<Cow<str>> = words
                    .iter()
                    .enumerate()
                    .map(|(i, w)| word_text(i, w))
                    .collect();
                let loose: Option<Vec<Cow<str>>> =
                    loose_form(&texts).map(|form| form.into_iter().map(Cow::Owned).collect());
                // Each form's rules, looked up once.
                let written = self.command_rules(texts.first().map(|w| w.as_ref()));
                let normal = loose
                    .as_ref()
                    .map(|form| (form, self.command_rules(form.first().map(|w| w.as_ref()))));
                for decision in [Decision::Deny, Decision::Ask] {
                    for (form, rules) in
                        std::iter::once((&texts, written.clone())).chain(normal.clone())
                    {
                        let rules = rules.filter(|r| r.decision == decision);
                        for rule in rules {
                            let Pattern::Command(tokens) = &rule.pattern else {
                                continue;
                            };
                            if words.is_empty() && !matches!(tokens.as_slice(), [Token::Rest]) {
                                continue;
                            }
                            if rule::match_words(tokens, form, true).is_some() {
                                return (decision, from_rule(rule));
                            }
                        }
                    }
                }
                if let Some(verdict) = past_deny_and_ask() {
                    return verdict;
                }
                let env_clean = !assigns.iter().any(|a| changes_what_runs(a));
                if env_clean && (*wrapper || words.is_empty()) {
                    // The wrapper's own form only meets deny and ask rules; the inner command
                    // is a segment of its own. A segment of assignments and redirects only
                    // runs nothing.
                    return (Decision::Allow, allowed());
                }
                if env_clean {
                    let allowed_by = |tokens: &[Token]| {
                        rule::match_words(tokens, &texts, false)
                            .is_some_and(|coverage| covers_safely(words, &coverage))
                    };
                    let by_rule = written.clone().any(|r| {
                        r.decision == Decision::Allow
                            && matches!(&r.pattern, Pattern::Command(t) if allowed_by(t))
                    });
                    if by_rule || grants.rules.iter().any(|(_, t)| allowed_by(t)) {
                        return (Decision::Allow, allowed());
                    }
                    if GLUE.contains(&texts[0].as_ref()) {
                        return (Decision::Allow, allowed());
                    }
                }
                // Its allow rules, if reported, come from `allow_rules`.
                let f = finding(Cause::Default {
                    source: self.default.1.clone(),
                });
                (self.default.0, f)
            }
            Kind::Write { target, tree } => {
                let resolved = target.as_deref().and_then(|t| resolve(t, call));
                for decision in [Decision::Deny, Decision::Ask, Decision::Allow] {
                    if decision == Decision::Allow
                        && let Some(verdict) = past_deny_and_ask()
                    {
                        return verdict;
                    }
                    for rule in self.rules.iter().filter(|r| r.decision == decision) {
                        let Pattern::Write(glob) = &rule.pattern else {
                            continue;
                        };
                        let Some(glob) = resolve(glob, call) else {
                            continue;
                        };
                        // A dynamic target may be any file: deny and ask rules hold for it.
                        let hit = match &resolved {
                            Some(path) => {
                                rule::glob_match(glob.as_bytes(), path.as_bytes(), true)
                                    // A tree meets a deny or ask rule for anything in it.
                                    || *tree
                                        && decision != Decision::Allow
                                        && may_match_under(&glob, path)
                            }
                            None => decision != Decision::Allow,
                        };
                        if hit {
                            return (decision, from_rule(rule));
                        }
                    }
                }
                // Allowed once, or by a rule (a session grant holds commands only): its allow
                // rule, if reported, comes from `allow_rules`.
                let f = finding(Cause::Default {
                    source: self.default.1.clone(),
                });
                (self.default.0, f)
            }
        }
    }
}

/// Whether `glob` may match a path inside the directory `dir`: its literal start (up to the
/// first wildcard) lies in `dir`, or `dir` lies where its wildcards begin.
fn may_match_under(glob: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    let literal = &glob[..glob.find(['*', '?', '[']).unwrap_or(glob.len())];
    let inside = format!("{dir}/");
    literal.starts_with(&inside)
        || (literal.len() < glob.len() && inside.starts_with(literal))
        || rule::glob_match(glob.as_bytes(), format!("{dir}/x").as_bytes(), true)
}

fn unanalysable_whole(command: &str, construct: String) -> Segment {
    Segment {
        text: command.to_string(),
        kind: Kind::Command {
            words: Vec::new(),
            assigns: Vec::new(),
            wrapper: false,
        },
        unanalysable: Some(construct),
        probe: false,
    }
}

/// A word as rules see it: a dynamic argument meets any word of a deny or ask pattern, never
/// one of an allow pattern; a dynamic command name meets none (it is unanalysable instead).
fn word_text(index: usize, w: &Word) -> Cow<'_, str> {
    match (w.dynamic, index) {
        (false, _) => Cow::Borrowed(&w.text),
        (true, 0) => Cow::Borrowed("\u{1}(a name expanded at run time)"),
        (true, _) => Cow::Owned(format!("{}(expanded at run time)", rule::DYNAMIC)),
    }
}

/// Deny and ask rules are checked on a command as written and on this form of it, when it
/// differs: normalised (base name of the command, short flags merged, git's global options
/// dropped).
fn loose_form(words: &[Cow<str>]) -> Option<Vec<String>> {
    if words.is_empty() {
        return None;
    }
    // Most commands have no path for a name, no git options and no two short-flag words in a
    // row after the name: their normal form is the written one, found without copying.
    let flags_in_a_row = words
        .windows(2)
        .skip(1)
        .any(|pair| rule::short_flags(&pair[0]).is_some() && rule::short_flags(&pair[1]).is_some());
    if !words[0].contains('/') && !flags_in_a_row && words[0] != "git" {
        return None;
    }
    let mut normal: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    if let Some(base) = normal[0].rsplit('/').next()
        && !base.is_empty()
    {
        normal[0] = base.to_string();
    }
    if let Some(stripped) = wrappers::without_git_globals(&normal) {
        normal = stripped;
    }
    let mut merged: Vec<String> = Vec::with_capacity(normal.len());
    for w in normal {
        let count = merged.len();
        if let (Some(prev), Some(letters)) = (merged.last_mut(), rule::short_flags(&w))
            && count > 1
            && rule::short_flags(prev).is_some()
        {
            prev.push_str(letters);
            continue;
        }
        merged.push(w);
    }
    (merged
        .iter()
        .map(String::as_str)
        .ne(words.iter().map(|w| w.as_ref())))
    .then_some(merged)
}

/// An allow rule covers a command safely when no word its wildcards cover is a code-running
/// flag of the command (or, for a command with such flags, a word known only at run time).
fn covers_safely(words: &[Word], coverage: &[bool]) -> bool {
    let name = &words[0].text;
    let has_code_flags = [
        "git", "find", "awk", "gawk", "mawk", "nawk", "perl", "ruby", "node", "tar", "rsync",
        "ssh", "vim", "make", "sed", "gsed", "install",
    ]
    .contains(
        &name
            .rsplit('/')
            .next()
            .unwrap_or(name)
            .trim_end_matches(|c: char| c.is_ascii_digit() || c == '.'),
    ) || name.starts_with("python");
    words.iter().zip(coverage).skip(1).all(|(w, literal)| {
        *literal || !(wrappers::is_code_flag(name, &w.text) || has_code_flags && w.dynamic)
    })
}

/// Variables that change what a command runs or how.
fn changes_what_runs(name: &str) -> bool {
    matches!(
        name,
        "PATH"
            | "BASH_ENV"
            | "ENV"
            | "SHELLOPTS"
            | "BASHOPTS"
            | "PS4"
            | "IFS"
            | "PAGER"
            | "EDITOR"
            | "VISUAL"
            | "NODE_OPTIONS"
            | "RUBYOPT"
            | "PROMPT_COMMAND"
            | "CDPATH"
            | "GLOBIGNORE"
            | "HOME"
            // Changes how GNU tools read their options (no reordering): the engine's reading of
            // which word is an option would no longer hold.
            | "POSIXLY_CORRECT"
    ) || name.starts_with("LD_")
        || name.starts_with("BASH_FUNC_")
        || name.starts_with("GIT_")
        || name.starts_with("PYTHON")
        || name.starts_with("PERL5")
        || name.ends_with("_COMMAND")
        || name.ends_with("PAGER")
        || name.ends_with("EDITOR")
}

/// The rule that allows exactly these words.
fn exact_rule(words: &[String]) -> String {
    format!(
        "Bash({})",
        words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
    )
}

/// What "for this session" grants: the command name, its subcommand if it has one, then `*`.
fn session_rule(words: &[String]) -> String {
    let mut prefix = vec![quote(&words[0])];
    if let Some(sub) = words.get(1)
        && sub.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && sub
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        prefix.push(sub.clone());
    }
    format!("Bash({} *)", prefix.join(" "))
}

fn quote(word: &str) -> String {
    if !word.is_empty() && !word.contains(|c: char| c.is_whitespace() || "'\"*()".contains(c)) {
        word.to_string()
    } else if !word.contains('"') {
        format!("\"{word}\"")
    } else {
        format!("'{word}'")
    }
}

/// A path as written (`~/x`, `./x`, `x`, `/x`) made absolute against the call, `.` and `..`
/// resolved by name; none where that is not known here (a relative path with no known
/// directory, `~+`, `~-`, `~user`, `..` above the root).
fn resolve(path: &str, call: &Call) -> Option<String> {
    if path.starts_with('~') && !(path == "~" || path.starts_with("~/")) {
        return None;
    }
    // The process's own views of the filesystem name the same files.
    let path = if let Some(rest) = path
        .strip_prefix("/proc/self/root/")
        .or_else(|| path.strip_prefix("/proc/thread-self/root/"))
    {
        format!("/{rest}")
    } else if let Some(rest) = path
        .strip_prefix("/proc/self/cwd/")
        .or_else(|| path.strip_prefix("/proc/thread-self/cwd/"))
    {
        format!("{}/{rest}", call.cwd.trim_end_matches('/'))
    } else {
        path.to_string()
    };
    let path = path.as_str();
    let joined = if let Some(rest) = path.strip_prefix("~/") {
        format!("{}/{rest}", call.home?)
    } else if path == "~" {
        call.home?.to_string()
    } else if path.starts_with('/') || path.starts_with("**") {
        path.to_string()
    } else if call.cwd.is_empty() {
        return None;
    } else {
        format!("{}/{path}", call.cwd.trim_end_matches('/'))
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            other => parts.push(other),
        }
    }
    Some(if joined.starts_with('/') {
        format!("/{}", parts.join("/"))
    } else {
        parts.join("/")
    })
}

/// A part shown on one line, its hidden characters escaped ([`decide::visible`]).
fn escape(text: &str) -> String {
    decide::visible(text)
}

/// The command names of every segment the engine finds in `command` (after quote removal, in
/// source order), or none when any part of it cannot be analysed. For tools and the fuzz target
/// that compares the engine's reading with real bash's.
pub fn command_names(command: &str) -> Option<Vec<String>> {
    if command
        .chars()
        .any(|c| (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}')
    {
        return None;
    }
    let mut names = Vec::new();
    for segment in segments::collect(command, false, true) {
        if segment.unanalysable.is_some() {
            return None;
        }
        if let Kind::Command { words, .. } = &segment.kind
            && let Some(first) = words.first()
        {
            if first.dynamic {
                return None;
            }
            names.push(first.text.clone());
        }
    }
    Some(names)
}

/// The fast path and the parser side by side, for the test that checks one against the other
/// (`tests/fast_path.rs`). Not an interface.
#[doc(hidden)]
pub mod checks {
    /// The segments of `command` (as `Debug` text), read with the fast path or by the parser
    /// alone.
    pub fn segments(command: &str, fast: bool) -> String {
        format!("{:#?}", crate::segments::collect(command, false, fast))
    }

    /// The items of each simple command the fast path finds in `command` (as `Debug` text);
    /// none when it leaves the command to the parser.
    pub fn fast_items(command: &str) -> Option<String> {
        let mut commands = Vec::new();
        crate::fast::parse(command, |items| commands.push(format!("{items:#?}")))?;
        Some(commands.join("\n"))
    }

    /// The same from `brush-parser`'s tree (as `Debug` text): none when the command does not
    /// parse or holds other than lists and pipelines of simple commands.
    pub fn parser_items(command: &str) -> Option<String> {
        let options = brush_parser::ParserOptions {
            enable_extended_globbing: false,
            ..Default::default()
        };
        let program = brush_parser::Parser::new(command.as_bytes(), &options)
            .parse_program()
            .ok()?;
        let commands = crate::segments::simple_items_of(&program)?;
        let commands: Vec<String> = commands.iter().map(|items| format!("{items:#?}")).collect();
        Some(commands.join("\n"))
    }

    /// The facts of a raw word (as `Debug` text) from the fast path; none when it leaves the
    /// word to the parser.
    pub fn fast_word_facts(raw: &str) -> Option<String> {
        crate::fast::word_facts(raw).map(|facts| format!("{facts:?}"))
    }

    /// The facts of a raw word (as `Debug` text) from the parser, as the walk reads words.
    pub fn word_facts(raw: &str) -> String {
        let options = brush_parser::ParserOptions {
            enable_extended_globbing: false,
            ..Default::default()
        };
        format!("{:?}", crate::words::facts(raw, &options, false))
    }
}
