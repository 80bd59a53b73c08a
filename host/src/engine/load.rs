//! Loading the tools component: the embedded one or a file, compiled once and cached on disk.
//!
//! Compiling the component with Cranelift costs tens of milliseconds in release and most of a
//! second in debug builds, so the compiled artifact is cached. A cache entry is native code that
//! runs with the host's authority, so it is only loaded when it is provably the one this process
//! would have compiled:
//!
//! - **Keyed by a SHA-256 digest** of the component's bytes, this crate's version and the engine's
//!   compatibility hash (`Engine::precompile_compatibility_hash`: target, Cranelift flags,
//!   tunables, wasm features and wasmtime's own version). The entry's file name is that key in hex.
//! - **The entry records its key.** Each entry starts with a header: the 16-byte magic
//!   [`MAGIC`], the 32-byte key, the payload's length (u64, little-endian) and the payload's
//!   SHA-256, then the payload (`Component::serialize` output). An entry whose recorded key is
//!   not the key computed for the bytes being loaded (one copied over another's name) is refused,
//!   and so is a truncated or corrupt one (length or digest mismatch): the component is compiled
//!   and the entry overwritten.
//! - **Only the current user's files are trusted.** The directory is created `0700` and entries
//!   `0600`. A directory or entry owned by another uid than the effective one, or writable by
//!   group or others, is not used: the component is compiled (and, for an unsafe directory,
//!   nothing is written there). The first such refusal per process is a warning naming the path
//!   and why; later ones are debug messages.
//! - **No check-then-open race.** The directory is opened once and everything else happens
//!   relative to that descriptor. An entry is opened with `O_NOFOLLOW` (a symlink is refused,
//!   never followed), checked with `fstat` on the open descriptor, read from it, checked against
//!   its header, and deserialized from those bytes. A new entry is written to a temporary file
//!   created with `O_CREAT|O_EXCL|O_NOFOLLOW` mode `0600` under an unpredictable name, then
//!   renamed over the entry's name (which replaces a symlink there instead of following it).
//!
//! Any other cache problem (an unwritable directory, a full disk) falls back to compiling.

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The tools component built from `guest-tools/` and embedded at build time.
pub static EMBEDDED_COMPONENT: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/guest_tools.wasm"));

/// Where the component comes from.
#[derive(Debug, Clone, Default)]
pub enum ComponentSource {
    /// The component embedded in this build.
    #[default]
    Embedded,
    /// A component file (for example one composed with an executor middleware).
    File(PathBuf),
    /// Component bytes held by the embedder.
    Bytes(Vec<u8>),
}

/// Where compiled components are cached; `None` disables the cache.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DSH_CACHE_DIR") {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("dsh-host"))
}

/// The host's per-user runtime directory: `$XDG_RUNTIME_DIR/dsh-host`, else the cache directory,
/// else `dsh-host-<uid>` in `/var/tmp` (the system temp dir where `/var/tmp` is not writable).
/// A sandbox denies reading it; not in `/tmp` where that can be helped, as a denied path in `/tmp`
/// would make files new in `/tmp` unreadable to the command that made them (Landlock grants
/// reads entry by entry in a denied path's ancestors).
pub(crate) fn runtime_dir() -> PathBuf {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .map(|p| p.join("dsh-host"));
    runtime.or_else(default_cache_dir).unwrap_or_else(|| {
        let uid = rustix::process::geteuid().as_raw();
        let base = [PathBuf::from("/var/tmp"), std::env::temp_dir()]
            .into_iter()
            .find(|dir| rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_ok())
            .unwrap_or_else(std::env::temp_dir);
        base.join(format!("dsh-host-{uid}"))
    })
}

