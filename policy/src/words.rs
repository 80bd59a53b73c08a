//! One shell word as bash would expand it: its literal value when it has one, and the code it
//! runs while being expanded (command substitutions, wherever they hide).

use brush_parser::ParserOptions;
use brush_parser::word::{self, ParameterExpr, WordPiece, WordPieceWithSource};

/// What the engine knows of one word.
#[derive(Debug, Default, Clone)]
pub(crate) struct WordFacts {
    /// The value after quote removal, when no expansion changes it at run time.
    pub literal: Option<String>,
    /// An unquoted glob character (`*`, `?`, `[`) or brace expansion is in it.
    pub pattern: bool,
    /// Code bash runs while expanding the word: the text of each `$(…)` and backtick, in order.
    pub code: Vec<String>,
    /// Why the word could not be read at all (it did not parse as a word).
    pub broken: Option<String>,
}

/// The characters that make a word more than plain text (all ASCII: no byte of another
/// character's UTF-8 form is one of them).
const SPECIAL: [bool; 256] = {
    let mut table = [false; 256];
    let special = b"'\"\\$`~*?[{<>(";
    let mut i = 0;
    while i < special.len() {
        table[special[i] as usize] = true;
        i += 1;
    }
    table
};

/// The facts of the raw word `raw` (as it appears in the source, quotes included); with `fast`,
/// a word in the subset [`crate::fast`] reads skips the parser.
pub(crate) fn facts(raw: &str, options: &ParserOptions, fast: bool) -> WordFacts {
    // Most words are plain: nothing in them is quoted, escaped or expanded.
    if !raw.bytes().any(|b| SPECIAL[usize::from(b)]) {
        return WordFacts {
            literal: Some(raw.to_string()),
            ..WordFacts::default()
        };
    }
    if let Some(deep) = too_deep(raw) {
        return deep;
    }
    if fast && let Some(facts) = crate::fast::word_facts(raw) {
        return facts;
    }
    let mut out = WordFacts::default();
    let parsed = std::panic::catch_unwind(|| word::parse(raw, options));
    let Ok(parsed) = parsed else {
        out.broken = Some("a word the parser cannot read".to_string());
        return out;
    };
    match parsed {
        Ok(pieces) => {
            let mut literal = Some(String::new());
            walk(&pieces, false, &mut literal, &mut out, options, fast);
            out.literal = literal;
        }
        Err(_) => out.broken = Some("a word that does not parse".to_string()),
    }
    out
}

/// The facts of an unquoted heredoc body (expansions apply, quotes are literal).
pub(crate) fn heredoc_facts(body: &str, options: &ParserOptions) -> WordFacts {
    if let Some(deep) = too_deep(body) {
        return deep;
    }
    let mut out = WordFacts::default();
    let parsed = std::panic::catch_unwind(|| word::parse_heredoc(body, options));
    let Ok(parsed) = parsed else {
        out.broken = Some("a heredoc the parser cannot read".to_string());
        return out;
    };
    match parsed {
        Ok(pieces) => {
            let mut literal = Some(String::new());
            walk(&pieces, true, &mut literal, &mut out, options, true);
            out.literal = literal;
        }
        Err(_) => out.broken = Some("a heredoc that does not parse".to_string()),
    }
    out
}

