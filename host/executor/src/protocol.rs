//! The protocol between the host and a spawn helper ([`crate::helper`]), over a Unix
//! stream socket pair: one request from the host, then the helper's reports.
//!
//! Request (host → helper): a frame `[len: u32][program][command][workdir]`, each field
//! `[len: u32][bytes]`, with the descriptors `stdout`, `stderr` and `started` passed along
//! (`SCM_RIGHTS`) on its first byte.
//!
//! Reports (helper → host), each `[tag: u8][value: i32]`:
//! - [`Report::Refused`] (workdir unusable; followed by `[len: u32][message]`), before anything
//!   was started;
//! - [`Report::Declined`], before anything was started, when the helper's own state is no longer
//!   the one it was made with, or its factory is gone;
//! - [`Report::Proxy`], with the listening socket the host's proxy accepts the command's
//!   connections on passed along, before bash starts (only with `--sandbox-allow-net`);
//! - [`Report::Started`] with bash's pid, and bash's pidfd passed along, sent by bash itself
//!   just before its `exec` (so the host knows bash before any of the command runs);
//! - [`Report::Exited`] with bash's wait status, once bash was reaped;
//! - [`Report::TreeEmpty`] once no descendant is left, right before the helper exits 0.
//!
//! Whether bash's `exec` succeeded travels on its own pipe (`started`, close-on-exec): nothing
//! arrives on it when bash runs; `[step: u32][errno: i32]` when it could not be started.
//! The helper does not relay it, so the host learns it even if the helper dies.

use crate::{Denial, DenialReason, DeniedAccess};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Most descriptors a request carries.
pub(crate) const MAX_FDS: usize = 4;

/// A request's longest field: far above the kernel's limit on one `exec` argument, and the
/// largest command limit a configuration may set (`Config::max_command_bytes`).
pub(crate) const MAX_FIELD: usize = 64 << 20;

/// What the helper is asked to start.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) program: Vec<u8>,
    pub(crate) command: Vec<u8>,
    pub(crate) workdir: Vec<u8>,
}

/// The descriptors a request carries, in this order.
#[derive(Debug)]
pub(crate) struct RequestFds<T> {
    pub(crate) stdout: T,
    pub(crate) stderr: T,
    /// The write end of the exec-outcome pipe.
    pub(crate) started: T,
}

