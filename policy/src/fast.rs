//! A fast path for the commands agents send most: lists of simple commands made of plain and
//! quoted words, `$(…)` substitutions of the same, pipes, `&&`, `||`, `;`, `&`, newlines and
//! plain redirects.
//!
//! `brush-parser` reads such a command at about 0.2 ms a kilobyte, and builds a tree of many
//! small allocations; this reads it in a single pass and gives the walk in [`crate::segments`]
//! what it takes from that tree: each simple command's items (redirects, assignments, words,
//! their text and places), in the same order and form, so that the walk finds the same segments
//! either way. It also computes a word's facts as [`crate::words::facts`] would. On anything outside that
//! subset it gives up (`None`) and the caller takes the parser's path: keywords, groups,
//! subshells, heredocs, backslashes, backticks, globs, braces, brackets, comments, `${…}`,
//! `$'…'`, arithmetic, process substitution, control characters, non-ASCII text. The test
//! `policy/tests/fast_path.rs` checks both readings against each other on generated commands.

use brush_parser::ast;

use crate::segments::{Item, Located};
use crate::words::WordFacts;

/// The operators the fast path reads; any other operator (`(`, `)`, `;;`, `<<`, `|&`, …) makes
/// it give up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Newline,
    Semi,
    Amp,
    AndIf,
    OrIf,
    Pipe,
    /// A redirect operator: the kind of file redirect (`<`, `>`, `>>`, `<>`, `>|`, `<&`, `>&`).
    File(FileKind),
    /// `&>` and `&>>`.
    OutputAndError,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Read,
    Write,
    Append,
    ReadAndWrite,
    Clobber,
    DuplicateInput,
    DuplicateOutput,
}

impl FileKind {
    fn ast(self) -> ast::IoFileRedirectKind {
        use ast::IoFileRedirectKind as K;
        match self {
            FileKind::Read => K::Read,
            FileKind::Write => K::Write,
            FileKind::Append => K::Append,
            FileKind::ReadAndWrite => K::ReadAndWrite,
            FileKind::Clobber => K::Clobber,
            FileKind::DuplicateInput => K::DuplicateInput,
            FileKind::DuplicateOutput => K::DuplicateOutput,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Word,
    Op(Op),
}

/// A token and where it lies (byte offsets; the fast path reads ASCII only, so a byte offset
/// is the character index `brush-parser` records as a place).
#[derive(Debug, Clone, Copy)]
struct Token {
    kind: Kind,
    start: usize,
    end: usize,
}

/// Read `code` and give `sink` the items of each simple command in it, in order, as the walk
/// would take them from `brush-parser`'s tree; none when `code` is outside the subset. Commands
/// are given as they are read, so a command that turns out to be outside the subset may have
/// given some before it: the caller discards what they gave.
pub(crate) fn parse<'a>(code: &'a str, mut sink: impl FnMut(&[Located<'a>])) -> Option<()> {
    // Read every token first: a command with a token outside the subset (the most common way
    // out) is left to the parser before any of it is walked.
    let tokens = tokenize(code.as_bytes())?;
    let mut parser = Parser {
        code,
        tokens,
        next: 0,
        items: Vec::with_capacity(8),
        sink: &mut sink,
    };
    parser.program()
}

fn tokenize(code: &[u8]) -> Option<Vec<Token>> {
    let mut tokens = Vec::with_capacity(code.len() / 4);
    let mut i = 0;
    while let Some(&c) = code.get(i) {
        let start = i;
        let kind = match c {
            b' ' | b'\t' => {
                i += 1;
                continue;
            }
            b'&' | b'|' | b';' | b'<' | b'>' | b'\n' => {
                let (op, len) = operator(&code[i..])?;
                i += len;
                Kind::Op(op)
            }
            _ => {
                i = word_end(code, i)?;
                Kind::Word
            }
        };
        tokens.push(Token {
            kind,
            start,
            end: i,
        });
    }
    Some(tokens)
}

/// Characters a word may hold unquoted: none of them quotes, expands, globs, opens a comment or
/// a group, or ends a word. `~` is plain text except at the start of a word, where
/// [`word_facts`] reads it.
fn plain(c: u8) -> bool {
    PLAIN[usize::from(c)]
}

/// [`plain`] as a table: it is asked of every character.
const PLAIN: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        table[c] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_' | b'.' | b'/' | b',' | b':' | b'=' | b'+' | b'%' | b'@'
            )
            || matches!(b, b'^' | b'~');
        c += 1;
    }
    table
};