/// A word or heredoc body whose brackets nest deeper than the walk allows, counted everywhere
/// (quotes included: a value single-quoted in the command is read again as a word once it is
/// assigned): it is not parsed, since every level is a level of recursion in the readers.
fn too_deep(text: &str) -> Option<WordFacts> {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in text.bytes() {
        match b {
            b'(' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    (deepest > crate::segments::MAX_NESTING).then(|| WordFacts {
        broken: Some(format!(
            "nesting more than {} levels deep",
            crate::segments::MAX_NESTING
        )),
        ..WordFacts::default()
    })
}

fn push(literal: &mut Option<String>, text: &str) {
    if let Some(value) = literal {
        value.push_str(text);
    }
}

fn walk(
    pieces: &[WordPieceWithSource],
    quoted: bool,
    literal: &mut Option<String>,
    out: &mut WordFacts,
    options: &ParserOptions,
    fast: bool,
) {
    for piece in pieces {
        match &piece.piece {
            WordPiece::Text(text) => {
                if !quoted && is_pattern(text) {
                    out.pattern = true;
                }
                push(literal, text);
            }
            WordPiece::SingleQuotedText(text) => push(literal, text),
            WordPiece::AnsiCQuotedText(text) => match ansi_c(text) {
                Some(value) => push(literal, &value),
                None => *literal = None,
            },
            WordPiece::DoubleQuotedSequence(inner)
            | WordPiece::GettextDoubleQuotedSequence(inner) => {
                walk(inner, true, literal, out, options, fast)
            }
            WordPiece::EscapeSequence(text) => {
                // `\x` is `x`; inside double quotes only `\$ \` \" \\ \newline` lose the slash.
                let rest = text.strip_prefix('\\').unwrap_or(text);
                if quoted && !matches!(rest, "$" | "`" | "\"" | "\\" | "\n" | "") {
                    push(literal, text);
                } else if rest != "\n" {
                    push(literal, rest);
                }
            }
            WordPiece::TildeExpansion(tilde) => {
                // The directory is not known here: the word keeps the tilde form, which is a
                // path (as a command name, its base name counts), or stays `~user` when bash
                // finds no such user.
                let text = match tilde {
                    word::TildeExpr::Home => "~".to_string(),
                    word::TildeExpr::UserHome(user) => format!("~{user}"),
                    word::TildeExpr::WorkingDir => "~+".to_string(),
                    word::TildeExpr::OldWorkingDir => "~-".to_string(),
                    _ => {
                        *literal = None;
                        String::new()
                    }
                };
                push(literal, &text);
            }
            WordPiece::ParameterExpansion(expr) => {
                *literal = None;
                for text in parameter_strings(expr) {
                    nested_in(text, out, options, fast);
                }
            }
            WordPiece::CommandSubstitution(code) => {
                *literal = None;
                out.code.push(code.clone());
            }
            WordPiece::BackquotedCommandSubstitution(code) => {
                *literal = None;
                out.code.push(unescape_backquoted(code));
            }
            WordPiece::ArithmeticExpression(expr) => {
                *literal = None;
                nested_in(&expr.value, out, options, fast);
            }
        }
    }
}

/// The code hidden in an expansion's own text (a default value, a pattern, an index, an
/// arithmetic expression), which bash expands as a word.
fn nested_in(text: &str, out: &mut WordFacts, options: &ParserOptions, fast: bool) {
    if !text.contains('$') && !text.contains('`') {
        return;
    }
    let inner = facts(text, options, fast);
    out.code.extend(inner.code);
    if let Some(broken) = inner.broken {
        out.broken.get_or_insert(broken);
    }
}

/// Every string inside a parameter expansion that bash expands in turn.
fn parameter_strings(expr: &ParameterExpr) -> Vec<&str> {
    use ParameterExpr as P;
    let mut strings = Vec::new();
    let parameter = match expr {
        P::Parameter { parameter, .. }
        | P::ParameterLength { parameter, .. }
        | P::Transform { parameter, .. } => Some(parameter),
        P::UseDefaultValues {
            parameter,
            default_value: value,
            ..
        }
        | P::AssignDefaultValues {
            parameter,
            default_value: value,
            ..
        }
        | P::IndicateErrorIfNullOrUnset {
            parameter,
            error_message: value,
            ..
        }
        | P::UseAlternativeValue {
            parameter,
            alternative_value: value,
            ..
        }
        | P::RemoveSmallestSuffixPattern {
            parameter,
            pattern: value,
            ..
        }
        | P::RemoveLargestSuffixPattern {
            parameter,
            pattern: value,
            ..
        }
        | P::RemoveSmallestPrefixPattern {
            parameter,
            pattern: value,
            ..
        }
        | P::RemoveLargestPrefixPattern {
            parameter,
            pattern: value,
            ..
        }
        | P::UppercaseFirstChar {
            parameter,
            pattern: value,
            ..
        }
        | P::UppercasePattern {
            parameter,
            pattern: value,
            ..
        }
        | P::LowercaseFirstChar {
            parameter,
            pattern: value,
            ..
        }
        | P::LowercasePattern {
            parameter,
            pattern: value,
            ..
        } => {
            strings.extend(value.as_deref());
            Some(parameter)
        }
        P::Substring {
            parameter,
            offset,
            length,
            ..
        } => {
            strings.push(offset.value.as_str());
            strings.extend(length.as_ref().map(|l| l.value.as_str()));
            Some(parameter)
        }
        P::ReplaceSubstring {
            parameter,
            pattern,
            replacement,
            ..
        } => {
            strings.push(pattern.as_str());
            strings.extend(replacement.as_deref());
            Some(parameter)
        }
        P::VariableNames { .. } | P::MemberKeys { .. } => None,
    };
    if let Some(word::Parameter::NamedWithIndex { index, .. }) = parameter {
        strings.push(index.as_str());
    }
    strings
}

fn is_pattern(text: &str) -> bool {
    if text.contains(['*', '?']) {
        return true;
    }
    // `[` opens a bracket expression only with a `]` after it (`[` alone is the test command).
    if let Some(open) = text.find('[')
        && text[open + 1..].contains(']')
    {
        return true;
    }
    // Brace expansion: `{a,b}` or `{1..3}`.
    if let Some(open) = text.find('{') {
        let rest = &text[open..];
        if let Some(close) = rest.find('}') {
            let inner = &rest[1..close];
            return inner.contains(',') || inner.contains("..");
        }
    }
    false
}

/// Inside backticks, `\\`, `` \` `` and `\$` stand for the character after the backslash.
fn unescape_backquoted(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&next) = chars.peek()
            && matches!(next, '\\' | '`' | '$')
        {
            out.push(next);
            chars.next();
            continue;
        }
        out.push(c);
    }
    out
}

