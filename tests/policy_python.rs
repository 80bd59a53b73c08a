//! The Python package's permission rules (`Tools(policy=..., approve=...)`) on the tools component
//! composed with the policy middleware, as the recipe of docs/composing.md makes it: the package's
//! `tests/test_policy.py`, run with pytest in the tests' venv (`tests/support/python_venv.rs`),
//! with `DSH_POLICY_COMPONENT` naming the composed file. Which commands ran is read from the files
//! they create; the refusal texts are the ones `dsh-host --policy` gives for the same rules.

#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/policy_component.rs"]
mod policy_component;
#[path = "support/provision.rs"]
mod provision;
#[path = "support/python_venv.rs"]
mod python_venv;

use std::process::Command;

#[test]
fn the_package_enforces_the_rules_and_asks_through_its_callback() {
    let composed = policy_component::composed();
    let out = Command::new(python_venv::python())
        .args([
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "tests/test_policy.py",
        ])
        .current_dir(provision::repo().join("bindings").join("python"))
        .env("DSH_POLICY_COMPONENT", &composed)
        .output()
        .expect("the venv's python runs");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "pytest tests/test_policy.py failed ({}):\n{report}",
        out.status
    );
    // pytest succeeds on a file whose tests were all deselected or skipped: each must have run.
    assert!(
        !report.contains("SKIPPED") && report.contains(" passed"),
        "{report}"
    );
}
