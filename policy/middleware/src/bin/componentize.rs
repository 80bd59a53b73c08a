//! Wraps the policy middleware's core module into a component: `componentize CORE.wasm OUT.wasm`.
//!
//! The crate is built for `wasm32-unknown-unknown`, whose standard library imports nothing. The
//! parser's dependencies, built for that target, expect a JavaScript host: they leave
//! `__wbindgen_*` placeholder imports (randomness and clocks the policy never calls) and
//! hundreds of descriptor exports for `wasm-bindgen`. They are removed here: every export but
//! the memory, `_initialize`, the canonical-ABI helpers and the WIT functions goes, then
//! whatever nothing reaches any more. A JavaScript function still reachable (from code the
//! policy never runs, such as a panic's console message) becomes a trap; any other JavaScript
//! import fails the build. tests/policy_middleware.rs runs every corpus case through the result. The component then imports `dsh:bash/bash-executor` and `dsh:bash/approval` and
//! nothing else. `compose.sh` runs this.

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    let args: Vec<std::path::PathBuf> = std::env::args_os().skip(1).map(Into::into).collect();
    let [core, out] = args.as_slice() else {
        eprintln!("usage: componentize CORE.wasm OUT.wasm");
        return std::process::ExitCode::from(2);
    };
    match componentize(core, out) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot make a component of {}: {e:#}", core.display());
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn componentize(core: &std::path::Path, out: &std::path::Path) -> anyhow::Result<()> {
    let module = strip(&std::fs::read(core)?)?;
    let component = wit_component::ComponentEncoder::default()
        .module(&module)?
        .validate(true)
        .encode()?;
    std::fs::write(out, component)?;
    Ok(())
}

/// Whether an export of the core module is part of the component: the WIT functions
/// (`dsh:bash/bash-executor@0.9.0#run`), their post-return helpers, the allocator and memory.
#[cfg(not(target_arch = "wasm32"))]
fn kept(name: &str) -> bool {
    name == "memory" || name == "_initialize" || name.starts_with("cabi_") || name.contains('#')
}

#[cfg(not(target_arch = "wasm32"))]
fn strip(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut module = walrus::Module::from_buffer(bytes)?;
    let dropped: Vec<_> = module
        .exports
        .iter()
        .filter(|e| !kept(&e.name))
        .map(|e| e.id())
        .collect();
    for id in dropped {
        module.exports.delete(id);
    }
    let custom: Vec<_> = module
        .customs
        .iter()
        .filter(|(_, c)| c.name().starts_with("__wasm_bindgen"))
        .map(|(id, _)| id)
        .collect();
    for id in custom {
        module.customs.delete(id);
    }
    walrus::passes::gc::run(&mut module);
    // What is still imported from the JavaScript side is reached only from code the policy
    // never runs (a panic's message for a JavaScript console, the parser's random state on a
    // JavaScript host): a function traps, and anything else stops the build.
    let foreign: Vec<(walrus::ImportId, String, walrus::ImportKind)> = module
        .imports
        .iter()
        .filter(|i| i.module.starts_with("__wbindgen") || i.module.starts_with("__wbg"))
        .map(|i| (i.id(), format!("{}::{}", i.module, i.name), i.kind.clone()))
        .collect();
    for (_, name, kind) in foreign {
        match kind {
            walrus::ImportKind::Function(fid) => {
                module.replace_imported_func(fid, |(body, _)| {
                    body.unreachable();
                })?;
            }
            _ => anyhow::bail!("the policy still imports {name} from a JavaScript host"),
        }
    }
    Ok(module.emit_wasm())
}

/// The crate's wasm build is the component itself; this tool runs natively only.
#[cfg(target_arch = "wasm32")]
fn main() {}
