//! What one incoming message's text means: the one decoder of both transports.
//!
//! A stdio line and an HTTP request body are the same thing, one JSON-RPC message, so they get
//! the same answers: text that is not JSON is a parse error (-32700) with `"id": null`; JSON
//! that is no message rmcp understands is an invalid request (-32600) answered for its `id`
//! when it has a readable one; a malformed notification gets no answer; a message longer than
//! [`MAX_MESSAGE_BYTES`] is an invalid request answered for the `id` read before the cut; and
//! numbers beyond `f64` reach the tools as their text (see `big_numbers`), so that the tool
//! answers them with its own validation error.

use std::borrow::Cow;

use rmcp::model::{ClientJsonRpcMessage, ErrorCode, RequestId};
use serde_json::Value;

use super::big_numbers;

/// The longest message either transport reads: rmcp's line limit, which HTTP bodies share.
pub(super) const MAX_MESSAGE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// What a message's text means.
pub(super) enum Decoded<'a> {
    /// A message for rmcp, and the text rmcp should read it from: the text given, or a copy in
    /// which out-of-range numbers stand in as marked strings.
    Message {
        message: Box<ClientJsonRpcMessage>,
        text: Cow<'a, [u8]>,
    },
    /// Nothing but white space.
    Blank,
    /// A malformed notification, which gets no answer, not even an error.
    Ignored,
    /// The JSON-RPC error that answers it.
    Refused(Refusal),
}

/// A JSON-RPC error answering a message that cannot be served.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Refusal {
    /// The message's id; null when none could be read.
    pub id: Value,
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    pub(super) fn new(id: Value, code: ErrorCode, message: String) -> Self {
        Self { id, code, message }
    }

    /// The error response. Written as raw JSON because rmcp's `JsonRpcError` leaves out an
    /// unknown `id` where JSON-RPC 2.0 requires `"id": null`.
    pub(super) fn to_json(&self) -> Value {
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": { "code": self.code.0, "message": self.message },
        })
    }

    /// The error response as one line of newline-delimited JSON.
    pub(super) fn frame(&self) -> Vec<u8> {
        let mut bytes = self.to_json().to_string().into_bytes();
        bytes.push(b'\n');
        bytes
    }
}

/// What a message's text means: a message for rmcp, or the JSON-RPC error that answers it.
/// A trailing newline (CRLF too) and a leading byte order mark are not part of the message.
pub(super) fn decode(text: &[u8]) -> Decoded<'_> {
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    // RFC 8259 lets a parser ignore a leading byte order mark.
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    if text.iter().all(u8::is_ascii_whitespace) {
        return Decoded::Blank;
    }
    let error = match serde_json::from_slice::<ClientJsonRpcMessage>(text) {
        Ok(message) => {
            return Decoded::Message {
                message: Box::new(message),
                text: Cow::Borrowed(text),
            };
        }
        Err(e) => e,
    };
    if error.to_string().starts_with("number out of range")
        && let Some(stood_in) = big_numbers::stand_in(text)
    {
        return decode_stood_in(stood_in);
    }
    refuse(text, &error)
}

/// A message whose out-of-range numbers stand in as marked strings.
fn decode_stood_in(text: Vec<u8>) -> Decoded<'static> {
    let message = match serde_json::from_slice::<ClientJsonRpcMessage>(&text) {
        Ok(message) => message,
        Err(e) => return refuse(&text, &e),
    };
    // A marked string is for the tools' arguments: as an id it would go back to the client
    // as a string it never sent, so such an id is refused like any id JSON-RPC cannot carry.
    if let Some(number) = message_id(&message).and_then(stood_in_id) {
        return Decoded::Refused(Refusal::new(
            Value::Null,
            ErrorCode::INVALID_REQUEST,
            format!("Invalid request: the id {number} is out of range"),
        ));
    }
    Decoded::Message {
        message: Box::new(message),
        text: Cow::Owned(text),
    }
}

fn message_id(message: &ClientJsonRpcMessage) -> Option<&RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request) => Some(&request.id),
        ClientJsonRpcMessage::Response(response) => Some(&response.id),
        ClientJsonRpcMessage::Error(error) => error.id.as_ref(),
        ClientJsonRpcMessage::Notification(_) => None,
    }
}

