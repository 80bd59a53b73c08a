//! Taking a session over: a new `--stdio` connection whose `hello` names a session of this
//! machine is relayed to that session's server through its socket, byte for byte, instead of
//! starting a server of its own.
//!
//! A server started with a reconnect grace listens on `<session dir>/<session>.sock`, a
//! directory only its user may enter. The session's name (96 random bits, told only to its
//! client in `hello`'s answer) is what a connection needs to find it.

use std::path::{Path, PathBuf};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How much of a connection's start is looked at for a `hello` naming a session: a `hello` is
/// far shorter; a longer first line is served as it would be anyway.
const FIRST_LINE_BYTES: usize = 64 * 1024;

/// The socket of `session` in `dir`.
pub fn session_socket(dir: &Path, session: &str) -> PathBuf {
    dir.join(format!("{session}.sock"))
}

/// A session name as servers make them: hexadecimal digits only, so a name read from a client
/// never leaves the directory.
fn plausible_session(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What a new connection's first line asks for.
#[derive(Debug)]
pub enum FirstContact {
    /// A `hello` naming a session whose server is listening here: relay to it.
    Resume(tokio::net::UnixStream),
    /// Anything else (a new session, a session not found here, not a `hello` at all): served
    /// by a server of this process, which answers it as usual.
    Serve,
}

/// Reads the start of `input` into `seen` (up to the end of the first line, or
/// [`FIRST_LINE_BYTES`]) and tells whether it resumes a session found in `dir`. Whatever the
/// answer, `seen` holds bytes already taken from `input`: they come first in what follows.
pub async fn first_contact<R: AsyncRead + Unpin>(
    input: &mut R,
    seen: &mut Vec<u8>,
    dir: Option<&Path>,
) -> std::io::Result<FirstContact> {
    let mut chunk = [0u8; 8192];
    while !seen.contains(&b'\n') && seen.len() < FIRST_LINE_BYTES {
        let n = input.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&chunk[..n]);
    }
    let (Some(dir), Some(session)) = (dir, named_session(seen)) else {
        return Ok(FirstContact::Serve);
    };
    match tokio::net::UnixStream::connect(session_socket(dir, &session)).await {
        Ok(stream) => Ok(FirstContact::Resume(stream)),
        // No such session here (any more): the server answers `hello` with the refusal.
        Err(err) => {
            tracing::debug!(%err, %session, "no session socket to resume");
            Ok(FirstContact::Serve)
        }
    }
}

/// The session a first line's `hello` names, if it is one.
fn named_session(seen: &[u8]) -> Option<String> {
    let end = seen.iter().position(|&b| b == b'\n')?;
    let message: super::wire::Incoming = serde_json::from_slice(&seen[..end]).ok()?;
    if message.method.as_deref() != Some("hello") {
        return None;
    }
    let session = message.params?.get("session")?.as_str()?.to_string();
    plausible_session(&session).then_some(session)
}

/// Relays `input` (after `seen`) to `session` and its answers to `output`, until the session's
/// server closes the connection (it ended, or another connection took it over). The end of
/// `input` is passed on as the end of the socket's input: the server then treats the
/// connection as lost.
pub async fn relay<R, W>(
    seen: Vec<u8>,
    mut input: R,
    mut output: W,
    session: tokio::net::UnixStream,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let (mut from_server, mut to_server) = session.into_split();
    to_server.write_all(&seen).await?;
    let up = tokio::spawn(async move {
        let copied = tokio::io::copy(&mut input, &mut to_server).await;
        let _ = to_server.shutdown().await;
        copied
    });
    let down = tokio::io::copy(&mut from_server, &mut output).await;
    let _ = output.flush().await;
    up.abort();
    down.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_hello_naming_a_plausible_session_resumes() {
        let line = |s: &str| format!("{s}\n").into_bytes();
        assert_eq!(
            named_session(&line(
                r#"{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1,"session":"00ff"}}"#
            )),
            Some("00ff".to_string())
        );
        for other in [
            r#"{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1,"session":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1,"session":"../x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1,"session":""}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"list","params":{"session":"00ff"}}"#,
            r#"not json"#,
        ] {
            assert_eq!(named_session(&line(other)), None, "{other}");
        }
        // A line not ended yet is no hello.
        assert_eq!(
            named_session(
                br#"{"jsonrpc":"2.0","id":1,"method":"hello","params":{"session":"00ff"}}"#
            ),
            None
        );
    }
}
