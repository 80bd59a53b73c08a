//! Loading the tools component: the embedded one or a file, compiled once and cached on disk.
//!
//! Compiling the component with Cranelift costs tens of milliseconds in release and most of a
//! second in debug builds, so the compiled artifact is cached, keyed by the component's bytes, the
//! wasmtime version and the engine's configuration. Any cache problem falls back to compiling.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

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
    if let Some(dir) = cache_dir {
        let path = dir.join(cache_file_name(engine, bytes));
        if path.is_file() {
            // SAFETY: the file is one this program serialized into its own cache directory
            // (created 0700), under a name that binds it to these bytes and this engine.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok(component),
                Err(e) => tracing::debug!("stale compiled component {}: {e:#}", path.display()),
            }
        }
        let component = compile(engine, bytes)?;
        if let Err(e) = store(&component, dir, &path) {
            tracing::debug!(
                "cannot cache the compiled component in {}: {e:#}",
                dir.display()
            );
        }
        return Ok(component);
    }
    compile(engine, bytes)
}

fn compile(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Component> {
    Component::new(engine, bytes)
        .map_err(|e| anyhow::anyhow!("cannot compile the tools component: {e:#}"))
}

fn cache_file_name(engine: &Engine, bytes: &[u8]) -> String {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    env!("CARGO_PKG_VERSION").hash(&mut h);
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("tools-{:016x}-{}.cwasm", h.finish(), bytes.len())
}

fn store(component: &Component, dir: &Path, path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let serialized = component
        .serialize()
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    // Write then rename, so a concurrent reader never sees a partial file.
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        path.file_name().and_then(|n| n.to_str()).unwrap_or("c")
    ));
    std::fs::write(&tmp, serialized)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