pub fn load(
    engine: &Engine,
    source: &ComponentSource,
    cache_dir: Option<&Path>,
) -> anyhow::Result<Component> {
    let file_bytes;
    let bytes: &[u8] = match source {
        ComponentSource::Embedded => EMBEDDED_COMPONENT,
        ComponentSource::Bytes(b) => b,
        ComponentSource::File(path) => {
            file_bytes = std::fs::read(path)
                .map_err(|e| anyhow::anyhow!("cannot read component {}: {e}", path.display()))?;
            &file_bytes
        }
    };
    let Some(dir) = cache_dir else {
        return compile(engine, bytes);
    };
    let cache = match CacheDir::open(dir) {
        Ok(cache) => cache,
        Err(refusal) => {
            report(&refusal);
            return compile(engine, bytes);
        }
    };
    let key = cache_key(engine, bytes);
    let name = entry_name(&key);
    match cache.read_entry(&name, &key) {
        Ok(Some(entry)) => {
            // SAFETY: `Component::deserialize` runs the native code it is given. These bytes were
            // read from one open descriptor of a regular file owned by this user and writable by
            // no one else, in a directory owned by this user and writable by no one else; their
            // header records the key computed just now from these component bytes and this
            // engine, and the payload matches the recorded length and SHA-256. So they are what
            // this program serialized for exactly this component and engine (anyone able to
            // write them could already run code as this user).
            match unsafe { Component::deserialize(engine, entry.payload()) } {
                Ok(component) => return Ok(component),
                Err(e) => report(&Refusal::Unloadable {
                    path: cache.path.join(&name),
                    reason: format!("{e:#}"),
                }),
            }
        }
        Ok(None) => {}
        Err(refusal) => report(&refusal),
    }
    let component = compile(engine, bytes)?;
    let stored = component
        .serialize()
        .map_err(|e| io::Error::other(format!("{e:#}")))
        .and_then(|payload| cache.store(&name, &key, &payload));
    if let Err(e) = stored {
        tracing::debug!(
            "cannot cache the compiled component in {}: {e}",
            dir.display()
        );
    }
    Ok(component)
}

fn compile(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Component> {
    Component::new(engine, bytes)
        .map_err(|e| anyhow::anyhow!("cannot compile the tools component: {e:#}"))
}

/// The first 16 bytes of every cache entry (the trailing digit is the format's version).
const MAGIC: &[u8; 16] = b"dsh-host cwasm 1";
const DIGEST_LEN: usize = 32;
/// Magic, key, payload length, payload digest.
const HEADER_LEN: usize = MAGIC.len() + DIGEST_LEN + 8 + DIGEST_LEN;

type Key = [u8; DIGEST_LEN];

/// Feeds `Hash` implementations (the engine's compatibility hash) into a SHA-256 digest.
struct DigestHasher(Sha256);

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        // Never asked for: the digest is taken from the inner hasher.
        0
    }
}

/// What a cache entry must have been compiled from: the component's bytes, this crate's version
/// and the engine's compatibility hash (which covers wasmtime's own version).
fn cache_key(engine: &Engine, bytes: &[u8]) -> Key {
    let mut hasher = DigestHasher(Sha256::new());
    hasher.0.update(b"dsh-host compiled component key 1\0");
    // Length-prefixed, so that no two different inputs feed the same byte stream.
    for part in [bytes, env!("CARGO_PKG_VERSION").as_bytes()] {
        hasher.0.update((part.len() as u64).to_le_bytes());
        hasher.0.update(part);
    }
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.0.finalize().into()
}

fn entry_name(key: &Key) -> String {
    format!("tools-{}.cwasm", dsh_executor::hex::hex(key))
}

fn header(key: &Key, payload: &[u8]) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(key);
    header.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    header.extend_from_slice(&Sha256::digest(payload));
    header
}

/// Why an entry's bytes are not a usable entry for `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Defect {
    #[error("it is shorter than a cache entry header")]
    ShortHeader,
    #[error("it does not start with the cache entry magic")]
    NotAnEntry,
    #[error(
        "it records the key of another component or engine (an entry copied over another's name)"
    )]
    KeyMismatch,
    #[error("it is truncated or overlong (the payload length differs from the recorded one)")]
    LengthMismatch,
    #[error("it is corrupt (the payload's SHA-256 differs from the recorded one)")]
    DigestMismatch,
}

/// A complete, verified cache entry.
struct Entry {
    bytes: Vec<u8>,
}

impl Entry {
    /// Checks `bytes` against the header format and `key`.
    fn verify(bytes: Vec<u8>, key: &Key) -> Result<Self, Defect> {
        let (header, payload) = bytes
            .split_at_checked(HEADER_LEN)
            .ok_or(Defect::ShortHeader)?;
        let (magic, rest) = header.split_at(MAGIC.len());
        if magic != MAGIC {
            return Err(Defect::NotAnEntry);
        }
        let (recorded_key, rest) = rest.split_at(DIGEST_LEN);
        if recorded_key != key {
            return Err(Defect::KeyMismatch);
        }
        let (len, digest) = rest.split_at(8);
        let len: [u8; 8] = len.try_into().map_err(|_| Defect::ShortHeader)?;
        if u64::from_le_bytes(len) != payload.len() as u64 {
            return Err(Defect::LengthMismatch);
        }
        if Sha256::digest(payload).as_slice() != digest {
            return Err(Defect::DigestMismatch);
        }
        Ok(Self { bytes })
    }

