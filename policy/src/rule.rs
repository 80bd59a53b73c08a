//! One rule: `Bash(PATTERN)` over a command's words, or `Write(GLOB)` over a file it writes.

use std::fmt;

/// How a word known only at run time starts, as rules see it.
pub(crate) const DYNAMIC: char = '\u{0}';

/// A rule as read from a file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pattern {
    /// Words of a command: exact words, `*` (any number of words) and one-word globs.
    Command(Vec<Token>),
    /// A path glob for written files.
    Write(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Token {
    Word(String),
    /// A word holding `*`: matches one word by glob.
    Glob(String),
    /// `*` alone: any number of words.
    Rest,
}

/// Why a rule did not parse.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleError(pub String);

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a rule names: one of this tool's, or another tool's (skipped).
pub(crate) enum Parsed {
    Mine(Pattern),
    OtherTool,
}

/// Parse `rule` (`Bash(git push *)`, `Write(./src/**)`, `Edit(…)`).
pub(crate) fn parse(rule: &str) -> Result<Parsed, RuleError> {
    let rule = rule.trim();
    let (tool, inner) = match rule.find('(') {
        Some(open) => {
            let Some(inner) = rule[open + 1..].strip_suffix(')') else {
                return Err(RuleError(format!(
                    "rule {rule:?} has no closing parenthesis"
                )));
            };
            (&rule[..open], Some(inner))
        }
        None => (rule, None),
    };
    if tool.is_empty() || !tool.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(RuleError(format!(
            "rule {rule:?} must be a tool name with an optional (pattern), e.g. Bash(git status)"
        )));
    }
    match tool {
        "Bash" => {
            let inner = inner.unwrap_or("*").trim();
            let inner = inner.strip_suffix(":*").map_or_else(
                || inner.to_string(),
                |prefix| format!("{} *", prefix.trim_end()),
            );
            let words = split(&inner).map_err(|e| RuleError(format!("rule {rule:?}: {e}")))?;
            if words.is_empty() {
                return Ok(Parsed::Mine(Pattern::Command(vec![Token::Rest])));
            }
            let tokens = words
                .into_iter()
                .map(|(word, quoted)| {
                    if !quoted && word == "*" {
                        Token::Rest
                    } else if !quoted && word.contains('*') {
                        Token::Glob(word)
                    } else {
                        Token::Word(word)
                    }
                })
                .collect();
            Ok(Parsed::Mine(Pattern::Command(tokens)))
        }
        "Write" | "Edit" => {
            let glob = inner.map(str::trim).unwrap_or("**");
            if glob.is_empty() {
                return Err(RuleError(format!("rule {rule:?} names no path")));
            }
            Ok(Parsed::Mine(Pattern::Write(glob.to_string())))
        }
        _ => Ok(Parsed::OtherTool),
    }
}

/// Split a pattern into words at whitespace; quotes group a word (and make `*` literal).
fn split(text: &str) -> Result<Vec<(String, bool)>, String> {
    let mut words = Vec::new();
    let mut current: Option<(String, bool)> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if let Some(word) = current.take() {
                    words.push(word);
                }
            }
            '\'' | '"' => {
                let word = current.get_or_insert_with(|| (String::new(), false));
                word.1 = true;
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some(other) => word.0.push(other),
                        None => return Err(format!("unclosed {c} quote")),
                    }
                }
            }
            other => current
                .get_or_insert_with(|| (String::new(), false))
                .0
                .push(other),
        }
    }
    words.extend(current);
    Ok(words)
}

/// How a pattern covered each word of a command it matched: true where a literal word of the
/// pattern matched it, false where `*` or a glob did.
pub(crate) type Coverage = Vec<bool>;

/// Match `tokens` against `words`. `loose`: a short-flag cluster in the pattern (`-rf`) matches
/// any cluster holding its letters (deny and ask rules).
pub(crate) fn match_words<S: AsRef<str>>(
    tokens: &[Token],
    words: &[S],
    loose: bool,
) -> Option<Coverage> {
    let mut coverage = Vec::with_capacity(words.len());
    if go(tokens, words, loose, &mut coverage) {
        Some(coverage)
    } else {
        None
    }
}

