//! Taking a session over: a new `--stdio` connection whose `hello` names a session of this
//! machine is relayed to that session's server through its socket, byte for byte, instead of
//! starting a server of its own.
//!
//! A server started with a reconnect grace listens on `<session dir>/<session>.sock`, a
//! directory only its user may enter. The session's name finds it; it is no secret (anything
//! of that user that can list the directory, or `/proc/net/unix`, sees it). What takes the
//! session over is its resume key: 256 random bits told only to its client in `hello`'s answer,
//! never written anywhere, and checked by the session's server (in constant time) before a
//! connection is given the session.
//!
//! The relay connects only to a socket of this user found under the session's name itself (a
//! symlink is not followed, another kind of file is not connected to): a file planted under a
//! session's name is never relayed to. And before it passes on a `hello` carrying the key, the
//! socket's server proves it is the session's: it answers a `prove` of the relay's (a random
//! nonce) with its process id and an HMAC-SHA256, under the key, of both; the relay checks that
//! process id is the socket's peer's. A socket of another process put under the session's name
//! (by something of the same user that moved the real one aside) cannot give that proof, even by
//! passing the relay's nonce on to the real server: it is never sent the key.

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

/// A new session's resume key: 256 random bits, in hexadecimal.
pub fn new_resume_key() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|err| {
        std::io::Error::other(format!(
            "no random bits for the session's resume key: {err}"
        ))
    })?;
    Ok(crate::hex::hex(&bytes))
}

/// Whether `given` is `key`, in a time that does not depend on where they differ.
pub fn same_key(key: &str, given: &str) -> bool {
    let (key, given) = (key.as_bytes(), given.as_bytes());
    // A length is no secret: every key is as long.
    if key.len() != given.len() {
        return false;
    }
    let differ = key
        .iter()
        .zip(given)
        .fold(0u8, |differ, (a, b)| differ | (a ^ b));
    std::hint::black_box(differ) == 0
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
    // Without a key, nothing is relayed (nor connected to): this process's own server refuses
    // the hello (what listens under a session's name might not be the session's server, and
    // might answer anything).
    let (Some(dir), Some((session, Some(key)))) = (dir, named_session(seen)) else {
        return Ok(FirstContact::Serve);
    };
    let mut stream = match connect(&session_socket(dir, &session)).await {
        Ok(stream) => stream,
        // No such session here (any more): the server answers `hello` with the refusal.
        Err(err) => {
            tracing::debug!(%err, %session, "no session socket to resume");
            return Ok(FirstContact::Serve);
        }
    };
    match tokio::time::timeout(PROOF_TIMEOUT, proven(&mut stream, &key)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::warn!(%err, %session, "the session's socket is not its server's; not relayed to");
            return Ok(FirstContact::Serve);
        }
        Err(_) => {
            tracing::warn!(%session, "the session's socket gave no proof in time; not relayed to");
            return Ok(FirstContact::Serve);
        }
    }
    Ok(FirstContact::Resume(stream))
}

/// How long the session's server may take to prove itself.
const PROOF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The proof the session's server (process `pid`) gives of holding `key`, for `nonce`.
pub fn proof(key: &str, nonce: &str, pid: u32) -> String {
    let message = format!("dsh-host executor session proof\0{nonce}\0{pid}");
    crate::hex::hex(&hmac_sha256(key.as_bytes(), message.as_bytes()))
}

/// HMAC-SHA256 (RFC 2104).
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(message);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

/// Asks the socket's server to prove it holds `key` and is the socket's peer: the `prove`
/// answer's process id must be the peer's, and its proof the one `key` gives.
async fn proven(stream: &mut tokio::net::UnixStream, key: &str) -> std::io::Result<()> {
    let refused = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    let nonce = new_resume_key()?;
    let request = super::wire::request(
        0,
        "prove",
        super::wire::ProveParams {
            nonce: nonce.clone(),
        },
    );
    stream.write_all(request.as_bytes()).await?;
    // One line, read a byte at a time: nothing after it is the relay's to take.
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < 4096 {
        if stream.read(&mut byte).await? == 0 {
            return Err(refused("it closed the connection".to_string()));
        }
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
    }
    let answer: super::wire::Incoming = serde_json::from_slice(&line)
        .map_err(|err| refused(format!("an answer that is not JSON-RPC: {err}")))?;
    let proved: super::wire::Proof = match (answer.result, answer.error) {
        (Some(result), None) => serde_json::from_value(result)
            .map_err(|err| refused(format!("an answer that is no proof: {err}")))?,
        (_, Some(error)) => return Err(refused(format!("refused: {}", error.message))),
        (None, None) => return Err(refused("an empty answer".to_string())),
    };
    let peer = stream.peer_cred()?.pid();
    if peer != i32::try_from(proved.pid).ok() {
        return Err(refused(format!(
            "the proof names process {}, the socket's peer is {peer:?}",
            proved.pid
        )));
    }
    if !same_key(&proof(key, &nonce, proved.pid), &proved.proof) {
        return Err(refused("a proof that does not hold".to_string()));
    }
    Ok(())
}

/// Connects to the socket at `path` if it is one of this user's, not through a symlink: the
/// file is opened without following it (`O_PATH | O_NOFOLLOW`), checked, and connected to
/// through its descriptor, so it cannot be swapped in between. Whoever listens must be this user
/// too.
async fn connect(path: &Path) -> std::io::Result<tokio::net::UnixStream> {
    use rustix::fs::{FileType, Mode, OFlags};
    use std::os::fd::AsRawFd;
    let file = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let stat = rustix::fs::fstat(&file)?;
    let me = rustix::process::geteuid();
    let refused = |why: &str| {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} {why}: not a session's socket", path.display()),
        ))
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::Socket {
        return refused("is not a socket");
    }
    if stat.st_uid != me.as_raw() {
        return refused("is another user's");
    }
    let stream =
        tokio::net::UnixStream::connect(format!("/proc/self/fd/{}", file.as_raw_fd())).await?;
    if stream.peer_cred()?.uid() != me.as_raw() {
        return refused("is served by another user");
    }
    Ok(stream)
}

/// The session a first line's `hello` names, if it is one, and the resume key it carries.
fn named_session(seen: &[u8]) -> Option<(String, Option<String>)> {
    let end = seen.iter().position(|&b| b == b'\n')?;
    let message: super::wire::Incoming = serde_json::from_slice(&seen[..end]).ok()?;
    if message.method.as_deref() != Some("hello") {
        return None;
    }
    let params = message.params?;
    let session = params.get("session")?.as_str()?.to_string();
    let key = params
        .get("resume_key")
        .and_then(|key| key.as_str())
        .map(str::to_string);
    plausible_session(&session).then_some((session, key))
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
    fn hmac_sha256_is_rfc_4231s() {
        // RFC 4231, test case 2.
        assert_eq!(
            crate::hex::hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than a block.
        assert_eq!(
            crate::hex::hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn only_a_hello_naming_a_plausible_session_resumes() {
        let line = |s: &str| format!("{s}\n").into_bytes();
        assert_eq!(
            named_session(&line(
                r#"{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1,"session":"00ff"}}"#
            )),
            Some(("00ff".to_string(), None))
        );
        assert_eq!(
            named_session(&line(
                r#"{"jsonrpc":"2.0","id":1,"method":"hello","params":{"session":"00ff","resume_key":"k"}}"#
            )),
            Some(("00ff".to_string(), Some("k".to_string())))
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
