//! The simple commands bash would run for a command line, wherever they sit, and the files its
//! redirects write: the segments the rules are checked on.

use brush_parser::ast::{self, SourceLocation};
use brush_parser::{Parser, ParserOptions};

use crate::fast;
use crate::words::{self, WordFacts};
use crate::wrappers::{self, Inner};

/// More nested code than this (`bash -c` in `bash -c` …) is not analysed.
pub(crate) const MAX_DEPTH: usize = 8;
/// More segments than this make the command unanalysable (after every one was checked).
pub(crate) const MAX_SEGMENTS: usize = 512;
/// Deeper than [`MAX_DEPTH`], code is still read for deny and ask rules, down to this depth.
const MAX_PROBE_DEPTH: usize = 32;
/// The parser and the walk recurse once per level of nesting (groups, subshells, `$(`, `${`,
/// `if`, loops), across nested code too: past this many levels in all, a command is
/// unanalysable and not parsed, so that no command can exhaust the host's stack.
pub(crate) const MAX_NESTING: usize = 64;

/// One word of a command: its value, or that it is only known at run time.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Word {
    pub text: String,
    pub dynamic: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A simple command: its words (empty for one of assignments and redirects only), the
    /// variables it sets (prefix assignments, `export`, the assignments of `env`), and whether
    /// this is a wrapper's own form (only deny and ask rules apply to it).
    Command {
        words: Vec<Word>,
        assigns: Vec<String>,
        wrapper: bool,
    },
    /// A file the command writes (a redirect, `tee`, `dd of=`); none when it is not literal.
    /// `tree`: the path is a directory whose contents change too (`cp -r`, `mv`), so a rule for
    /// anything in it applies.
    Write { target: Option<String>, tree: bool },
}

#[derive(Debug, Clone)]
pub(crate) struct Segment {
    /// The source text, for the model and the user.
    pub text: String,
    pub kind: Kind,
    /// The construct that makes it unanalysable.
    pub unanalysable: Option<String>,
    /// Code that may run, read only for deny and ask rules (a value that may be evaluated
    /// later, code nested too deep, a command with a control character): it allows nothing.
    pub probe: bool,
}

/// The segments of `command`; all of them probes with `probe`. With `fast`, code and words in
/// the subset [`fast`] reads skip the parser (the same segments, sooner).
pub(crate) fn collect(command: &str, probe: bool, fast: bool) -> Vec<Segment> {
    let mut walker = Walker {
        fast,
        // As `bash -c` parses: extended globs are off unless a command turns them on, so that
        // `!(cmd)` is a negated subshell, not a pattern.
        options: ParserOptions {
            enable_extended_globbing: false,
            ..ParserOptions::default()
        },
        segments: Vec::new(),
        nesting: 0,
    };
    walker.program(command, 0, probe);
    walker.into()
}

struct Walker {
    /// Whether the fast path may read code and words before the parser.
    fast: bool,
    options: ParserOptions,
    segments: Vec<Segment>,
    /// Levels of nesting of the code being walked, nested code included.
    nesting: usize,
}

impl From<Walker> for Vec<Segment> {
    fn from(walker: Walker) -> Self {
        walker.segments
    }
}

impl Walker {
    fn unanalysable(&mut self, text: &str, construct: impl Into<String>, probe: bool) {
        self.segments.push(Segment {
            text: text.to_string(),
            kind: Kind::Command {
                words: Vec::new(),
                assigns: Vec::new(),
                wrapper: false,
            },
            unanalysable: Some(construct.into()),
            probe,
        });
    }

    /// Parse and walk `code`, nested `depth` levels deep.
    fn program(&mut self, code: &str, depth: usize, mut probe: bool) {
        if depth > MAX_DEPTH {
            if !probe {
                self.unanalysable(
                    code,
                    format!("code nested more than {MAX_DEPTH} levels deep"),
                    false,
                );
            }
            if depth > MAX_PROBE_DEPTH {
                return;
            }
            probe = true;
        }
        let levels = nesting(code);
        if self.nesting + levels > MAX_NESTING {
            self.unanalysable(
                code,
                format!("nesting more than {MAX_NESTING} levels deep"),
                probe,
            );
            return;
        }
        self.nesting += levels;
        self.parse_and_walk(code, depth, probe);
        // A `case` inside `$(…)`: its patterns' `)` end the substitution for the parser, not for
        // bash; what bash runs there is also read as probes.
        if code.contains("$(") && crate::comsub::mentions_case(code) {
            for body in crate::comsub::bodies(code) {
                if crate::comsub::mentions_case(body) {
                    self.program(body, depth + 1, true);
                }
            }
        }
        self.nesting -= levels;
    }