fn go<S: AsRef<str>>(tokens: &[Token], words: &[S], loose: bool, coverage: &mut Coverage) -> bool {
    let Some((token, rest)) = tokens.split_first() else {
        return words.is_empty();
    };
    match token {
        Token::Rest => {
            // Shortest first; backtrack by taking one more word each time.
            for taken in 0..=words.len() {
                let mark = coverage.len();
                coverage.extend(std::iter::repeat_n(false, taken));
                if go(rest, &words[taken..], loose, coverage) {
                    return true;
                }
                coverage.truncate(mark);
            }
            false
        }
        Token::Word(expected) => match words.split_first() {
            Some((word, more)) if word_matches(expected, word.as_ref(), loose) => {
                coverage.push(true);
                go(rest, more, loose, coverage) || {
                    coverage.pop();
                    false
                }
            }
            _ => false,
        },
        Token::Glob(glob) => match words.split_first() {
            Some((word, more))
                if glob_match(glob.as_bytes(), word.as_ref().as_bytes(), false)
                    || loose && word.as_ref().starts_with(DYNAMIC) =>
            {
                coverage.push(false);
                go(rest, more, loose, coverage) || {
                    coverage.pop();
                    false
                }
            }
            _ => false,
        },
    }
}

fn word_matches(expected: &str, word: &str, loose: bool) -> bool {
    if expected == word {
        return true;
    }
    // A word known only at run time may be any word, for deny and ask rules.
    if loose && word.starts_with(DYNAMIC) {
        return true;
    }
    loose
        && short_flags(expected).is_some_and(|letters| {
            short_flags(word).is_some_and(|have| letters.chars().all(|l| have.contains(l)))
        })
}

/// The letters of a short-flag cluster (`-rf` → `rf`).
pub(crate) fn short_flags(word: &str) -> Option<&str> {
    let letters = word.strip_prefix('-')?;
    (!letters.is_empty() && letters.chars().all(|c| c.is_ascii_alphabetic())).then_some(letters)
}

/// `*` matches any run of characters (`/` too unless `path`), `?` one character; with `path`,
/// `**` matches across `/`.
pub(crate) fn glob_match(glob: &[u8], text: &[u8], path: bool) -> bool {
    let (mut g, mut t) = (0, 0);
    // Where the last `*` was, to backtrack to.
    let mut star: Option<(usize, usize, bool)> = None;
    while t < text.len() {
        if g < glob.len() {
            match glob[g] {
                b'*' => {
                    let double = path && glob.get(g + 1) == Some(&b'*');
                    g += if double { 2 } else { 1 };
                    // `**/` also matches no directory at all.
                    if double
                        && glob.get(g) == Some(&b'/')
                        && glob_match(&glob[g + 1..], &text[t..], path)
                    {
                        return true;
                    }
                    star = Some((g, t, double || !path));
                    continue;
                }
                b'?' if !(path && text[t] == b'/') => {
                    g += 1;
                    t += 1;
                    continue;
                }
                c if c == text[t] => {
                    g += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sg, st, crosses)) if crosses || text[st] != b'/' => {
                star = Some((sg, st + 1, crosses));
                g = sg;
                t = st + 1;
            }
            _ => return false,
        }
    }
    while g < glob.len() && glob[g] == b'*' {
        g += 1;
    }
    g == glob.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(rule: &str) -> Vec<Token> {
        match parse(rule).unwrap() {
            Parsed::Mine(Pattern::Command(t)) => t,
            _ => panic!("not a command rule"),
        }
    }

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn prefix_and_exact_rules() {
        let t = tokens("Bash(npm run test:*)");
        assert!(match_words(&t, &words("npm run test"), false).is_some());
        assert!(match_words(&t, &words("npm run test --watch"), false).is_some());
        assert!(match_words(&t, &words("npm run testing"), false).is_none());
        let exact = tokens("Bash(git status)");
        assert!(match_words(&exact, &words("git status"), false).is_some());
        assert!(match_words(&exact, &words("git status -s"), false).is_none());
        assert_eq!(
            match_words(&tokens("Bash(git *)"), &words("git -c x log"), false),
            Some(vec![true, false, false, false])
        );
    }

    #[test]
    fn loose_flag_clusters() {
        let t = tokens("Bash(rm -rf *)");
        assert!(match_words(&t, &words("rm -fr x"), true).is_some());
        assert!(match_words(&t, &words("rm -rfv x"), true).is_some());
        assert!(match_words(&t, &words("rm -fr x"), false).is_none());
    }

    #[test]
    fn path_globs() {
        assert!(glob_match(b"/a/**", b"/a/b/c", true));
        assert!(glob_match(
            b"**/.git/hooks/**",
            b"/r/.git/hooks/pre-commit",
            true
        ));
        assert!(glob_match(b"/a/*", b"/a/b", true));
        assert!(!glob_match(b"/a/*", b"/a/b/c", true));
        assert!(glob_match(b"/a/**/x", b"/a/x", true));
        assert!(glob_match(b"--output=*", b"--output=/x/y", false));
    }

    #[test]
    fn bad_rules() {
        assert!(parse("Bash(git").is_err());
        assert!(parse("Bash(git 'x)").is_err());
        assert!(parse("(x)").is_err());
        assert!(matches!(parse("Read(~/.ssh)"), Ok(Parsed::OtherTool)));
    }
}