/// The value of `$'…'` text (without the quotes), as bash decodes it; none for what it would
/// not decode to valid text (a NUL ends the string in bash; that is reported as not literal).
pub(crate) fn ansi_c(text: &str) -> Option<String> {
    let text = text
        .strip_prefix("$'")
        .and_then(|t| t.strip_suffix('\''))
        .unwrap_or(text);
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let simple = match e {
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\x0b'),
            '\\' => Some('\\'),
            '\'' => Some('\''),
            '"' => Some('"'),
            '?' => Some('?'),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (radix, max, first) = match e {
            '0'..='7' => (8, 3, Some(e)),
            'x' => (16, 2, None),
            'u' => (16, 4, None),
            'U' => (16, 8, None),
            'c' => {
                let control = chars.next()?;
                out.push(char::from_u32(control.to_ascii_uppercase() as u32 ^ 0x40)?);
                continue;
            }
            other => {
                out.push('\\');
                out.push(other);
                continue;
            }
        };
        let mut digits = String::new();
        digits.extend(first);
        while digits.len() < max {
            match chars.peek() {
                Some(d) if d.is_digit(radix) => {
                    digits.push(*d);
                    chars.next();
                }
                _ => break,
            }
        }
        if digits.is_empty() {
            out.push('\\');
            out.push(e);
            continue;
        }
        let value = u32::from_str_radix(&digits, radix).ok()?;
        if value == 0 {
            return None;
        }
        // `\xHH` and octal are bytes; above 0x7f they are not one UTF-8 character.
        if matches!(e, '0'..='7' | 'x') && value > 0x7f {
            return None;
        }
        out.push(char::from_u32(value)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(raw: &str) -> Option<String> {
        facts(raw, &ParserOptions::default(), true).literal
    }

    #[test]
    fn quoting_is_removed_as_bash_removes_it() {
        assert_eq!(lit("\"rm\"").as_deref(), Some("rm"));
        assert_eq!(lit("r''m").as_deref(), Some("rm"));
        assert_eq!(lit("\\rm").as_deref(), Some("rm"));
        assert_eq!(lit("$'\\x72m'").as_deref(), Some("rm"));
        assert_eq!(lit("$'\\162m'").as_deref(), Some("rm"));
        assert_eq!(lit("\"a\\b\"").as_deref(), Some("a\\b"));
        assert_eq!(lit("$x"), None);
        assert_eq!(lit("a$(b)"), None);
    }

    #[test]
    fn code_is_found_wherever_it_hides() {
        let o = ParserOptions::default();
        assert_eq!(facts("$(rm x)", &o, true).code, vec!["rm x"]);
        assert_eq!(facts("`rm x`", &o, true).code, vec!["rm x"]);
        assert_eq!(facts("\"a$(rm x)\"", &o, true).code, vec!["rm x"]);
        assert_eq!(facts("${y:-$(rm x)}", &o, true).code, vec!["rm x"]);
        assert_eq!(facts("$(( $(rm x) + 1 ))", &o, true).code, vec!["rm x"]);
        assert_eq!(facts("${a[$(rm x)]}", &o, true).code, vec!["rm x"]);
    }

    #[test]
    fn globs_and_braces_are_patterns_only_unquoted() {
        let o = ParserOptions::default();
        assert!(facts("r?", &o, true).pattern);
        assert!(facts("{rm,x}", &o, true).pattern);
        assert!(!facts("'r?'", &o, true).pattern);
        assert!(!facts("{}", &o, true).pattern);
    }
}