    fn parse_and_walk(&mut self, code: &str, depth: usize, probe: bool) {
        if self.fast {
            let source = Source { code, depth, probe };
            let before = self.segments.len();
            if fast::parse(code, |items| self.simple_items(items, &source)).is_some() {
                return;
            }
            // Left to the parser: what the fast path found before it gave up goes.
            self.segments.truncate(before);
        }
        // The parser panics on some input (an fd number that overflows): that is a command it
        // cannot read, like one that does not parse.
        let parsed = std::panic::catch_unwind(|| {
            Parser::new(code.as_bytes(), &self.options).parse_program()
        });
        let Ok(parsed) = parsed else {
            self.unanalysable(code, "a command the parser cannot read", probe);
            return;
        };
        match parsed {
            Ok(program) => {
                let source = Source { code, depth, probe };
                for list in &program.complete_commands {
                    self.list(list, &source);
                }
            }
            Err(error) => self.unanalysable(
                code,
                format!("a command that does not parse ({error})"),
                probe,
            ),
        }
    }

    /// Code a value may run later (`x='$(…)'` evaluated by arithmetic or a prompt, a variable
    /// that holds a command): read for deny and ask rules.
    fn probe_value(&mut self, value: &str, s: &Source) {
        self.program(value, s.depth + 1, true);
    }

    /// A variable set to `value` (literal): code it carries is probed.
    fn assigned(&mut self, name: &str, value: Option<&str>, s: &Source) {
        let Some(value) = value else { return };
        if let Some(function) = name.strip_prefix("BASH_FUNC_") {
            // An exported function: `BASH_FUNC_f%%=() { body; }`.
            let function = function.trim_end_matches('%');
            self.probe_value(&format!("{function} {value}"), s);
        } else if carries_code(name) {
            self.probe_value(value, s);
        } else if name.starts_with("PS") || value.contains("$(") || value.contains('`') {
            // A prompt string, or a value that holds a command substitution as text: either
            // may be expanded later.
            let quoted = format!("\"{}\"", value.replace('"', "\\\""));
            let facts = self.facts(&quoted);
            for code in &facts.code {
                self.probe_value(code, s);
            }
        }
    }