    fn payload(&self) -> &[u8] {
        &self.bytes[HEADER_LEN..]
    }
}

/// Why the cache (or one entry of it), or another private directory, was not used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("{} is owned by uid {owner}, not by this process's uid {euid}", path.display())]
    ForeignOwner {
        path: PathBuf,
        owner: u32,
        euid: u32,
    },
    #[error("{} is writable by group or others (mode {mode:04o})", path.display())]
    Writable { path: PathBuf, mode: u32 },
    #[error("{} is a symbolic link", path.display())]
    Symlink { path: PathBuf },
    #[error("{} is not a {expected}", path.display())]
    WrongType {
        path: PathBuf,
        expected: &'static str,
    },
    #[error("{}: {defect}", path.display())]
    Defective { path: PathBuf, defect: Defect },
    #[error("{} cannot be loaded: {reason}", path.display())]
    Unloadable { path: PathBuf, reason: String },
    #[error("cannot use {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

impl Refusal {
    fn io(path: PathBuf, source: impl Into<io::Error>) -> Self {
        Self::Io {
            path,
            source: source.into(),
        }
    }
}

/// Whether a refusal was already reported as a warning by this process.
static WARNED: AtomicBool = AtomicBool::new(false);

/// Logs why the cache was not used: the first untrusted or defective directory or entry of the
/// process as a warning, everything else (and I/O trouble, e.g. a read-only home) at debug level.
fn report(refusal: &Refusal) {
    let quiet = matches!(refusal, Refusal::Io { .. });
    if !quiet && !WARNED.swap(true, Ordering::AcqRel) {
        tracing::warn!("not using the compiled-component cache: {refusal}; compiling instead");
    } else {
        tracing::debug!("not using the compiled-component cache: {refusal}; compiling instead");
    }
}

/// Fails unless the open file `fd` is of type `expected`, owned by the effective uid and not
/// writable by group or others.
fn check_trusted(fd: impl AsFd, path: &Path, expected: FileType) -> Result<(), Refusal> {
    let stat = rustix::fs::fstat(fd).map_err(|e| Refusal::io(path.into(), e))?;
    if FileType::from_raw_mode(stat.st_mode) != expected {
        return Err(Refusal::WrongType {
            path: path.into(),
            expected: if expected == FileType::Directory {
                "directory"
            } else {
                "regular file"
            },
        });
    }
    let euid = rustix::process::geteuid().as_raw();
    if stat.st_uid != euid {
        return Err(Refusal::ForeignOwner {
            path: path.into(),
            owner: stat.st_uid,
            euid,
        });
    }
    let mode = Mode::from_raw_mode(stat.st_mode);
    if mode.intersects(Mode::WGRP | Mode::WOTH) {
        return Err(Refusal::Writable {
            path: path.into(),
            mode: mode.bits(),
        });
    }
    Ok(())
}

/// The cache directory, open and checked.
struct CacheDir {
    path: PathBuf,
    fd: OwnedFd,
}

/// Numbers this process's temporary files.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(1);

impl CacheDir {
    /// Opens the directory, creating it `0700` when missing, and checks that it is trusted.
    fn open(path: &Path) -> Result<Self, Refusal> {
        Ok(Self {
            path: path.into(),
            fd: open_private_dir(path)?,
        })
    }