/// Characters single or double quotes may hold as plain text (in double quotes `"`, `\`, `` ` ``
/// and `$` are read apart). No line breaks or tabs: the fast path keeps to one-line words.
fn quotable(c: u8) -> bool {
    c == b' ' || (c.is_ascii_graphic() && c != b'\\' && c != b'`')
}

/// The operator at the start of `rest` and its length, read as `brush-parser`'s tokenizer
/// reads one (the longest run that stays an operator); none for one the fast path leaves to
/// the parser.
fn operator(rest: &[u8]) -> Option<(Op, usize)> {
    const ALL: &[&[u8]] = &[
        b"&", b"&&", b"(", b")", b";", b";;", b"\n", b"|", b"||", b"<", b">", b">|", b"<<", b">>",
        b"<&", b">&", b"<<-", b"<>", b"<<<", b"&>", b"&>>", b";;&", b";&", b"|&",
    ];
    let mut len = 1;
    while len < rest.len() && ALL.contains(&&rest[..len + 1]) {
        len += 1;
    }
    let op = match &rest[..len] {
        b"\n" => Op::Newline,
        b";" => Op::Semi,
        b"&" => Op::Amp,
        b"&&" => Op::AndIf,
        b"||" => Op::OrIf,
        b"|" => Op::Pipe,
        b"<" => Op::File(FileKind::Read),
        b">" => Op::File(FileKind::Write),
        b">>" => Op::File(FileKind::Append),
        b"<>" => Op::File(FileKind::ReadAndWrite),
        b">|" => Op::File(FileKind::Clobber),
        b"<&" => Op::File(FileKind::DuplicateInput),
        b">&" => Op::File(FileKind::DuplicateOutput),
        b"&>" => Op::OutputAndError,
        b"&>>" => Op::OutputAndError,
        _ => return None,
    };
    Some((op, len))
}

/// Where the word starting at `i` ends (unquoted blank, operator or end of input).
fn word_end(code: &[u8], mut i: usize) -> Option<usize> {
    while let Some(&c) = code.get(i) {
        i = match c {
            b' ' | b'\t' | b'\n' | b'&' | b'|' | b';' | b'<' | b'>' => return Some(i),
            b'\'' => single_quoted_end(code, i)?,
            b'"' => double_quoted_end(code, i)?,
            b'$' => dollar_end(code, i)?,
            c if plain(c) => i + 1,
            _ => return None,
        };
    }
    Some(i)
}

/// Past the `'…'` opening at `i`.
fn single_quoted_end(code: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match *code.get(j)? {
            b'\'' => return Some(j + 1),
            b'`' | b'\\' => j += 1,
            c if quotable(c) => j += 1,
            _ => return None,
        }
    }
}

/// Past the `"…"` opening at `i`.
fn double_quoted_end(code: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        j = match *code.get(j)? {
            b'"' => return Some(j + 1),
            b'$' => dollar_end(code, j)?,
            c if quotable(c) => j + 1,
            _ => return None,
        };
    }
}

