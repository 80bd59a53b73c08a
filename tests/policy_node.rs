//! Permission rules in the Node package (`bindings/node`): `new Tools({ policy, approve })` with
//! the tools component composed with the policy middleware (tests/support/policy_component.rs).
//! `bindings/node/test/policy.mjs` holds the cases (allow, deny, each answer of the callback,
//! session grants, timeouts, files that do not load, a component without `approval`), each
//! checked on disk, and compares the refusals `dsh-host` can show with its output. It runs from
//! the package's own directory, where `dsh-tools` resolves to the package and jco (which loading
//! another component needs) is among the build tools.

#[path = "support/component_file.rs"]
mod component_file;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/node_package.rs"]
mod node_package;
#[path = "support/policy_component.rs"]
mod policy_component;
#[path = "support/provision.rs"]
mod provision;

use std::process::Command;

#[test]
fn permission_rules_and_the_approval_callback() {
    let composed = policy_component::composed();
    let package = node_package::build_tools();
    let out = Command::new("node")
        .current_dir(&package)
        .arg("test/policy.mjs")
        .env("DSH_POLICY_COMPONENT", &composed)
        .env("DSH_TOOLS_COMPONENT", policy_component::tools_file())
        .env("DSH_HOST", env!("CARGO_BIN_EXE_dsh-host"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run node (it must be in PATH): {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "test/policy.mjs failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // node:test reports its count: a file that ran no test must not pass.
    assert!(
        stdout.contains("# fail 0") && !stdout.contains("# pass 0"),
        "test/policy.mjs ran no test or hid a failure:\n{stdout}\n{stderr}"
    );
}