fn stood_in_id(id: &RequestId) -> Option<&str> {
    match id {
        RequestId::String(id) => big_numbers::stood_in(id),
        RequestId::Number(_) => None,
    }
}

/// The answer to text rmcp cannot read as a message.
fn refuse<'a>(text: &[u8], error: &serde_json::Error) -> Decoded<'a> {
    if error.is_syntax() || error.is_eof() || error.is_io() {
        tracing::debug!("unparsable MCP input: {error}");
        return Decoded::Refused(Refusal::new(
            Value::Null,
            ErrorCode::PARSE_ERROR,
            format!("Parse error: {error}"),
        ));
    }
    // Well-formed JSON that is no message rmcp understands.
    let value: Value = serde_json::from_slice(text).unwrap_or(Value::Null);
    let method = value.get("method").and_then(Value::as_str);
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned();
    match (id, method) {
        (None, Some(method)) if value.get("id").is_none() => {
            tracing::debug!("ignoring a malformed {method} notification: {error}");
            Decoded::Ignored
        }
        (id, _) => Decoded::Refused(Refusal::new(
            id.unwrap_or(Value::Null),
            ErrorCode::INVALID_REQUEST,
            format!("Invalid request: {error}"),
        )),
    }
}

/// The answer to a message longer than [`MAX_MESSAGE_BYTES`], of which `prefix` was read: an
/// invalid request for the `id` read before the cut, else for a null id.
pub(super) fn oversized(prefix: &[u8]) -> Refusal {
    let id = id_before_cut(prefix);
    match &id {
        Some(id) => tracing::warn!(
            %id,
            "discarding an incoming message longer than {MAX_MESSAGE_BYTES} bytes"
        ),
        None => tracing::warn!(
            "discarding an incoming message longer than {MAX_MESSAGE_BYTES} bytes; no id could \
             be read before the limit, so its answer has a null id"
        ),
    }
    Refusal::new(
        id.unwrap_or(Value::Null),
        ErrorCode::INVALID_REQUEST,
        format!("Invalid request: message longer than {MAX_MESSAGE_BYTES} bytes"),
    )
}

/// The `id` of a message cut short at the end of `prefix`: its top-level `"id"` member, when that
/// comes complete before the cut and is a string or a number (what JSON-RPC allows).
fn id_before_cut(prefix: &[u8]) -> Option<Value> {
    let mut scan = Scanner {
        text: prefix,
        at: 0,
    };
    scan.expect(b'{')?;
    loop {
        let key = scan.token(Scanner::string)?;
        scan.expect(b':')?;
        let value = scan.token(Scanner::value)?;
        if serde_json::from_slice::<String>(key).ok()? == "id" {
            let id: Value = serde_json::from_slice(value).ok()?;
            return (id.is_string() || id.is_number()).then_some(id);
        }
        scan.expect(b',')?;
    }
}

