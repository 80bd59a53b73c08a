//! The guest's authority, pinned: the tools component imports its two `dsh:bash` interfaces and
//! the pieces of `wasi:cli` and `wasi:io` a Rust guest links, and nothing else: no files,
//! sockets, HTTP, clocks or randomness. A new import fails this test, so that widening what the
//! tools can reach is a deliberate change. (What the host gives the WASI it links, and what a guest
//! reaching for more gets, is tested in tests/faults.rs.)

use std::collections::BTreeSet;
use std::sync::OnceLock;

use wasmtime::component::Component;
use wasmtime::{Config, Engine};

/// Every import the tools component may have. WASI imports are compared without their version
/// (the toolchain picks the 0.2.x release); the project's own are exact.
const ALLOWED: [&str; 15] = [
    "dsh:bash/bash-executor@0.2.0",
    "dsh:bash/agent@0.2.0",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
];

const FORBIDDEN_PACKAGES: [&str; 5] = [
    "wasi:filesystem/",
    "wasi:sockets/",
    "wasi:http/",
    "wasi:random/",
    "wasi:clocks/",
];

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

fn unversioned(name: &str) -> &str {
    if name.starts_with("wasi:") {
        name.split('@').next().unwrap()
    } else {
        name
    }
}

#[test]
fn the_tools_component_imports_only_its_world_and_cli_io() {
    let (engine, component) = component();
    let imports: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    eprintln!(
        "imports of the tools component:\n  {}",
        imports.join("\n  ")
    );

    let forbidden: Vec<&String> = imports
        .iter()
        .filter(|name| FORBIDDEN_PACKAGES.iter().any(|p| name.starts_with(p)))
        .collect();
    assert!(
        forbidden.is_empty(),
        "the tools component reaches for authority it must not have: {forbidden:?}"
    );

    let unexpected: Vec<&String> = imports
        .iter()
        .filter(|name| !ALLOWED.contains(&unversioned(name)))
        .collect();
    assert!(
        unexpected.is_empty(),
        "the tools component has imports beyond the pinned set: {unexpected:?}; if this is \
         deliberate, add them to ALLOWED in tests/imports.rs (and to the host's linker)"
    );

    let present: BTreeSet<&str> = imports.iter().map(|n| unversioned(n)).collect();
    for own in ["dsh:bash/bash-executor@0.2.0", "dsh:bash/agent@0.2.0"] {
        assert!(
            present.contains(own),
            "the tools component no longer imports {own}"
        );
    }
    // Every WASI import is of one release.
    let versions: BTreeSet<&str> = imports
        .iter()
        .filter(|n| n.starts_with("wasi:"))
        .filter_map(|n| n.split('@').nth(1))
        .collect();
    assert!(versions.len() <= 1, "mixed WASI releases: {versions:?}");
}

#[test]
fn the_tools_component_exports_only_the_tools() {
    let (engine, component) = component();
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    assert_eq!(exports, ["dsh:bash/tools@0.2.0"]);
}
