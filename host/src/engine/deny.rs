//! Imports the host does not provide become traps.
//!
//! A guest may be built with a toolchain that imports more of WASI than it uses (files, sockets,
//! clocks, random). Those imports link to functions that trap, so instantiation works and any use
//! fails the call without giving the guest anything. Only interfaces outside the ones the host
//! links are stubbed: stubbing by exact name would shadow the semver-compatible versions the
//! linker already provides for `wasi:cli` and `wasi:io`.

use wasmtime::Engine;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker, ResourceType};

/// WASI interface prefixes the host links itself (imports outside WASI are the engine's check).
const LINKED: [&str; 2] = ["wasi:cli/", "wasi:io/"];

pub fn stub_unlinked_wasi<T: 'static>(
    linker: &mut Linker<T>,
    engine: &Engine,
    component: &Component,
) -> wasmtime::Result<()> {
    for (name, item) in component.component_type().imports(engine) {
        if LINKED.iter().any(|p| name.starts_with(p)) || !name.starts_with("wasi:") {
            continue;
        }
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            continue;
        };
        let mut stubs = linker.instance(name)?;
        for (export, ty) in instance.exports(engine) {
            let qualified = format!("{name}#{export}");
            match ty.ty {
                ComponentItem::ComponentFunc(_) => stubs.func_new(export, move |_, _, _, _| {
                    wasmtime::bail!("`{qualified}` is not available to this component")
                })?,
                ComponentItem::Resource(_) => {
                    stubs.resource(export, resource_type(export), |_, _| Ok(()))?
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Resources the stubbed interfaces `use` from `wasi:io` must be the very types the io bindings
/// link; the stubbed interfaces' own resources are opaque.
fn resource_type(name: &str) -> ResourceType {
    use wasmtime_wasi_io::{poll, streams};
    match name {
        "pollable" => ResourceType::host::<poll::DynPollable>(),
        "input-stream" => ResourceType::host::<streams::DynInputStream>(),
        "output-stream" => ResourceType::host::<streams::DynOutputStream>(),
        "error" => ResourceType::host::<streams::Error>(),
        _ => ResourceType::host::<()>(),
    }
}