    fn list(&mut self, list: &ast::CompoundList, s: &Source) {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first, s);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p, s),
                }
            }
        }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline, s: &Source) {
        for command in &pipeline.seq {
            self.command(command, s);
        }
    }

    fn command(&mut self, command: &ast::Command, s: &Source) {
        match command {
            ast::Command::Simple(simple) => self.simple(simple, s),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound, s);
                self.redirects(redirects.iter().flat_map(|r| r.0.iter()), s);
            }
            ast::Command::Function(function) => {
                let ast::FunctionBody(body, redirects) = &function.body;
                self.compound(body, s);
                self.redirects(redirects.iter().flat_map(|r| r.0.iter()), s);
            }
            ast::Command::ExtendedTest(test, redirects) => {
                self.test(&test.expr, s);
                self.redirects(redirects.iter().flat_map(|r| r.0.iter()), s);
            }
        }
    }

    fn test(&mut self, expr: &ast::ExtendedTestExpr, s: &Source) {
        use ast::ExtendedTestExpr as E;
        match expr {
            E::And(a, b) | E::Or(a, b) => {
                self.test(a, s);
                self.test(b, s);
            }
            E::Not(a) | E::Parenthesized(a) => self.test(a, s),
            E::UnaryTest(_, w) => {
                self.word(&w.value, s);
            }
            E::BinaryTest(_, a, b) => {
                self.word(&a.value, s);
                self.word(&b.value, s);
            }
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand, s: &Source) {
        use ast::CompoundCommand as C;
        match compound {
            C::Arithmetic(a) => {
                // `( (cmd) )` with a blank between the parentheses is two subshells, which the
                // parser reads as arithmetic: read it as bash does.
                let text = s.slice(Some(a.loc.clone()));
                // bash reads `((` as arithmetic only up to a `))`; `( (a) )` and `((a) )` are
                // subshells.
                if !(text.starts_with("((") && text.ends_with("))")) {
                    let inner = text
                        .trim()
                        .strip_prefix('(')
                        .and_then(|t| t.strip_suffix(')'));
                    if let Some(inner) = inner {
                        self.program(inner, s.depth, s.probe);
                    }
                }
                self.expansion_text(&a.expr.value, s)
            }
            C::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.expansion_text(&e.value, s);
                }
                self.list(&f.body.list, s);
            }
            C::BraceGroup(g) => self.list(&g.list, s),
            C::Subshell(sub) => self.list(&sub.list, s),
            C::ForClause(f) => {
                for w in f.values.iter().flatten() {
                    self.word(&w.value, s);
                }
                // The loop assigns its variable.
                self.command_words(
                    format!("for {}", f.variable_name),
                    Vec::new(),
                    vec![(f.variable_name.clone(), None)],
                    None,
                    None,
                    s,
                );
                self.list(&f.body.list, s);
            }
            C::CaseClause(c) => {
                self.word(&c.value.value, s);
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value, s);
                    }
                    if let Some(body) = &item.cmd {
                        self.list(body, s);
                    }
                }
            }
            C::IfClause(i) => {
                self.list(&i.condition, s);
                self.list(&i.then, s);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c, s);
                    }
                    self.list(&e.body, s);
                }
            }
            C::WhileClause(w) | C::UntilClause(w) => {
                self.list(&w.0, s);
                self.list(&w.1.list, s);
            }
            C::Coprocess(c) => self.command(&c.body, s),
        }
    }

    /// The code in a text bash expands (an arithmetic expression).
    fn expansion_text(&mut self, text: &str, s: &Source) {
        let facts = self.facts(&format!("\"{}\"", text.replace('"', "\\\"")));
        self.code_of(&facts, text, s);
    }

    fn facts(&self, raw: &str) -> WordFacts {
        words::facts(raw, &self.options, self.fast)
    }

    /// Walk the code a word (its raw text) runs when expanded; its facts.
    fn word(&mut self, raw: &str, s: &Source) -> WordFacts {
        let facts = self.facts(raw);
        self.code_of(&facts, raw, s);
        facts
    }

    fn code_of(&mut self, facts: &WordFacts, text: &str, s: &Source) {
        for code in &facts.code {
            self.program(code, s.depth + 1, s.probe);
        }
        if let Some(broken) = &facts.broken {
            self.unanalysable(text, broken.clone(), s.probe);
        }
    }

    fn redirects<'a>(&mut self, redirects: impl Iterator<Item = &'a ast::IoRedirect>, s: &Source) {
        for r in redirects {
            self.redirect(r, s, &mut None);
        }
    }

    /// Walk one redirect; a literal heredoc or here-string body goes to `stdin_code`.
    fn redirect(&mut self, r: &ast::IoRedirect, s: &Source, stdin_code: &mut Option<StdinSource>) {
        use ast::IoFileRedirectTarget as T;
        match r {
            ast::IoRedirect::File(fd, kind, target) => match target {
                T::Filename(w) => self.file_redirect(*fd, kind, &w.value, s, stdin_code),
                T::Fd(_) => {}
                T::Duplicate(w) => self.duplicate(kind, &w.value, s),
                T::ProcessSubstitution(_, sub) => self.list(&sub.list, s),
            },
            ast::IoRedirect::HereDocument(fd, doc) => {
                let body = if doc.requires_expansion {
                    let facts = words::heredoc_facts(&doc.doc.value, &self.options);
                    self.code_of(&facts, &doc.doc.value, s);
                    facts.literal
                } else {
                    Some(doc.doc.value.clone())
                };
                if fd.unwrap_or(0) == 0 {
                    *stdin_code = Some(body.map_or(StdinSource::Dynamic, StdinSource::Code));
                }
            }
            ast::IoRedirect::HereString(fd, w) => {
                let facts = self.word(&w.value, s);
                if fd.unwrap_or(0) == 0 {
                    *stdin_code = Some(
                        facts
                            .literal
                            .map_or(StdinSource::Dynamic, StdinSource::Code),
                    );
                }
            }
            ast::IoRedirect::OutputAndError(w, _) => self.output_and_error(&w.value, s),
        }
    }

    /// A redirect to or from the file named by the raw word `raw` (`> f`, `< f`, `>> f`, …).
    fn file_redirect(
        &mut self,
        fd: Option<ast::IoFd>,
        kind: &ast::IoFileRedirectKind,
        raw: &str,
        s: &Source,
        stdin_code: &mut Option<StdinSource>,
    ) {
        use ast::IoFileRedirectKind as K;
        let facts = self.word(raw, s);
        let writes = matches!(kind, K::Write | K::Append | K::Clobber | K::ReadAndWrite);
        if writes {
            // bash expands a glob in a redirect target to the one file it matches.
            let target = facts.literal.filter(|_| !facts.pattern);
            self.write(target, raw, s);
        } else if matches!(kind, K::Read) && fd.unwrap_or(0) == 0 {
            *stdin_code = Some(StdinSource::File);
        }
    }

    /// `>&word` or `<&word`: `>&file` (not a number, not `-`) writes a file.
    fn duplicate(&mut self, kind: &ast::IoFileRedirectKind, raw: &str, s: &Source) {
        let facts = self.word(raw, s);
        match &facts.literal {
            Some(t) if t == "-" || t.chars().all(|c| c.is_ascii_digit()) => {}
            _ if matches!(kind, ast::IoFileRedirectKind::DuplicateOutput) => {
                self.write(facts.literal, raw, s)
            }
            _ => {}
        }
    }

    /// `&> word`, `&>> word`.
    fn output_and_error(&mut self, raw: &str, s: &Source) {
        let facts = self.word(raw, s);
        self.write(facts.literal, raw, s);
    }

    fn write(&mut self, target: Option<String>, raw: &str, s: &Source) {
        self.change(target, false, raw, s)
    }

    fn change(&mut self, target: Option<String>, tree: bool, raw: &str, s: &Source) {
        let unanalysable = target
            .is_none()
            .then(|| "a file written to whose name is expanded at run time".to_string());
        if matches!(
            target.as_deref(),
            Some("/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty")
        ) {
            return;
        }
        self.segments.push(Segment {
            text: raw.to_string(),
            kind: Kind::Write { target, tree },
            unanalysable,
            probe: s.probe,
        });
    }

    fn simple(&mut self, simple: &ast::SimpleCommand, s: &Source) {
        self.simple_items(&items_of(simple), s);
    }

    /// A simple command's items, in source order, however read.
    pub(crate) fn simple_items(&mut self, items: &[Located], s: &Source) {
        // Its text runs from the first item that has a place to the last. No redirect has one
        // (brush-parser places none); a redirect is a part of its own anyway.
        let mut places = items.iter().filter_map(|i| i.loc);
        let text = match places.next() {
            Some(first) => {
                let end = places.next_back().unwrap_or(first).1;
                s.code
                    .get(first.0..end)
                    .unwrap_or(s.code)
                    .trim()
                    .to_string()
            }
            None => s.code.trim().to_string(),
        };
        let mut assigns = Vec::new();
        let mut stdin = None;
        // Each word's raw text and where it ends; none for a process substitution's path.
        let mut raw_words: Vec<Option<(&str, Option<usize>)>> = Vec::with_capacity(items.len());
        for located in items {
            match &located.item {
                Item::Redirect(r) => self.redirect(r, s, &mut stdin),
                Item::ToFile(fd, kind, raw) => self.file_redirect(*fd, kind, raw, s, &mut stdin),
                Item::Duplicate(kind, raw) => self.duplicate(kind, raw, s),
                Item::OutputAndError(raw) => self.output_and_error(raw, s),
                Item::Word(raw) => raw_words.push(Some((raw, located.loc.map(|l| l.1)))),
                Item::Assignment(a) => {
                    let value = self.assignment_value(a, s);
                    assigns.push((assignment_name(a), value));
                }
                Item::Scalar(name, raw) => {
                    let value = self.word(raw, s).literal;
                    assigns.push((name.to_string(), value));
                }
                Item::ProcessSubstitution(sub) => {
                    self.list(&sub.list, s);
                    raw_words.push(None);
                }
            }
        }
        let mut words = Vec::with_capacity(raw_words.len());
        let mut unanalysable = None;
        for (i, w) in raw_words.into_iter().enumerate() {
            let Some((raw, end)) = w else {
                words.push(Word {
                    text: String::new(),
                    dynamic: true,
                });
                continue;
            };
            let facts = self.word(raw, s);
            if i == 0 {
                unanalysable = name_problem(&facts);
                // `name<(…)`: the substitution's path joins the name (`name/dev/fd/63`).
                let next = end.and_then(|e| s.code.get(e..e + 2));
                if matches!(next, Some("<(" | ">(")) {
                    unanalysable = Some("a command name joined to a process substitution".into());
                }
            }
            words.push(match facts.literal {
                // A glob or brace expansion becomes other words at run time.
                Some(text) if !facts.pattern => Word {
                    text,
                    dynamic: false,
                },
                _ => Word {
                    text: String::new(),
                    dynamic: true,
                },
            });
        }
        self.command_words(text, words, assigns, unanalysable, stdin, s);
    }

    /// Walk an assignment's value; its literal value, if a scalar has one.
    fn assignment_value(&mut self, a: &ast::Assignment, s: &Source) -> Option<String> {
        if let ast::AssignmentName::ArrayElementName(_, index) = &a.name {
            self.expansion_text(index, s);
        }
        match &a.value {
            ast::AssignmentValue::Scalar(w) => self.word(&w.value, s).literal,
            ast::AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.word(&k.value, s);
                    }
                    if let Some(value) = self.word(&v.value, s).literal {
                        self.assigned("", Some(&value), s);
                    }
                }
                None
            }
        }
    }

    /// Record a command of known words and walk what it runs in turn.
    fn command_words(
        &mut self,
        text: String,
        words: Vec<Word>,
        assigned: Vec<(String, Option<String>)>,
        unanalysable: Option<String>,
        stdin: Option<StdinSource>,
        s: &Source,
    ) {
        for (name, value) in &assigned {
            self.assigned(name, value.as_deref(), s);
        }
        let mut assigns: Vec<String> = assigned.into_iter().map(|(name, _)| name).collect();
        let unanalysable = unanalysable.or_else(|| {
            assigns
                .iter()
                .any(|a| a == "BASH_CMDS" || a == "BASH_ALIASES")
                .then(|| "an assignment to BASH_CMDS or BASH_ALIASES, which makes a name run another program".to_string())
        });
        if unanalysable.is_some() {
            self.segments.push(Segment {
                text,
                kind: Kind::Command {
                    words,
                    assigns,
                    wrapper: false,
                },
                unanalysable,
                probe: s.probe,
            });
            return;
        }
        let analysis = wrappers::analyse(&words, stdin.as_ref());
        for (name, value) in &analysis.assigns {
            self.assigned(name, value.as_deref(), s);
        }
        assigns.extend(analysis.assigns.into_iter().map(|(name, _)| name));
        // A wrapper's own form meets only deny and ask rules, unless it changes who runs the
        // command or what runs (`sudo`, `chroot`, `find`'s own actions): then it needs an allow
        // rule of its own too.
        let runs_inner = analysis.inner.iter().any(|i| !matches!(i, Inner::Probe(_)));
        let wrapper = runs_inner && !analysis.own_check;
        let index = self.segments.len();
        self.segments.push(Segment {
            text,
            kind: Kind::Command {
                words,
                assigns,
                wrapper,
            },
            unanalysable: analysis.unanalysable,
            probe: s.probe,
        });
        for write in analysis.writes {
            let raw = write.clone().unwrap_or_default();
            self.write(write, &raw, s);
        }
        let changes = Source {
            code: s.code,
            depth: s.depth,
            probe: true,
        };
        for (change, tree) in analysis.changes {
            let raw = change.clone().unwrap_or_default();
            self.change(change, tree, &raw, &changes);
        }
        for inner in analysis.inner {
            match inner {
                Inner::Command(inner_words) => {
                    let problem = inner_words.first().and_then(|w| {
                        w.dynamic
                            .then(|| "a command name expanded at run time".to_string())
                    });
                    let shown =
                        shown(&inner_words).unwrap_or_else(|| self.segments[index].text.clone());
                    self.command_words(shown, inner_words, Vec::new(), problem, None, s);
                }
                Inner::Code(code) => self.program(&code, s.depth + 1, s.probe),
                Inner::Probe(code) => self.probe_value(&code, s),
                Inner::Arithmetic(text) => self.expansion_text(&text, s),
                Inner::Unanalysable(construct) => {
                    // The wrapper itself carries it: it is what the model wrote.
                    if let Some(segment) = self.segments.get_mut(index) {
                        segment.unanalysable.get_or_insert(construct);
                    }
                }
            }
        }
    }
}