/// Past the expansion at `i` (a `$`): `$(…)` or `$NAME`; none for any other.
fn dollar_end(code: &[u8], i: usize) -> Option<usize> {
    match *code.get(i + 1)? {
        // Not `$((`, arithmetic.
        b'(' if code.get(i + 2) != Some(&b'(') => substitution_end(code, i + 2),
        c if c == b'_' || c.is_ascii_alphabetic() => {
            let mut j = i + 2;
            while code
                .get(j)
                .is_some_and(|c| *c == b'_' || c.is_ascii_alphanumeric())
            {
                j += 1;
            }
            Some(j)
        }
        _ => None,
    }
}

/// Past the `)` that closes a `$(` whose code starts at `i`. The tokenizer rewrites a tab
/// inside (to a space), so the fast path reads only spaces there; an operator it would read as
/// the start of a heredoc or a group makes it give up too.
fn substitution_end(code: &[u8], mut i: usize) -> Option<usize> {
    loop {
        i = match *code.get(i)? {
            b')' => return Some(i + 1),
            b' ' => i + 1,
            b'&' | b'|' | b';' | b'<' | b'>' => {
                let (op, len) = operator(&code[i..])?;
                if op == Op::Newline {
                    return None;
                }
                i + len
            }
            b'\'' => single_quoted_end(code, i)?,
            b'"' => double_quoted_end(code, i)?,
            b'$' => dollar_end(code, i)?,
            c if plain(c) => i + 1,
            _ => return None,
        };
    }
}

/// Words that are keywords where a command's name goes (or start a timed pipeline): the
/// parser reads a compound command or a function there.
fn reserved(word: &str) -> bool {
    matches!(
        word,
        "!" | "{"
            | "}"
            | "case"
            | "do"
            | "done"
            | "elif"
            | "else"
            | "esac"
            | "fi"
            | "for"
            | "if"
            | "in"
            | "then"
            | "until"
            | "while"
            | "[["
            | "]]"
            | "function"
            | "select"
            | "coproc"
            | "time"
    )
}

/// How `brush-parser` splits an assignment word (`NAME=value`, `NAME+=value`): the name and
/// the value; none for a word that is not one.
fn assignment(word: &str) -> Option<(&str, &str)> {
    let bytes = word.as_bytes();
    if !bytes
        .first()
        .is_some_and(|c| *c == b'_' || c.is_ascii_alphabetic())
    {
        return None;
    }
    let name_end = bytes
        .iter()
        .position(|c| !(*c == b'_' || c.is_ascii_alphanumeric()))?;
    let value_start = match &bytes[name_end..] {
        [b'+', b'=', ..] => name_end + 2,
        [b'=', ..] => name_end + 1,
        _ => return None,
    };
    Some((&word[..name_end], &word[value_start..]))
}

/// A reader of the grammar `brush-parser` reads (its rules `program`, `complete_command`,
/// `and_or`, `pipeline`, `simple_command`), for the tokens the fast path makes.
/// It checks that the code parses and gives each simple command to the sink; the lists and
/// pipelines around them change nothing the walk finds.
struct Parser<'a, 's, F> {
    code: &'a str,
    tokens: Vec<Token>,
    /// The next token to read.
    next: usize,
    /// The simple command being read, its items in order.
    items: Vec<Located<'a>>,
    sink: &'s mut F,
}

impl<'a, F: FnMut(&[Located<'a>])> Parser<'a, '_, F> {
    /// The token `k` places ahead, none past the end.
    fn ahead(&self, k: usize) -> Option<Token> {
        self.tokens.get(self.next + k).copied()
    }

    fn bump(&mut self) {
        self.next += 1;
    }

    fn peek_op(&self) -> Option<Op> {
        match self.ahead(0)?.kind {
            Kind::Op(op) => Some(op),
            Kind::Word => None,
        }
    }

