//! The compiled-component cache loads only what it compiled for the bytes being loaded, and only
//! from a directory and files that nobody but this user can write.
//!
//! Which component ran is plain from behaviour: the embedded tools list `bash`, `bash_output` and
//! `bash_kill`; the fault guest (`tests/fault-guest`) lists `ok`, `trap`, ... Entries are made once
//! per test process (the embedded component and the fault guest compiled into a cache) and copied
//! into a fresh cache directory per case, where they are swapped, forged, truncated, opened up to
//! other users or replaced by symlinks.
//!
//! A forged entry keeps the target entry's magic and recorded key (the first [`KEY_END`] bytes,
//! see `host/src/engine/load.rs`) and carries the other component's payload with its own length
//! and digest: a correctly keyed entry holding the wrong native code. In a private directory it is
//! loaded (the control: a cache that only this user can write is trusted), anywhere else it must
//! not be.

#[path = "support/nested_cargo.rs"]
mod nested_cargo;

#[path = "support/rust_target.rs"]
mod rust_target;

#[path = "support/fault_guest.rs"]
mod fault_guest;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use dsh_host::executor::{Config, Executor, LocalExecutor};
use dsh_host::{ComponentSource, HostOptions, ToolHost};
use fault_guest::fault_guest;

/// Magic (16 bytes) and recorded key (32 bytes): the part of an entry naming what it was
/// compiled from.
const KEY_END: usize = 16 + 32;

/// A uid that is not the test's (`nobody` on most systems); giving files to it takes root.
const OTHER_UID: u32 = 65534;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ran {
    Embedded,
    FaultGuest,
}

/// Loads `component` through a `ToolHost` with `cache` as its cache directory and tells which
/// component's tools it got.
async fn load(component: ComponentSource, cache: &Path) -> Ran {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let executor: Arc<dyn Executor> = LocalExecutor::new(Config::default(), tx).unwrap();
    let options = HostOptions {
        component,
        cache_dir: Some(cache.to_path_buf()),
        ..Default::default()
    };
    let host = ToolHost::new(options, executor, rx)
        .await
        .expect("the component loads");
    let names: Vec<&str> = host.tools().iter().map(|t| t.name.as_str()).collect();
    match names.as_slice() {
        n if n.contains(&"ok") && n.contains(&"trap") && !n.contains(&"bash") => Ran::FaultGuest,
        n if n.contains(&"bash") && n.contains(&"bash_output") && !n.contains(&"ok") => {
            Ran::Embedded
        }
        other => panic!("unexpected tool list {other:?}"),
    }
}

async fn load_embedded(cache: &Path) -> Ran {
    load(ComponentSource::Embedded, cache).await
}

/// The cache entries in `dir` (temporary files excluded).
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    found.sort();
    found
}

fn leftovers(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Compiled entries of both components, made once per test process.
struct Pristine {
    embedded_name: String,
    embedded: Vec<u8>,
    fault_name: String,
    fault: Vec<u8>,
    /// Of the directory the cache created and of the two entries it wrote.
    modes: (u32, u32, u32),
    /// Temporary files left in the directory.
    leftovers: usize,
}

impl Pristine {
    /// The embedded tools' key with the fault guest's native code.
    fn forged(&self) -> Vec<u8> {
        let mut forged = self.embedded[..KEY_END].to_vec();
        forged.extend_from_slice(&self.fault[KEY_END..]);
        forged
    }
}

async fn prime(root: &Path) -> Pristine {
    let cache = root.join("cache");
    assert_eq!(load_embedded(&cache).await, Ran::Embedded);
    let [embedded] = entries(&cache).try_into().expect("one entry");
    assert_eq!(
        load(ComponentSource::File(fault_guest()), &cache).await,
        Ran::FaultGuest
    );
    let [fault] = entries(&cache)
        .into_iter()
        .filter(|p| *p != embedded)
        .collect::<Vec<_>>()
        .try_into()
        .expect("one more entry");
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    Pristine {
        embedded_name: name(&embedded),
        embedded: std::fs::read(&embedded).unwrap(),
        fault_name: name(&fault),
        fault: std::fs::read(&fault).unwrap(),
        modes: (mode(&cache), mode(&embedded), mode(&fault)),
        leftovers: leftovers(&cache).len(),
    }
}

fn pristine() -> &'static Pristine {
    static PRISTINE: OnceLock<Pristine> = OnceLock::new();
    PRISTINE.get_or_init(|| {
        // Its own runtime on its own thread: callers are inside a test's runtime.
        std::thread::spawn(|| {
            let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(prime(root.path()))
        })
        .join()
        .expect("priming the cache")
    })
}