/// One item of a simple command, in source order: from the parser's tree, or from the fast
/// path ([`fast`]). The forms the fast path reads (`ToFile`, `Duplicate`, `OutputAndError`,
/// `Word`, `Scalar`) are the ones the tree's items are put in when they have them, so that both
/// readings of a command give the same items (`tests/fast_path.rs` compares them).
#[derive(Debug)]
pub(crate) enum Item<'a> {
    /// A redirect of another form (a heredoc, a here-string, a process substitution).
    Redirect(&'a ast::IoRedirect),
    /// A redirect to or from a file: the descriptor, the kind, the target word's raw text.
    ToFile(Option<ast::IoFd>, ast::IoFileRedirectKind, &'a str),
    /// `>&word`, `<&word`.
    Duplicate(ast::IoFileRedirectKind, &'a str),
    /// `&> word`, `&>> word`.
    OutputAndError(&'a str),
    /// A word of the command, its name first (an assignment after the name is one).
    Word(&'a str),
    /// An assignment before the name, of another form (an array, an element).
    Assignment(&'a ast::Assignment),
    /// `NAME=value` before the name: the name and the value's raw text.
    Scalar(&'a str, &'a str),
    /// A process substitution: its code runs, and its path is a word known only at run time.
    ProcessSubstitution(&'a ast::SubshellCommand),
}

/// An item and where it lies in the code (byte offsets, as `brush-parser` counts them), when
/// it has a place.
#[derive(Debug)]
pub(crate) struct Located<'a> {
    pub item: Item<'a>,
    pub loc: Option<(usize, usize)>,
}

impl<'a> Located<'a> {
    /// An item of the tree, in the form the fast path would give it.
    fn of(item: &'a ast::CommandPrefixOrSuffixItem, in_prefix: bool) -> Located<'a> {
        use ast::CommandPrefixOrSuffixItem as I;
        use ast::IoFileRedirectKind as K;
        use ast::IoFileRedirectTarget as T;
        let loc = span_of(item.location().as_ref());
        let item = match item {
            I::IoRedirect(r) => match r {
                ast::IoRedirect::File(fd, kind, T::Filename(w))
                    if !matches!(kind, K::DuplicateInput | K::DuplicateOutput) =>
                {
                    Item::ToFile(*fd, kind.clone(), &w.value)
                }
                ast::IoRedirect::File(
                    _,
                    kind @ (K::DuplicateInput | K::DuplicateOutput),
                    T::Duplicate(w),
                ) => Item::Duplicate(kind.clone(), &w.value),
                ast::IoRedirect::OutputAndError(w, _) => Item::OutputAndError(&w.value),
                _ => Item::Redirect(r),
            },
            I::Word(w) => Item::Word(&w.value),
            I::AssignmentWord(a, _) if in_prefix => match (&a.name, &a.value) {
                (ast::AssignmentName::VariableName(name), ast::AssignmentValue::Scalar(w)) => {
                    Item::Scalar(name, &w.value)
                }
                _ => Item::Assignment(a),
            },
            // `export X=…` and its kin: a word of the command.
            I::AssignmentWord(_, w) => Item::Word(&w.value),
            I::ProcessSubstitution(_, sub) => Item::ProcessSubstitution(sub),
        };
        Located { item, loc }
    }
}

/// A simple command's items, in source order.
pub(crate) fn items_of(simple: &ast::SimpleCommand) -> Vec<Located<'_>> {
    let prefix = simple.prefix.iter().flat_map(|p| p.0.iter());
    let suffix = simple.suffix.iter().flat_map(|p| p.0.iter());
    let mut items: Vec<Located> = prefix.map(|i| Located::of(i, true)).collect();
    items.extend(simple.word_or_name.iter().map(|w| Located {
        item: Item::Word(&w.value),
        loc: span_of(w.loc.as_ref()),
    }));
    items.extend(suffix.map(|i| Located::of(i, false)));
    items
}

/// The items of every simple command of a program whose commands are all simple ones (lists
/// and pipelines of them), in the order the walk meets them; none for any other program. What
/// the fast path must give for a command it reads.
pub(crate) fn simple_items_of(program: &ast::Program) -> Option<Vec<Vec<Located<'_>>>> {
    let mut commands = Vec::new();
    for list in &program.complete_commands {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            let rest = and_or.additional.iter().map(|next| match next {
                ast::AndOr::And(p) | ast::AndOr::Or(p) => p,
            });
            for pipeline in std::iter::once(&and_or.first).chain(rest) {
                for command in &pipeline.seq {
                    let ast::Command::Simple(simple) = command else {
                        return None;
                    };
                    commands.push(items_of(simple));
                }
            }
        }
    }
    Some(commands)
}

fn span_of(span: Option<&brush_parser::SourceSpan>) -> Option<(usize, usize)> {
    span.map(|span| (span.start.index, span.end.index))
}

/// Where a command's standard input comes from, when a redirect says.
#[derive(Debug, Clone)]
pub(crate) enum StdinSource {
    /// A file (`< script.sh`).
    File,
    /// A literal heredoc or here-string.
    Code(String),
    /// A heredoc or here-string with expansions.
    Dynamic,
}

struct Source<'a> {
    code: &'a str,
    depth: usize,
    probe: bool,
}

impl Source<'_> {
    fn slice(&self, span: Option<brush_parser::SourceSpan>) -> String {
        span.and_then(|span| self.code.get(span.start.index..span.end.index))
            .unwrap_or(self.code)
            .trim()
            .to_string()
    }
}

fn assignment_name(a: &ast::Assignment) -> String {
    match &a.name {
        ast::AssignmentName::VariableName(name)
        | ast::AssignmentName::ArrayElementName(name, _) => name.clone(),
    }
}

/// Why a command name cannot be known before it runs.
fn name_problem(facts: &WordFacts) -> Option<String> {
    let Some(name) = &facts.literal else {
        return Some("a command name expanded at run time".to_string());
    };
    if facts.pattern {
        return Some("a glob or brace expansion in the command name".to_string());
    }
    if name.is_empty() {
        return Some("an empty command name".to_string());
    }
    if name != "[" && name.contains('[') {
        // bash reads `name[ … ]` at a command's start as one word (an array subscript, spaces
        // and all), where the parser sees several.
        return Some("a command name with `[`, which bash may read as a subscript".to_string());
    }
    if !name.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
        return Some("a command name with characters outside printable ASCII".to_string());
    }
    None
}

