//! Finding the number tokens of JSON text without parsing it.
//!
//! Shared, through `#[path]`, by the guest's JSON reading (`json.rs`) and the MCP server's
//! handling of numbers out of `f64` range (`host/src/mcp/big_numbers.rs`), so that both see the
//! same tokens.

/// The byte ranges of the number tokens of JSON text, outside strings, in order.
pub(crate) fn number_tokens(text: &[u8]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let mut at = 0;
    let mut in_string = false;
    std::iter::from_fn(move || {
        while at < text.len() {
            let b = text[at];
            if in_string {
                match b {
                    b'\\' => at += 1,
                    b'"' => in_string = false,
                    _ => {}
                }
            } else if b == b'"' {
                in_string = true;
            } else if b == b'-' || b.is_ascii_digit() {
                let start = at;
                while at < text.len()
                    && matches!(text[at], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    at += 1;
                }
                return Some(start..at);
            }
            at += 1;
        }
        None
    })
}
