//! One version number for everything a user installs: the WIT package (`dsh:bash@X`), the
//! server and its crates, the Python package and the Node package, the packages carrying
//! `dsh-host` the Node package names (and its lock file with it), and the WIT version each
//! package's host names. A release that bumps one and not the others fails here.

use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The text between `prefix` and the next `suffix` on the first line holding `prefix`.
fn between(text: &str, prefix: &str, suffix: char, what: &str) -> String {
    let line = text
        .lines()
        .find_map(|line| line.trim_start().strip_prefix(prefix))
        .unwrap_or_else(|| panic!("{what}: no line starting with {prefix:?}"));
    line.split(suffix).next().unwrap().to_string()
}

#[test]
fn the_wit_package_server_and_packages_share_one_version() {
    let wit = between(
        &read("wit/bash.wit"),
        "package dsh:bash@",
        ';',
        "wit/bash.wit",
    );
    let versions = [
        (
            "dsh-host (Cargo.toml)",
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        (
            "bindings/python/pyproject.toml",
            between(
                &read("bindings/python/pyproject.toml"),
                "version = \"",
                '"',
                "pyproject",
            ),
        ),
        (
            "bindings/node/package.json",
            between(
                &read("bindings/node/package.json"),
                "\"version\": \"",
                '"',
                "package.json",
            ),
        ),
        (
            "WIT_VERSION in bindings/python/src/dsh_tools/component.py",
            between(
                &read("bindings/python/src/dsh_tools/component.py"),
                "WIT_VERSION = \"",
                '"',
                "component.py",
            ),
        ),
        (
            "WIT_VERSION in bindings/node/src/component.js",
            between(
                &read("bindings/node/src/component.js"),
                "export const WIT_VERSION = \"",
                '"',
                "component.js",
            ),
        ),
    ];
    for (what, version) in versions {
        assert_eq!(
            version, wit,
            "{what} says {version}, the WIT package dsh:bash@{wit}"
        );
    }
    // The packages carrying `dsh-host` (made by bindings/node/scripts/platform-package.mjs with
    // the Node package's version) are optional peers of exactly that version.
    let package: serde_json::Value =
        serde_json::from_str(&read("bindings/node/package.json")).unwrap();
    let lock: serde_json::Value =
        serde_json::from_str(&read("bindings/node/package-lock.json")).unwrap();
    let carriers: Vec<(&String, &serde_json::Value)> = package["peerDependencies"]
        .as_object()
        .expect("bindings/node/package.json has peerDependencies")
        .iter()
        .filter(|(name, _)| name.starts_with("@dsh-tools/dsh-host-"))
        .collect();
    assert!(
        !carriers.is_empty(),
        "bindings/node/package.json names no package carrying dsh-host"
    );
    for (name, version) in carriers {
        assert_eq!(
            version.as_str(),
            Some(wit.as_str()),
            "bindings/node/package.json wants {name} {version}, the WIT package dsh:bash@{wit}"
        );
        assert_eq!(
            package["peerDependenciesMeta"][name]["optional"], true,
            "{name} is an optional peer"
        );
        assert_eq!(
            &lock["packages"][""]["peerDependencies"][name], version,
            "bindings/node/package-lock.json disagrees with package.json on {name}"
        );
    }
}

/// The server reports that version.
#[test]
fn dsh_host_version_names_it() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dsh-host"))
        .arg("--version")
        .output()
        .unwrap();
    let wit = between(
        &read("wit/bash.wit"),
        "package dsh:bash@",
        ';',
        "wit/bash.wit",
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("dsh-host {wit}")
    );
}
