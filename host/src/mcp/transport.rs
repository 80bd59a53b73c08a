//! Newline-delimited JSON-RPC framing for the MCP server.
//!
//! rmcp's own stdio transport (`AsyncRwTransport`) drops a line that is not JSON without a word
//! (rmcp issue 938) and answers well-formed JSON that is no MCP message with an `Invalid Request`
//! that has no `id`. JSON-RPC 2.0 wants a `Parse error` (-32700) with `"id": null` for the first,
//! and a client waiting for an answer to a request with a readable `id` should get one. So this
//! transport does the framing itself and otherwise hands every message to rmcp unchanged: the
//! protocol (lifecycle, dispatch, cancellation, notifications) stays rmcp's.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ErrorCode, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

type Writer<W> = Arc<Mutex<Option<W>>>;
type PendingWrite = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

/// One JSON-RPC message per line in, one per line out.
pub(crate) struct LineTransport<R, W> {
    reader: BufReader<R>,
    /// The line being read. A read cancelled half-way (rmcp polls `receive` inside `select!`)
    /// leaves its bytes here for the next call to finish.
    line: Vec<u8>,
    /// Dropping the rest of an oversized line.
    discarding: bool,
    /// The `id` read from the start of the oversized line being dropped, if it could be.
    oversized_id: Option<Value>,
    eof: bool,
    writer: Writer<W>,
    /// An error reply to a bad line, kept here until written so that a cancelled `receive`
    /// neither loses nor repeats it.
    reply: Option<PendingWrite>,
    /// Cancelled once the client is gone: its input ended or failed, or a write to it failed.
    client_gone: CancellationToken,
    /// A request has opened the session: `initialize`, or one that carries the inline
    /// lifecycle's `_meta`.
    opened: bool,
}

/// The `_meta` key of a request that opens a session without `initialize` (2026-07-28).
const INLINE_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// Framing over `reader`/`writer`; `client_gone` is cancelled when the client is gone.
    pub(crate) fn new(reader: R, writer: W, client_gone: CancellationToken) -> Self {
        Self {
            reader: BufReader::new(reader),
            line: Vec::new(),
            discarding: false,
            oversized_id: None,
            eof: false,
            writer: Arc::new(Mutex::new(Some(writer))),
            reply: None,
            client_gone,
            opened: false,
        }
    }

    /// A message before the session is open: rmcp reads a request that is not `initialize` as
    /// the 2026-07-28 revision's inline lifecycle and, without that revision's `_meta`, answers
    /// that `_meta` fields are missing, which tells a client of an earlier revision nothing.
    /// Such a request is answered here, saying the session is not initialized.
    fn before_opening(&mut self, decoded: Decoded) -> Decoded {
        let value: Value = serde_json::from_slice(&self.line).unwrap_or(Value::Null);
        let (Some(id), Some(method)) = (
            value
                .get("id")
                .filter(|id| id.is_string() || id.is_number()),
            value.get("method").and_then(Value::as_str),
        ) else {
            return decoded;
        };
        let inline = value
            .pointer("/params/_meta")
            .and_then(|meta| meta.get(INLINE_VERSION_KEY))
            .is_some();
        if inline || matches!(method, "initialize" | "server/discover") {
            self.opened = true;
            return decoded;
        }
        if method == "ping" {
            return decoded;
        }
        Decoded::Reply(error_frame(
            id.clone(),
            ErrorCode::INVALID_REQUEST,
            &format!(
                "Invalid request: the session is not initialized; send initialize before \
                 {method} (or, with protocol revision 2026-07-28, the request's _meta fields \
                 {INLINE_VERSION_KEY} and io.modelcontextprotocol/clientCapabilities)"
            ),
        ))
    }

    /// The end of the input: the client is gone.
    fn gone(&self) -> Option<ClientJsonRpcMessage> {
        self.client_gone.cancel();
        None
    }

    /// Read up to and including the next newline into `self.line`, never letting it grow past
    /// the line limit. Cancellation safe: nothing is consumed from the reader without being
    /// recorded in `self`.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let (consumed, step) = {
                let available = match self.reader.fill_buf().await {
                    Ok(available) => available,
                    Err(e) => return LineRead::Io(e),
                };
                if available.is_empty() {
                    return LineRead::Eof;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                let step = if self.discarding {
                    if newline.is_some() {
                        Step::EndDiscard
                    } else {
                        Step::More
                    }
                } else if self.line.len().saturating_add(take) > DEFAULT_MAX_LINE_LENGTH {
                    self.oversized_id = id_before_cut(&self.line);
                    self.line.clear();
                    if newline.is_some() {
                        Step::Oversized
                    } else {
                        Step::StartDiscard
                    }
                } else {
                    self.line.extend_from_slice(&available[..take]);
                    if newline.is_some() {
                        Step::Line
                    } else {
                        Step::More
                    }
                };
                (take, step)
            };
            self.reader.consume(consumed);
            match step {
                Step::Line => return LineRead::Line,
                Step::More => {}
                Step::EndDiscard => self.discarding = false,
                Step::Oversized => return LineRead::Oversized,
                Step::StartDiscard => {
                    self.discarding = true;
                    return LineRead::Oversized;
                }
            }
        }
    }

    fn queue_reply(&mut self, frame: Vec<u8>) {
        self.reply = Some(Box::pin(write_frame(self.writer.clone(), frame)));
    }
}

enum LineRead {
    Line,
    Oversized,
    Eof,
    Io(io::Error),
}