impl Request {
    /// The request as one frame.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let fields = [&self.program, &self.command, &self.workdir];
        let body: usize = fields.iter().map(|f| 4 + f.len()).sum();
        let mut frame = Vec::with_capacity(4 + body);
        frame.extend_from_slice(&len_u32(body).to_ne_bytes());
        for field in fields {
            frame.extend_from_slice(&len_u32(field.len()).to_ne_bytes());
            frame.extend_from_slice(field);
        }
        frame
    }

    fn decode(body: &[u8]) -> io::Result<Self> {
        let mut rest = body;
        let mut field = || -> io::Result<Vec<u8>> {
            let (len, tail) = split_u32(rest)?;
            let len = len as usize;
            if len > tail.len() {
                return Err(bad("a request field runs past its frame"));
            }
            let (value, tail) = tail.split_at(len);
            rest = tail;
            Ok(value.to_vec())
        };
        let request = Self {
            program: field()?,
            command: field()?,
            workdir: field()?,
        };
        if !rest.is_empty() {
            return Err(bad("trailing bytes after a request"));
        }
        Ok(request)
    }
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn split_u32(bytes: &[u8]) -> io::Result<(u32, &[u8])> {
    if bytes.len() < 4 {
        return Err(bad("a request frame is cut short"));
    }
    let (head, tail) = bytes.split_at(4);
    Ok((u32::from_ne_bytes(head.try_into().expect("4 bytes")), tail))
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Sends the first `frame` bytes that one `sendmsg` takes with `fds` attached; returns how many
/// went (the caller writes the rest as plain bytes). The socket may be non-blocking.
pub(crate) fn send_with_fds(
    sock: BorrowedFd<'_>,
    frame: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors for one request"));
    }
    loop {
        match rustix::net::sendmsg(
            sock,
            &[IoSlice::new(frame)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

/// Receives one request (blocking); `None` when the host closed the socket without sending one.
pub(crate) fn recv_request(
    sock: &UnixStream,
) -> io::Result<Option<(Request, RequestFds<OwnedFd>)>> {
    let mut head = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    // The descriptors ride on the first byte, so they come with the first read.
    let got = loop {
        match rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut head)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other.map_err(io::Error::from)?.bytes,
        }
    };
    if got == 0 {
        return Ok(None);
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    let mut reader = sock;
    reader.read_exact(&mut head[got..])?;
    let len = u32::from_ne_bytes(head) as usize;
    if len > 3 * (4 + MAX_FIELD) {
        return Err(bad("a request frame is too long"));
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    let request = Request::decode(&body)?;
    let mut fds = fds.into_iter();
    let (Some(stdout), Some(stderr), Some(started)) = (fds.next(), fds.next(), fds.next()) else {
        return Err(bad("a request came without its descriptors"));
    };
    Ok(Some((
        request,
        RequestFds {
            stdout,
            stderr,
            started,
        },
    )))
}

/// One `recvmsg` of up to `buf.len()` bytes, with the descriptors that came along.
pub(crate) fn recv_some(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
        ) {
            // A signal handled on this thread (the host's SIGCHLD, say): nothing was received.
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    Ok((got.bytes, fds))
}

/// A helper's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// The workdir is unusable: nothing was started. The message is the tools' text.
    Refused(String),
    /// bash runs (or is about to) with this pid; its pidfd comes along.
    Started(i32),
    /// bash was reaped with this wait status.
    Exited(i32),
    /// No descendant is left; the helper exits 0 next.
    TreeEmpty,
    /// The helper will not start the command (its own state is no longer the one it was made
    /// with): nothing was started, another helper may take it.
    Declined,
    /// The sandbox denied the command this (or undid it).
    Denied(Denial),
    /// Where the host's proxy takes the command's connections (`--sandbox-allow-net`): the
    /// listening socket comes along. Sent before bash starts.
    Proxy,
}

const REFUSED: u8 = b'R';
const STARTED: u8 = b'S';
const EXITED: u8 = b'X';
const TREE_EMPTY: u8 = b'E';
const DECLINED: u8 = b'D';
const DENIED: u8 = b'N';
const PROXY: u8 = b'P';

impl Report {
    /// [`Report::Started`] encoded without allocating (for a vfork child).
    pub(crate) fn started_bytes(pid: i32) -> [u8; 5] {
        let mut bytes = [STARTED, 0, 0, 0, 0];
        bytes[1..].copy_from_slice(&pid.to_ne_bytes());
        bytes
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let (tag, value) = match self {
            Report::Refused(_) => (REFUSED, 0),
            Report::Started(pid) => (STARTED, *pid),
            Report::Exited(status) => (EXITED, *status),
            Report::TreeEmpty => (TREE_EMPTY, 0),
            Report::Declined => (DECLINED, 0),
            Report::Proxy => (PROXY, 0),
            Report::Denied(denial) => (
                DENIED,
                i32::from(access_code(denial.access)) | i32::from(reason_code(denial.reason)) << 8,
            ),
        };
        let mut bytes = vec![tag];
        bytes.extend_from_slice(&value.to_ne_bytes());
        let text = match self {
            Report::Refused(message) => Some(message.as_str()),
            Report::Denied(denial) => Some(denial.target.as_str()),
            _ => None,
        };
        if let Some(text) = text {
            bytes.extend_from_slice(&len_u32(text.len()).to_ne_bytes());
            bytes.extend_from_slice(text.as_bytes());
        }
        bytes
    }

    /// Parses one report from the front of `bytes`: the report and its length, or `None` while
    /// it is incomplete.
    pub(crate) fn decode(bytes: &[u8]) -> io::Result<Option<(Report, usize)>> {
        if bytes.len() < 5 {
            return Ok(None);
        }
        let value = i32::from_ne_bytes(bytes[1..5].try_into().expect("4 bytes"));
        let report = match bytes[0] {
            STARTED => Report::Started(value),
            EXITED => Report::Exited(value),
            TREE_EMPTY => Report::TreeEmpty,
            DECLINED => Report::Declined,
            PROXY => Report::Proxy,
            REFUSED | DENIED => {
                let Ok((len, rest)) = split_u32(&bytes[5..]) else {
                    return Ok(None);
                };
                let len = len as usize;
                if len > MAX_FIELD {
                    return Err(bad("a report's text is too long"));
                }
                if rest.len() < len {
                    return Ok(None);
                }
                let text = String::from_utf8_lossy(&rest[..len]).into_owned();
                let report = if bytes[0] == REFUSED {
                    Report::Refused(text)
                } else {
                    let (Some(access), Some(reason)) = (
                        access_of((value & 0xff) as u8),
                        reason_of((value >> 8 & 0xff) as u8),
                    ) else {
                        return Err(bad("an unknown denial from the spawn helper"));
                    };
                    Report::Denied(Denial {
                        access,
                        target: text,
                        reason,
                    })
                };
                return Ok(Some((report, 9 + len)));
            }
            _ => return Err(bad("an unknown report from the spawn helper")),
        };
        Ok(Some((report, 5)))
    }
}

const ACCESSES: [DeniedAccess; 5] = [
    DeniedAccess::Read,
    DeniedAccess::Write,
    DeniedAccess::Socket,
    DeniedAccess::Connect,
    DeniedAccess::Undone,
];

const REASONS: [DenialReason; 7] = [
    DenialReason::OutsideWritableRoots,
    DenialReason::DeniedRead,
    DenialReason::ProtectedPath,
    DenialReason::NetworkOff,
    DenialReason::LoopbackOnly,
    DenialReason::CreatedAfterSetup,
    DenialReason::HostNotAllowed,
];

fn access_code(access: DeniedAccess) -> u8 {
    ACCESSES.iter().position(|a| *a == access).unwrap_or(0) as u8
}

fn access_of(code: u8) -> Option<DeniedAccess> {
    ACCESSES.get(usize::from(code)).copied()
}

fn reason_code(reason: DenialReason) -> u8 {
    REASONS.iter().position(|r| *r == reason).unwrap_or(0) as u8
}

fn reason_of(code: u8) -> Option<DenialReason> {
    REASONS.get(usize::from(code)).copied()
}

/// Sends a report (blocking), with `fd` attached if given.
pub(crate) fn send_report(
    sock: &UnixStream,
    report: &Report,
    fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let bytes = report.encode();
    let sent = match fd {
        Some(fd) => send_with_fds(sock.as_fd(), &bytes, &[fd])?,
        None => 0,
    };
    let mut writer = sock;
    writer.write_all(&bytes[sent..])
}

/// The step of a start that failed, as the exec-outcome pipe reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Setting up the process (session, descriptors).
    Setup = 1,
    /// Entering the workdir.
    Chdir = 2,
    /// `exec` itself.
    Exec = 3,
    /// Preparing or applying the sandbox.
    Sandbox = 4,
}

impl Step {
    pub(crate) fn from_u32(value: u32) -> Step {
        match value {
            2 => Step::Chdir,
            3 => Step::Exec,
            4 => Step::Sandbox,
            _ => Step::Setup,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let request = Request {
            program: b"/bin/bash".to_vec(),
            command: vec![b'x'; 70_000],
            workdir: b"/tmp".to_vec(),
        };
        let frame = request.encode();
        let decoded = Request::decode(&frame[4..]).unwrap();
        assert_eq!(decoded.program, request.program);
        assert_eq!(decoded.command, request.command);
        assert_eq!(decoded.workdir, request.workdir);
        assert!(Request::decode(&frame[4..frame.len() - 1]).is_err());
    }

    #[test]
    fn reports_round_trip_and_wait_for_more() {
        for report in [
            Report::Refused("workdir \"/x\" is not usable".into()),
            Report::Started(42),
            Report::Exited(9),
            Report::TreeEmpty,
            Report::Declined,
            Report::Proxy,
        ] {
            let bytes = report.encode();
            assert_eq!(
                Report::decode(&bytes).unwrap(),
                Some((report.clone(), bytes.len()))
            );
            assert_eq!(Report::decode(&bytes[..bytes.len() - 1]).unwrap(), None);
        }
        assert!(Report::decode(b"?0000").is_err());
    }
}