    /// The verified entry `name` for `key`; `None` when there is none.
    fn read_entry(&self, name: &str, key: &Key) -> Result<Option<Entry>, Refusal> {
        let path = self.path.join(name);
        // Non-blocking, so that a FIFO under the name cannot stall the open; it is then refused
        // as not a regular file.
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return Err(Refusal::Symlink { path }),
            Err(e) => return Err(Refusal::io(path, e)),
        };
        check_trusted(&fd, &path, FileType::RegularFile)?;
        let mut bytes = Vec::new();
        File::from(fd)
            .read_to_end(&mut bytes)
            .map_err(|e| Refusal::io(path.clone(), e))?;
        Entry::verify(bytes, key)
            .map(Some)
            .map_err(|defect| Refusal::Defective { path, defect })
    }

    /// Writes the entry `name` (header for `key`, then `payload`) through a fresh temporary file
    /// renamed into place, so that a reader never sees a partial entry.
    fn store(&self, name: &str, key: &Key, payload: &[u8]) -> io::Result<()> {
        let (tmp, fd) = self.create_tmp()?;
        let mut file = File::from(fd);
        let written = file
            .write_all(&header(key, payload))
            .and_then(|()| file.write_all(payload))
            // The umask may have narrowed the mode; make it exactly 0600.
            .and_then(|()| Ok(rustix::fs::fchmod(&file, Mode::RUSR | Mode::WUSR)?))
            .and_then(|()| Ok(rustix::fs::renameat(&self.fd, &tmp, &self.fd, name)?));
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        written
    }

    /// A new temporary file under an unpredictable name: never an existing file or symlink.
    fn create_tmp(&self) -> io::Result<(String, OwnedFd)> {
        for _ in 0..16 {
            let name = format!(
                ".tmp-{}-{}-{}",
                std::process::id(),
                TMP_COUNTER.fetch_add(1, Ordering::Relaxed),
                dsh_executor::random_hex()
            );
            match create_exclusive(&self.fd, &name) {
                Ok(fd) => return Ok((name, fd)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "every temporary file name tried was taken",
        ))
    }
}

/// A directory that only this user may write to, opened, and created `0700` (with missing
/// parents) when absent: the cache's, and the one the HTTP server writes a generated token to.
/// Refused when it is not a directory, is someone else's, or group or others may write to it.
pub(crate) fn open_private_dir(path: &Path) -> Result<OwnedFd, Refusal> {
    let fd = match open_dir(path) {
        Err(Errno::NOENT) => create_dir(path).and_then(|()| Ok(open_dir(path)?)),
        opened => opened.map_err(io::Error::from),
    }
    .map_err(|e| Refusal::io(path.into(), e))?;
    check_trusted(&fd, path, FileType::Directory)?;
    Ok(fd)
}

fn open_dir(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Creates the cache directory `0700` (and missing parents, also `0700`).
fn create_dir(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    match rustix::fs::mkdir(path, Mode::RWXU) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Creates `name` in `dir` for writing, mode `0600`; fails on anything already there, a symlink
/// included (which is not followed).
pub(crate) fn create_exclusive(dir: impl AsFd, name: &str) -> io::Result<OwnedFd> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(
        dir,
        name,
        flags,
        Mode::RUSR | Mode::WUSR,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &Key, payload: &[u8]) -> Vec<u8> {
        let mut bytes = header(key, payload);
        bytes.extend_from_slice(payload);
        bytes
    }

    #[test]
    fn an_entry_verifies_only_against_its_own_key_and_payload() {
        let key = [7u8; DIGEST_LEN];
        let good = entry(&key, b"native code");
        assert_eq!(
            Entry::verify(good.clone(), &key).unwrap().payload(),
            b"native code"
        );
        assert_eq!(
            Entry::verify(good.clone(), &[8u8; DIGEST_LEN]).err(),
            Some(Defect::KeyMismatch)
        );
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(
            Entry::verify(flipped, &key).err(),
            Some(Defect::DigestMismatch)
        );
        for cut in [0, 10, HEADER_LEN - 1] {
            assert_eq!(
                Entry::verify(good[..cut].to_vec(), &key).err(),
                Some(Defect::ShortHeader)
            );
        }
        assert_eq!(
            Entry::verify(good[..good.len() - 1].to_vec(), &key).err(),
            Some(Defect::LengthMismatch)
        );
        let mut other_magic = good;
        other_magic[0] ^= 1;
        assert_eq!(
            Entry::verify(other_magic, &key).err(),
            Some(Defect::NotAnEntry)
        );
    }

    #[test]
    fn the_temporary_file_never_follows_a_planted_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"victim").unwrap();
        let cache = dir.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        std::os::unix::fs::symlink(&victim, cache.join(".tmp-planted")).unwrap();
        let fd = open_dir(&cache).unwrap();
        let err = create_exclusive(&fd, ".tmp-planted").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        // A dangling symlink is not followed either (plain O_CREAT would create its target).
        let absent = dir.path().join("absent");
        std::os::unix::fs::symlink(&absent, cache.join(".tmp-dangling")).unwrap();
        let err = create_exclusive(&fd, ".tmp-dangling").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(!absent.exists());
        assert_eq!(std::fs::read(&victim).unwrap(), b"victim");
        // A free name is created 0600.
        let created = File::from(create_exclusive(&fd, ".tmp-free").unwrap());
        assert_eq!(
            created.metadata().unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
