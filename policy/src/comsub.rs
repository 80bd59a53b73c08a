//! Where a command substitution really ends when a `case` inside it has patterns ending in `)`.
//!
//! bash reads `$(case x in x) rm -rf /;; esac)` as one substitution: a pattern's `)` inside a
//! `case` does not close it. The parser the engine uses closes the substitution at the first `)`,
//! so the code after the pattern is never seen as code (the substitution's text does not parse
//! and is only "not analysable"). This finds the bodies as bash does, so that they can be read as
//! probes: checked against deny and ask rules, allowing nothing. It errs on the side of reading
//! more as code, never less; the parser's reading stands for everything else.

/// The bodies of the command substitutions in `code` (nested ones too), read with `case`
/// patterns in mind.
pub(crate) fn bodies(code: &str) -> Vec<&str> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\'' => i = skip_single(bytes, i + 1),
            b'$' if bytes.get(i + 1) == Some(&b'(') && bytes.get(i + 2) != Some(&b'(') => {
                let start = i + 2;
                let end = end_of(bytes, start);
                out.push(&code[start..end.min(bytes.len())]);
                // Nested substitutions are found as the scan goes on inside this one.
                i = start;
            }
            _ => i += 1,
        }
    }
    out
}

/// Whether `code` holds the word `case` (not as part of a longer word such as a path).
pub(crate) fn mentions_case(code: &str) -> bool {
    code.split(|c: char| !is_word_byte(c as u32 as u8) || !c.is_ascii())
        .any(|word| word == "case")
}

/// A byte of a word: anything but a metacharacter or a quote.
fn is_word_byte(c: u8) -> bool {
    !b" \t\n;&|()<>\"'`$\\".contains(&c)
}

/// Past the closing quote of a single-quoted text whose content starts at `from` (the end of
/// the text when it is not closed).
pub(crate) fn skip_single(bytes: &[u8], from: usize) -> usize {
    bytes[from.min(bytes.len())..]
        .iter()
        .position(|&b| b == b'\'')
        .map_or(bytes.len(), |n| from + n + 1)
}

/// Where the substitution whose body starts at `start` ends (its `)`), or the end of the text.
fn end_of(bytes: &[u8], start: usize) -> usize {
    let (mut depth, mut cases) = (0usize, 0usize);
    let mut i = start;
    let mut word_start: Option<usize> = None;
    while i < bytes.len() {
        let c = bytes[i];
        // A word runs to the next metacharacter or quote: `/work/case/x` is no `case`.
        if is_word_byte(c) {
            word_start.get_or_insert(i);
            i += 1;
            continue;
        }
        if let Some(w) = word_start.take() {
            match &bytes[w..i] {
                b"case" => cases += 1,
                b"esac" => cases = cases.saturating_sub(1),
                _ => {}
            }
        }
        match c {
            b'\\' => i += 1,
            b'\'' => {
                i = skip_single(bytes, i + 1);
                continue;
            }
            b'"' => {
                i = end_of_double(bytes, i + 1);
                continue;
            }
            b'$' if bytes.get(i + 1) == Some(&b'(') => {
                i = end_of(bytes, i + 2) + 1;
                continue;
            }
            b'(' => depth += 1,
            b')' if depth > 0 => depth -= 1,
            // A pattern's end inside a `case`.
            b')' if cases > 0 => {}
            b')' => return i,
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

/// Past the closing quote of a double-quoted text starting at `from`.
fn end_of_double(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            b'$' if bytes.get(i + 1) == Some(&b'(') => i = end_of(bytes, i + 2) + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_pattern_does_not_end_the_substitution() {
        assert_eq!(
            bodies(r#"echo "$(case x in x) rm -rf / ; esac)" done"#),
            ["case x in x) rm -rf / ; esac"]
        );
        assert_eq!(bodies("a $(b $(c) d) e"), ["b $(c) d", "c"]);
        assert_eq!(bodies("echo '$(not)' $((1+2))"), Vec::<&str>::new());
        assert_eq!(
            bodies("x=$(case a in (a) ls;; esac)"),
            ["case a in (a) ls;; esac"]
        );
        assert_eq!(bodies("$(unclosed"), ["unclosed"]);
        assert_eq!(
            bodies(r#"echo "$(case x in x) rm -f /w/case/m ;; esac)" x"#),
            ["case x in x) rm -f /w/case/m ;; esac"]
        );
        assert_eq!(bodies("echo $(cat case.txt) x"), ["cat case.txt"]);
        assert!(mentions_case("x=$(case a in a) ls;; esac)"));
        assert!(!mentions_case("rm /work/case/marker case.txt showcase"));
    }
}
