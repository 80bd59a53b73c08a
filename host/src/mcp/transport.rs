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
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::decode::{self, Decoded, MAX_MESSAGE_BYTES, Refusal};

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
    /// The answer to the oversized line being dropped, for the `id` read from its start.
    oversized: Option<Refusal>,
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
            oversized: None,
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
    fn before_opening(&mut self, decoded: Received) -> Received {
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
        Received::Reply(Refusal::new(
            id.clone(),
            ErrorCode::INVALID_REQUEST,
            format!(
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
                } else if self.line.len().saturating_add(take) > MAX_MESSAGE_BYTES {
                    self.oversized = Some(decode::oversized(&self.line));
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
                    if let Some(refusal) = self.oversized.take() {
                        self.queue_reply(refusal.frame());
                    }
                    continue;
                }
                LineRead::Io(e) => {
                    tracing::error!("cannot read the MCP input: {e}");
                    return self.gone();
                }
            }
            let received = match decode::decode(&self.line) {
                Decoded::Message { message, .. } => Received::Message(message),
                Decoded::Blank | Decoded::Ignored => Received::Skip,
                Decoded::Refused(refusal) => Received::Reply(refusal),
            };
            let received = match received {
                Received::Message(_) if !self.opened => self.before_opening(received),
                received => received,
            };
            self.line.clear();
            match received {
                Received::Message(message) => return Some(*message),
                Received::Skip => {}
                Received::Reply(refusal) => self.queue_reply(refusal.frame()),
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

/// What a line brings: a message for rmcp, nothing, or an error to answer it with.
enum Received {
    Message(Box<ClientJsonRpcMessage>),
    /// A blank line or a malformed notification.
    Skip,
    Reply(Refusal),
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