    fn peek_word(&self) -> Option<&'a str> {
        let token = self.ahead(0)?;
        let code = self.code;
        (token.kind == Kind::Word).then(|| &code[token.start..token.end])
    }

    fn at_end(&self) -> bool {
        self.next == self.tokens.len()
    }

    fn skip_newlines(&mut self) -> usize {
        let mut count = 0;
        while self.peek_op() == Some(Op::Newline) {
            self.bump();
            count += 1;
        }
        count
    }

    /// The word at the cursor, consumed: its text and place.
    fn word(&mut self) -> Option<(&'a str, Option<(usize, usize)>)> {
        let token = self.ahead(0)?;
        self.next += 1;
        Some((
            &self.code[token.start..token.end],
            Some((token.start, token.end)),
        ))
    }

    /// Complete commands, one or more lines apart, blank lines around them.
    fn program(&mut self) -> Option<()> {
        self.skip_newlines();
        while !self.at_end() {
            self.complete_command()?;
            if self.skip_newlines() == 0 && !self.at_end() {
                return None;
            }
        }
        Some(())
    }

    /// And-or lists, each ended by `;` or `&` (the last one need not be), to the end of a line.
    fn complete_command(&mut self) -> Option<()> {
        loop {
            self.and_or()?;
            if !matches!(self.peek_op(), Some(Op::Semi | Op::Amp)) {
                return Some(());
            }
            self.bump();
            if self.at_end() || self.peek_op() == Some(Op::Newline) {
                return Some(());
            }
        }
    }

    /// Pipelines joined by `&&` and `||` (line breaks may follow either).
    fn and_or(&mut self) -> Option<()> {
        self.pipeline()?;
        while matches!(self.peek_op(), Some(Op::AndIf | Op::OrIf)) {
            self.bump();
            self.skip_newlines();
            self.pipeline()?;
        }
        Some(())
    }

    /// Simple commands joined by `|` (line breaks may follow it).
    fn pipeline(&mut self) -> Option<()> {
        self.simple_command()?;
        while self.peek_op() == Some(Op::Pipe) {
            self.bump();
            self.skip_newlines();
            self.simple_command()?;
        }
        Some(())
    }

    /// Redirects and assignments, then the name (not a keyword), then redirects and words.
    fn simple_command(&mut self) -> Option<()> {
        self.items.clear();
        while let Some(item) = self.redirect_or_assignment(true)? {
            self.items.push(item);
        }
        match self.peek_word() {
            Some(word) if reserved(word) => return None,
            Some(_) => {
                let (word, loc) = self.word()?;
                self.items.push(Located {
                    item: Item::Word(word),
                    loc,
                });
                loop {
                    if let Some(item) = self.redirect_or_assignment(false)? {
                        self.items.push(item);
                    } else if self.peek_word().is_some() {
                        let (word, loc) = self.word()?;
                        self.items.push(Located {
                            item: Item::Word(word),
                            loc,
                        });
                    } else {
                        break;
                    }
                }
            }
            None if self.items.is_empty() => return None,
            None => {}
        }
        (self.sink)(&self.items);
        Some(())
    }

    /// A redirect or an assignment word at the cursor, consumed; `Some(None)` when the cursor
    /// is at neither, none when the command is outside the subset. After the name, an
    /// assignment is a word of the command (`export X=1`).
    fn redirect_or_assignment(&mut self, in_prefix: bool) -> Option<Option<Located<'a>>> {
        if let Some(redirect) = self.redirect()? {
            return Some(Some(Located {
                item: redirect,
                loc: None,
            }));
        }
        let Some((name, value)) = self.peek_word().and_then(assignment) else {
            return Some(None);
        };
        let (word, loc) = self.word()?;
        let item = if in_prefix {
            Item::Scalar(name, value)
        } else {
            Item::Word(word)
        };
        Some(Some(Located { item, loc }))
    }

    /// A redirect at the cursor, consumed (`Some(None)` when there is none).
    fn redirect(&mut self) -> Option<Option<Item<'a>>> {
        let mut op_at = 0;
        let mut fd = None;
        // A number written against a `<` or `>` operator is the descriptor it redirects.
        if let (Some(number), Some(op)) = (self.ahead(0), self.ahead(1))
            && number.kind == Kind::Word
            && matches!(op.kind, Kind::Op(Op::File(_)))
            && number.end == op.start
        {
            let digits = &self.code[number.start..number.end];
            if digits.bytes().all(|c| c.is_ascii_digit()) {
                // A number too large for the parser's descriptor type panics it.
                if digits.len() > 9 {
                    return None;
                }
                fd = Some(digits.parse().ok()?);
                op_at = 1;
            }
        }
        let op = match self.ahead(op_at).map(|t| t.kind) {
            Some(Kind::Op(op @ (Op::File(_) | Op::OutputAndError))) => op,
            _ => return Some(None),
        };
        // A redirect without a word after it does not parse.
        if self.ahead(op_at + 1)?.kind != Kind::Word {
            return None;
        }
        for _ in 0..=op_at {
            self.bump();
        }
        let (target, _) = self.word()?;
        Some(Some(match op {
            Op::File(kind @ (FileKind::DuplicateInput | FileKind::DuplicateOutput)) => {
                Item::Duplicate(kind.ast(), target)
            }
            Op::File(kind) => Item::ToFile(fd, kind.ast(), target),
            Op::OutputAndError => Item::OutputAndError(target),
            _ => unreachable!("only redirect operators reach here"),
        }))
    }
}