/// A fresh private cache directory (`0700`) and the temporary directory holding it.
fn fresh_cache() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let cache = root.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    (root, cache)
}

/// Writes an entry file `0600`, as the cache itself would.
fn plant(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn the_cache_is_created_private() {
    let p = pristine();
    assert_eq!(p.modes, (0o700, 0o600, 0o600));
    assert_eq!(p.leftovers, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_copied_over_another_name_is_refused() {
    let p = pristine();
    let (_root, cache) = fresh_cache();
    // Each component's entry under the other's name.
    plant(&cache.join(&p.embedded_name), &p.fault);
    plant(&cache.join(&p.fault_name), &p.embedded);

    assert_eq!(load_embedded(&cache).await, Ran::Embedded);
    assert_eq!(
        load(ComponentSource::File(fault_guest()), &cache).await,
        Ran::FaultGuest
    );
    // Both refused entries were compiled afresh and overwritten with what belongs there.
    for (name, swapped) in [(&p.embedded_name, &p.fault), (&p.fault_name, &p.embedded)] {
        let now = std::fs::read(cache.join(name)).unwrap();
        assert!(now != *swapped, "{name} still holds the swapped entry");
        let own = if *name == p.embedded_name {
            &p.embedded
        } else {
            &p.fault
        };
        assert_eq!(now[..KEY_END], own[..KEY_END], "{name}");
        assert_eq!(mode(&cache.join(name)), 0o600);
    }
    // And are used as they are from now on.
    assert_eq!(load_embedded(&cache).await, Ran::Embedded);
}

/// Gives `path` to another uid. Only root may: elsewhere this says so and returns `false`.
fn give_away(path: &Path) -> bool {
    match std::os::unix::fs::chown(path, Some(OTHER_UID), None) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && euid() != 0 => {
            eprintln!("notice: not root, so the case giving {path:?} to another uid is skipped");
            false
        }
        Err(e) => panic!("chown {path:?}: {e}"),
    }
}

/// The forged entry in a fresh cache is not loaded once `make_unsafe` made the directory or the
/// entry untrusted (it returns `false` when it could not).
async fn forged_entry_is_not_used(case: &str, make_unsafe: impl FnOnce(&Path, &Path) -> bool) {
    let p = pristine();
    let (_root, cache) = fresh_cache();
    let entry = cache.join(&p.embedded_name);
    plant(&entry, &p.forged());
    if !make_unsafe(&cache, &entry) {
        return;
    }
    assert_eq!(
        load_embedded(&cache).await,
        Ran::Embedded,
        "{case}: the forged entry was loaded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_private_directory_and_entry_are_trusted() {
    let p = pristine();
    // The control: in a private directory, a private correctly keyed entry is what runs (so the
    // cases below would see the fault guest if they trusted the entry).
    let (_root, cache) = fresh_cache();
    plant(&cache.join(&p.embedded_name), &p.forged());
    assert_eq!(load_embedded(&cache).await, Ran::FaultGuest);

    let chmod = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        true
    };
    forged_entry_is_not_used("world-writable directory", |dir, _| chmod(dir, 0o777)).await;
    forged_entry_is_not_used("group-writable directory", |dir, _| chmod(dir, 0o770)).await;
    forged_entry_is_not_used("foreign directory", |dir, _| give_away(dir)).await;
    forged_entry_is_not_used("world-writable entry", |_, entry| chmod(entry, 0o666)).await;
    forged_entry_is_not_used("foreign entry", |_, entry| give_away(entry)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_written_into_an_untrusted_directory() {
    let p = pristine();
    let (_root, cache) = fresh_cache();
    let entry = cache.join(&p.embedded_name);
    plant(&entry, &p.forged());
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(load_embedded(&cache).await, Ran::Embedded);
    assert!(
        std::fs::read(&entry).unwrap() == p.forged(),
        "the entry was rewritten"
    );
    assert_eq!(entries(&cache), vec![entry]);
    assert_eq!(leftovers(&cache), Vec::<PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_entry_is_replaced_by_a_private_one() {
    let p = pristine();
    let (_root, cache) = fresh_cache();
    let entry = cache.join(&p.embedded_name);
    plant(&entry, &p.forged());
    give_away(&entry);
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(load_embedded(&cache).await, Ran::Embedded);
    let meta = std::fs::symlink_metadata(&entry).unwrap();
    assert_eq!(meta.uid(), euid());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(
        std::fs::read(&entry).unwrap()[..KEY_END],
        p.embedded[..KEY_END]
    );
    assert!(std::fs::read(&entry).unwrap() != p.forged());
}

/// The effective uid, read from /proc.
fn euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_or_corrupt_entry_is_compiled_and_overwritten() {
    let p = pristine();
    let len = p.embedded.len();
    let mut flipped = p.embedded.clone();
    flipped[len / 2] ^= 0x40;
    let cases = [
        ("empty", Vec::new()),
        ("header cut", p.embedded[..KEY_END + 4].to_vec()),
        ("payload cut", p.embedded[..len / 2].to_vec()),
        ("a flipped byte", flipped),
    ];
    for (case, bytes) in cases {
        let (_root, cache) = fresh_cache();
        let entry = cache.join(&p.embedded_name);
        plant(&entry, &bytes);
        assert_eq!(load_embedded(&cache).await, Ran::Embedded, "{case}");
        let now = std::fs::read(&entry).unwrap();
        assert!(now != bytes, "{case}: the entry was not overwritten");
        assert_eq!(now.len(), len, "{case}: the entry was not rewritten whole");
        assert_eq!(now[..KEY_END], p.embedded[..KEY_END], "{case}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_at_the_entry_name_is_not_followed() {
    let p = pristine();
    let (root, cache) = fresh_cache();
    let entry = cache.join(&p.embedded_name);
    // A correctly keyed entry outside the cache: followed, it would run the fault guest.
    let outside = root.path().join("outside.cwasm");
    plant(&outside, &p.forged());
    std::os::unix::fs::symlink(&outside, &entry).unwrap();
    assert_eq!(load_embedded(&cache).await, Ran::Embedded);
    assert!(
        std::fs::read(&outside).unwrap() == p.forged(),
        "the symlink's target was written"
    );
    // The symlink was replaced by a private regular file, not written through.
    let meta = std::fs::symlink_metadata(&entry).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);

    // A dangling symlink: its target is not created.
    let (root, cache) = fresh_cache();
    let entry = cache.join(&p.embedded_name);
    let target = root.path().join("created-through-the-link");
    std::os::unix::fs::symlink(&target, &entry).unwrap();
    assert_eq!(load_embedded(&cache).await, Ran::Embedded);
    assert!(!target.exists());
    assert!(
        std::fs::symlink_metadata(&entry)
            .unwrap()
            .file_type()
            .is_file()
    );
}

#[test]
fn the_binary_warns_once_naming_the_untrusted_directory() {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let cache = root.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dsh-host"))
        .arg("tools")
        .env("DSH_CACHE_DIR", &cache)
        .env("DSH_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"bash_output\""));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("compiled-component cache"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("WARN"), "{stderr}");
    assert!(
        warnings[0].contains(&format!(
            "{} is writable by group or others (mode 0777)",
            cache.display()
        )),
        "{stderr}"
    );
    assert_eq!(entries(&cache), Vec::<PathBuf>::new());
}
