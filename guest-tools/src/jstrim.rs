//! Blankness as JavaScript's `String.prototype.trim()` sees it.
//!
//! The value checks say "blank after trimming"; JavaScript's whitespace set differs from Rust's
//! `char::is_whitespace` (it includes U+FEFF and excludes U+0085), so it is spelled out here.

/// Whether `c` is ECMAScript WhiteSpace or LineTerminator.
fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{0009}'
            | '\u{000A}'
            | '\u{000B}'
            | '\u{000C}'
            | '\u{000D}'
            | '\u{0020}'
            | '\u{00A0}'
            | '\u{1680}'
            | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// True when `s.trim()` would be empty in JavaScript.
pub fn is_blank(s: &str) -> bool {
    s.chars().all(is_js_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_strings() {
        assert!(is_blank(""));
        assert!(is_blank("   "));
        assert!(is_blank("\t\n\r\u{000B}\u{000C}"));
        assert!(is_blank("\u{00A0}\u{2003}\u{3000}\u{FEFF}\u{2028}"));
    }

    #[test]
    fn non_blank_strings() {
        assert!(!is_blank("ls"));
        assert!(!is_blank("  x  "));
        // NEL is whitespace to Rust but not to JavaScript's trim.
        assert!(!is_blank("\u{0085}"));
        // Zero-width space is not whitespace in either.
        assert!(!is_blank("\u{200B}"));
    }
}