enum Step {
    Line,
    More,
    EndDiscard,
    Oversized,
    StartDiscard,
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        let frame = serde_json::to_vec(&item).map(|mut frame| {
            frame.push(b'\n');
            frame
        });
        let writer = self.writer.clone();
        let client_gone = self.client_gone.clone();
        async move {
            let written = write_frame(writer, frame?).await;
            if written.is_err() {
                client_gone.cancel();
            }
            written
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if let Some(reply) = self.reply.as_mut() {
                let written = reply.await;
                self.reply = None;
                if let Err(e) = written {
                    tracing::error!("cannot write an error reply: {e}");
                    return self.gone();
                }
            }
            if self.eof {
                return self.gone();
            }
            match self.read_line().await {
                LineRead::Line => {}
                // A last line without a newline still counts.
                LineRead::Eof => {
                    self.eof = true;
                    if self.line.is_empty() {
                        return self.gone();
                    }
                }
                LineRead::Oversized => {
                    let id = self.oversized_id.take();
                    match &id {
                        Some(id) => tracing::warn!(
                            %id,
                            "discarding an incoming message longer than {DEFAULT_MAX_LINE_LENGTH} bytes"
                        ),
                        None => tracing::warn!(
                            "discarding an incoming message longer than \
                             {DEFAULT_MAX_LINE_LENGTH} bytes; no id could be read before the \
                             limit, so its answer has a null id"
                        ),
                    }
                    let message = format!(
                        "Invalid request: message longer than {DEFAULT_MAX_LINE_LENGTH} bytes"
                    );
                    self.queue_reply(error_frame(
                        id.unwrap_or(Value::Null),
                        ErrorCode::INVALID_REQUEST,
                        &message,
                    ));
                    continue;
                }
                LineRead::Io(e) => {
                    tracing::error!("cannot read the MCP input: {e}");
                    return self.gone();
                }
            }
            let decoded = decode(&self.line);
            let decoded = match decoded {
                Decoded::Message(_) if !self.opened => self.before_opening(decoded),
                decoded => decoded,
            };
            self.line.clear();
            match decoded {
                Decoded::Message(message) => return Some(*message),
                Decoded::Skip => {}
                Decoded::Reply(frame) => self.queue_reply(frame),
            }
        }
    }

    async fn close(&mut self) -> io::Result<()> {
        let mut writer = self.writer.lock().await;
        if let Some(mut w) = writer.take() {
            w.flush().await?;
            // Lets an in-process peer see the end of the stream; a no-op on stdout.
            let _ = w.shutdown().await;
        }
        Ok(())
    }
}

async fn write_frame<W: AsyncWrite + Unpin>(writer: Writer<W>, frame: Vec<u8>) -> io::Result<()> {
    let mut writer = writer.lock().await;
    let Some(w) = writer.as_mut() else {
        return Err(io::Error::new(
            io::ErrorKind::NotConnected,
            "the MCP transport is closed",
        ));
    };
    w.write_all(&frame).await?;
    w.flush().await
}

enum Decoded {
    Message(Box<ClientJsonRpcMessage>),
    /// Nothing to deliver or answer (a blank line, a malformed notification).
    Skip,
    /// A JSON-RPC error frame to write back.
    Reply(Vec<u8>),
}

/// What a line means: a message for rmcp, or the JSON-RPC error that answers it.
fn decode(line: &[u8]) -> Decoded {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // RFC 8259 lets a parser ignore a leading byte order mark.
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Decoded::Skip;
    }
    let error = match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
        Ok(message) => return Decoded::Message(Box::new(message)),
        Err(e) => e,
    };
    if error.to_string().starts_with("number out of range")
        && let Some(stood_in) = super::big_numbers::stand_in(line)
    {
        return decode(&stood_in);
    }
    if error.is_syntax() || error.is_eof() || error.is_io() {
        tracing::debug!("unparsable MCP input: {error}");
        let message = format!("Parse error: {error}");
        return Decoded::Reply(error_frame(Value::Null, ErrorCode::PARSE_ERROR, &message));
    }
    // Well-formed JSON that is no message rmcp understands.
    let value: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
    let method = value.get("method").and_then(Value::as_str);
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned();
    match (id, method) {
        // A notification gets no reply, not even an error.
        (None, Some(method)) if value.get("id").is_none() => {
            tracing::debug!("ignoring a malformed {method} notification: {error}");
            Decoded::Skip
        }
        (id, _) => {
            let message = format!("Invalid request: {error}");
            Decoded::Reply(error_frame(
                id.unwrap_or(Value::Null),
                ErrorCode::INVALID_REQUEST,
                &message,
            ))
        }
    }
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

/// A JSON-RPC error response. Written as raw JSON because rmcp's `JsonRpcError` leaves out an
/// unknown `id` where JSON-RPC 2.0 requires `"id": null`.
fn error_frame(id: Value, code: ErrorCode, message: &str) -> Vec<u8> {
    let frame = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code.0, "message": message },
    });
    let mut bytes = serde_json::to_vec(&frame).expect("a JSON value serializes");
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(line: &str) -> Value {
        match decode(line.as_bytes()) {
            Decoded::Reply(frame) => serde_json::from_slice(&frame).unwrap(),
            Decoded::Message(m) => panic!("decoded as a message: {m:?}"),
            Decoded::Skip => panic!("skipped"),
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
        assert!(matches!(decode(b"  \r\n"), Decoded::Skip));
        assert!(matches!(
            decode(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":7}"#),
            Decoded::Skip
        ));
    }

    #[test]
    fn messages_pass_through_with_crlf_and_bom() {
        let line = "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n";
        assert!(matches!(decode(line.as_bytes()), Decoded::Message(_)));
    }
}