/// The facts of a raw word as [`crate::words::facts`] finds them, for words in the subset:
/// plain text, `'…'`, `"…"`, `$(…)` and `$NAME`, with a `~` only as a whole word or before a
/// `/` at its start. None for any other word.
pub(crate) fn word_facts(raw: &str) -> Option<WordFacts> {
    let code = raw.as_bytes();
    let mut literal = Some(String::with_capacity(raw.len()));
    let mut facts = WordFacts::default();
    let push = |literal: &mut Option<String>, text: &str| {
        if let Some(value) = literal {
            value.push_str(text);
        }
    };
    let mut i = 0;
    // `~` at the start is the home directory (a tilde expansion the engine keeps as written);
    // `~user`, `~+`, `~2` and the like are left to the parser.
    if code.first() == Some(&b'~') && !matches!(code.get(1), None | Some(b'/')) {
        return None;
    }
    while let Some(&c) = code.get(i) {
        match c {
            b'\'' => {
                let end = single_quoted_end(code, i)?;
                push(&mut literal, &raw[i + 1..end - 1]);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                loop {
                    match *code.get(j)? {
                        b'"' => break,
                        b'$' => {
                            let end = dollar_end(code, j)?;
                            expansion(raw, j, end, &mut literal, &mut facts);
                            j = end;
                        }
                        c if quotable(c) => {
                            let run =
                                run_end(code, j, |c| !matches!(c, b'"' | b'$') && quotable(c));
                            push(&mut literal, &raw[j..run]);
                            j = run;
                        }
                        _ => return None,
                    }
                }
                i = j + 1;
            }
            b'$' => {
                let end = dollar_end(code, i)?;
                expansion(raw, i, end, &mut literal, &mut facts);
                i = end;
            }
            c if plain(c) => {
                let run = run_end(code, i, plain);
                push(&mut literal, &raw[i..run]);
                i = run;
            }
            _ => return None,
        }
    }
    facts.literal = literal;
    Some(facts)
}

/// Where the run of bytes from `from` that `keep` accepts ends.
fn run_end(code: &[u8], from: usize, keep: impl Fn(u8) -> bool) -> usize {
    code[from..]
        .iter()
        .position(|&c| !keep(c))
        .map_or(code.len(), |n| from + n)
}

/// An expansion `raw[start..end]` (`$(…)` or `$NAME`): its value is known only at run time; a
/// substitution's code runs.
fn expansion(
    raw: &str,
    start: usize,
    end: usize,
    literal: &mut Option<String>,
    facts: &mut WordFacts,
) {
    *literal = None;
    if raw.as_bytes()[start + 1] == b'(' {
        facts.code.push(raw[start + 2..end - 1].to_string());
    }
}