/// A cursor over JSON text that may be cut anywhere: every step fails (`None`) at the cut.
struct Scanner<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn skip_space(&mut self) {
        while self.text.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_space();
        (*self.text.get(self.at)? == byte).then(|| self.at += 1)
    }

    /// The bytes of the next token, as `step` reads it past leading white space.
    fn token(&mut self, step: fn(&mut Self) -> Option<()>) -> Option<&'a [u8]> {
        self.skip_space();
        let start = self.at;
        step(self)?;
        Some(&self.text[start..self.at])
    }

    fn string(&mut self) -> Option<()> {
        (*self.text.get(self.at)? == b'"').then_some(())?;
        self.at += 1;
        loop {
            match *self.text.get(self.at)? {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                _ => self.at += 1,
            }
        }
    }

    /// Any value; a number or literal only when something follows it before the cut.
    fn value(&mut self) -> Option<()> {
        match *self.text.get(self.at)? {
            b'"' => self.string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.text.get(self.at)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => depth -= 1,
                        _ => {}
                    }
                    self.at += 1;
                    if depth == 0 {
                        return Some(());
                    }
                }
            }
            _ => {
                while !matches!(
                    *self.text.get(self.at)?,
                    b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'
                ) {
                    self.at += 1;
                }
                Some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(line: &str) -> Value {
        match decode(line.as_bytes()) {
            Decoded::Refused(refusal) => serde_json::from_slice(&refusal.frame()).unwrap(),
            Decoded::Message { message, .. } => panic!("decoded as a message: {message:?}"),
            Decoded::Blank => panic!("blank"),
            Decoded::Ignored => panic!("ignored"),
        }
    }

    #[test]
    fn the_id_of_a_cut_message_is_read_when_it_comes_before_the_cut() {
        let id = |prefix: &str| id_before_cut(prefix.as_bytes());
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"a"#),
            Some(7.into())
        );
        assert_eq!(id(r#" { "id" : "a\"b" , "x"#), Some("a\"b".into()));
        assert_eq!(
            id(r#"{"method":"x","params":{"id":1,"s":"}\"]"},"id":-2.5e3,"p"#),
            Some((-2500.0).into())
        );
        // Cut inside the id, before it, or an id JSON-RPC does not allow.
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7"#), None);
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":"ab"#), None);
        assert_eq!(id(r#"{"jsonrpc":"2.0","params":{"command":"xxxx"#), None);
        assert_eq!(id(r#"{"id":null,"x"#), None);
        assert_eq!(id(r#"{"id":{"a":1},"x"#), None);
        assert_eq!(id(r#"[{"id":1},"#), None);
        assert_eq!(id(""), None);
    }

    #[test]
    fn garbage_is_a_parse_error_with_a_null_id() {
        let r = reply("{not json\n");
        assert_eq!(r["id"], Value::Null);
        assert!(r.as_object().unwrap().contains_key("id"));
        assert_eq!(r["error"]["code"], -32700);
        assert_eq!(r["jsonrpc"], "2.0");
    }

    #[test]
    fn an_invalid_request_is_answered_with_its_id() {
        let r = reply(r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#);
        assert_eq!(r["id"], 7);
        assert_eq!(r["error"]["code"], -32600);
    }

    #[test]
    fn json_that_is_no_message_is_an_invalid_request() {
        let r = reply("[1,2]");
        assert_eq!(r["id"], Value::Null);
        assert_eq!(r["error"]["code"], -32600);
    }

    #[test]
    fn blank_lines_and_bad_notifications_get_no_reply() {
        assert!(matches!(decode(b"  \r\n"), Decoded::Blank));
        assert!(matches!(
            decode(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":7}"#),
            Decoded::Ignored
        ));
    }

    #[test]
    fn messages_pass_through_with_crlf_and_bom() {
        let line = "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n";
        let Decoded::Message { text, .. } = decode(line.as_bytes()) else {
            panic!("not a message");
        };
        assert_eq!(*text, *br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    }

    #[test]
    fn out_of_range_numbers_stand_in_for_the_tools() {
        let line = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"timeoutMs":1e400}}}"#;
        let Decoded::Message { text, .. } = decode(line.as_bytes()) else {
            panic!("not a message");
        };
        let value: Value = serde_json::from_slice(&text).unwrap();
        let stood_in = &value["params"]["arguments"]["timeoutMs"];
        assert!(stood_in.as_str().unwrap().ends_with(":1e400"), "{value}");
    }

    #[test]
    fn an_id_out_of_range_is_refused_with_a_null_id() {
        let r = reply(r#"{"jsonrpc":"2.0","id":-1e400,"method":"ping"}"#);
        assert_eq!(r["id"], Value::Null);
        assert_eq!(r["error"]["code"], -32600);
        assert_eq!(
            r["error"]["message"],
            "Invalid request: the id -1e400 is out of range"
        );
        // Too large for rmcp's ids but not for JSON: refused for the id as read.
        let r = reply(r#"{"jsonrpc":"2.0","id":9223372036854775808,"method":"ping"}"#);
        assert_eq!(r["id"], 9223372036854775808u64);
        assert_eq!(r["error"]["code"], -32600);
    }

    #[test]
    fn an_oversized_message_is_refused_for_the_id_before_the_cut() {
        let refusal = oversized(br#"{"jsonrpc":"2.0","id":"x","params":{"command":"aaa"#);
        assert_eq!(refusal.id, "x");
        assert_eq!(refusal.code, ErrorCode::INVALID_REQUEST);
        assert_eq!(
            refusal.message,
            "Invalid request: message longer than 16777216 bytes"
        );
    }
}
