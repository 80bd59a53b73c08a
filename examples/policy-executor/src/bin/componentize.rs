//! Wraps the policy executor's core module into a component: `componentize CORE.wasm OUT.wasm`.
//!
//! The crate is built for `wasm32-unknown-unknown`, whose standard library imports nothing, so
//! the core module imports only the `bash-executor` functions wit-bindgen generates; the world
//! comes from the `component-type` section wit-bindgen embeds. The component then imports
//! `dsh:bash/bash-executor` and nothing else, and a composition with the tools component adds no
//! WASI. `compose.sh` runs this.

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    let args: Vec<std::path::PathBuf> = std::env::args_os().skip(1).map(Into::into).collect();
    let [core, out] = args.as_slice() else {
        eprintln!("usage: componentize CORE.wasm OUT.wasm");
        return std::process::ExitCode::from(2);
    };
    let component = std::fs::read(core)
        .map_err(anyhow::Error::from)
        .and_then(|bytes| {
            wit_component::ComponentEncoder::default()
                .module(&bytes)?
                .validate(true)
                .encode()
        })
        .and_then(|component| Ok(std::fs::write(out, component)?));
    match component {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot make a component of {}: {e:?}", core.display());
            std::process::ExitCode::FAILURE
        }
    }
}

/// The crate's wasm build is the component itself; this tool runs natively only.
#[cfg(target_arch = "wasm32")]
fn main() {}
