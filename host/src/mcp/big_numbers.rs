//! Numbers too large for an `f64`: valid JSON that the MCP layer's parser refuses.
//!
//! rmcp reads messages into `serde_json` values, which cannot hold `1e400`; the whole message would
//! be answered as a parse error with a null id and the call would never reach the tool. The tools
//! read such a number as `JSON.parse` does (±Infinity) and answer with their own validation error,
//! so the host carries it through: before decoding, each out-of-range number is replaced by a
//! string holding its text behind a per-process marker no client can know; when a call's arguments
//! are serialized for the tools, each marked string becomes its number text again.

use std::sync::OnceLock;

#[path = "../../../guest-tools/src/json_tokens.rs"]
mod json_tokens;
use json_tokens::number_tokens;

/// The marker's prefix, JSON-escaped as `serde_json` writes it: a NUL, then a random nonce.
fn marker() -> &'static str {
    static MARKER: OnceLock<String> = OnceLock::new();
    MARKER.get_or_init(|| {
        // Without randomness the nonce is fixed: a client could then forge a marked string, which
        // would only turn its own string argument into a number.
        let hex = dsh_executor::hex::random_token(16)
            .unwrap_or_else(|_| dsh_executor::hex::hex(&[0; 16]));
        format!("\\u0000dsh-number-{hex}:")
    })
}

/// `line` with its out-of-range numbers replaced by marked strings; `None` when it has none.
pub(super) fn stand_in(line: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(line.len() + 64);
    let mut copied = 0;
    for range in number_tokens(line) {
        let token = &line[range.clone()];
        let Some(text) = std::str::from_utf8(token).ok() else {
            continue;
        };
        if text.parse::<f64>().is_ok_and(f64::is_infinite) {
            out.extend_from_slice(&line[copied..range.start]);
            out.push(b'"');
            out.extend_from_slice(marker().as_bytes());
            out.extend_from_slice(token);
            out.push(b'"');
            copied = range.end;
        }
    }
    if copied == 0 {
        return None;
    }
    out.extend_from_slice(&line[copied..]);
    Some(out)
}

/// The number text a marked string stands for; `None` for any other string.
pub(super) fn stood_in(s: &str) -> Option<&str> {
    // `marker()` is JSON-escaped; the string holds the NUL itself.
    let nonce = marker().strip_prefix("\\u0000")?;
    s.strip_prefix('\0')?.strip_prefix(nonce)
}

/// Serialized arguments with every marked string turned back into its number text.
pub(super) fn restore(json: String) -> String {
    let open = format!("\"{}", marker());
    if !json.contains(&open) {
        return json;
    }
    let mut out = String::with_capacity(json.len());
    let mut rest = json.as_str();
    while let Some(at) = rest.find(&open) {
        out.push_str(&rest[..at]);
        let after = &rest[at + open.len()..];
        // A marked string holds only the number's text, so it ends at the next quote.
        let end = after.find('"').unwrap_or(after.len());
        out.push_str(&after[..end]);
        rest = after.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_numbers_travel_as_marked_strings_and_come_back() {
        let line =
            br#"{"id":7,"params":{"arguments":{"t":1e400,"u":-2E+999,"s":"1e400","n":1.5}}}"#;
        let stood_in = stand_in(line).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&stood_in).unwrap();
        assert_eq!(value["id"], 7);
        assert_eq!(value["params"]["arguments"]["s"], "1e400");
        assert_eq!(value["params"]["arguments"]["n"], 1.5);
        let t = value["params"]["arguments"]["t"].as_str().unwrap();
        assert_eq!(super::stood_in(t), Some("1e400"));
        assert_eq!(super::stood_in("1e400"), None);
        let arguments = serde_json::to_string(&value["params"]["arguments"]).unwrap();
        assert_eq!(
            restore(arguments),
            r#"{"t":1e400,"u":-2E+999,"s":"1e400","n":1.5}"#
        );
    }

    #[test]
    fn text_without_big_numbers_is_left_alone() {
        assert!(stand_in(br#"{"a":[1,2e300,"9e999"]}"#).is_none());
        let plain = r#"{"s":"\u0000dsh-number-:1"}"#.to_string();
        assert_eq!(restore(plain.clone()), plain);
    }
}
