//! The guest's authority, pinned: the tools component imports exactly its two `dsh:bash`
//! interfaces and nothing else: no WASI at all, so no files, sockets, HTTP, clocks, randomness,
//! environment, arguments or stdio, and nothing a host must stub. A new import fails this test,
//! so that widening what the tools can reach is a deliberate change. (The guest is built for
//! `wasm32-unknown-unknown`, whose std imports nothing; see host/build.rs. What a foreign
//! component reaching for WASI gets is tested in tests/faults.rs.)

use std::sync::OnceLock;

use wasmtime::component::Component;
use wasmtime::{Config, Engine};

/// Every import of the tools component, exactly.
const IMPORTS: [&str; 2] = ["dsh:bash/bash-executor@0.9.0", "dsh:bash/agent@0.9.0"];

/// The embedded tools component, compiled once per test process.
fn component() -> &'static (Engine, Component) {
    static COMPILED: OnceLock<(Engine, Component)> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let mut config = Config::new();
        config.wasm_component_model(true);
        let engine = Engine::new(&config).unwrap();
        let component = Component::new(&engine, dsh_host::engine::EMBEDDED_COMPONENT)
            .expect("the tools component compiles");
        (engine, component)
    })
}

#[test]
fn the_tools_component_imports_exactly_its_world() {
    let (engine, component) = component();
    let mut imports: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    eprintln!(
        "imports of the tools component:\n  {}",
        imports.join("\n  ")
    );
    imports.sort();
    let mut pinned = IMPORTS.map(String::from).to_vec();
    pinned.sort();
    assert_eq!(
        imports, pinned,
        "the tools component's imports are not the pinned set; if this is deliberate, change \
         IMPORTS in tests/imports.rs, the hosts' linkers (host/src/engine, tests/polyglot) and the \
         docs/security.md, \"The guest's authority\""
    );
}

#[test]
fn the_tools_component_exports_only_the_tools() {
    let (engine, component) = component();
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    assert_eq!(exports, ["dsh:bash/tools@0.9.0"]);
}