/// Variables whose value is a command some program runs (`GIT_SSH_COMMAND`, `PAGER`, …).
fn carries_code(name: &str) -> bool {
    name.ends_with("_COMMAND")
        || name.ends_with("PAGER")
        || name.ends_with("EDITOR")
        || matches!(name, "VISUAL" | "PROMPT_COMMAND" | "LESSOPEN" | "LESSCLOSE")
}

/// The words of an inner command as text, for display.
fn shown(words: &[Word]) -> Option<String> {
    if words.is_empty() {
        return None;
    }
    Some(
        words
            .iter()
            .map(|w| if w.dynamic { "…" } else { w.text.as_str() })
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// How deeply `code` nests, at most (quotes aside, which only lower it): the deepest run of
/// open `(` and `{`, and of open `if`, loops and `case`, together.
fn nesting(code: &str) -> usize {
    // Read as bytes: every character that matters is ASCII, and no byte of another
    // character's UTF-8 form is one of them.
    let bytes = code.as_bytes();
    let (mut brackets, mut keywords, mut deepest) = (0usize, 0usize, 0usize);
    // Where the run of letters being read (a keyword?) starts.
    let mut word: Option<usize> = None;
    let end_word = |word: &mut Option<usize>, end: usize, keywords: &mut usize| {
        let Some(start) = word.take() else { return };
        match &bytes[start..end] {
            b"if" | b"while" | b"until" | b"for" | b"case" | b"select" => *keywords += 1,
            b"fi" | b"done" | b"esac" => *keywords = keywords.saturating_sub(1),
            _ => {}
        }
    };
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        let at = i;
        i += 1;
        match c {
            b'\\' => i += 1,
            b'\'' => i = crate::comsub::skip_single(bytes, i),
            b'(' | b'{' => brackets += 1,
            b')' | b'}' => brackets = brackets.saturating_sub(1),
            c if c.is_ascii_alphabetic() => {
                word.get_or_insert(at);
                continue;
            }
            _ => {}
        }
        end_word(&mut word, at, &mut keywords);
        deepest = deepest.max(brackets + keywords);
    }
    end_word(&mut word, bytes.len(), &mut keywords);
    deepest.max(brackets + keywords)
}
