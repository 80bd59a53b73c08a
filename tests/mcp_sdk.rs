//! `dsh-host mcp` driven by the official MCP SDKs' clients, as MCP users run it.
//!
//! The clients live in `tests/mcp-clients/` with pinned lock files; `.ci/run` installs them
//! (`npm ci --prefix tests/mcp-clients/node`). A missing client fails the test, naming the fix.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const NODE_HINT: &str = "install the TypeScript SDK client: npm ci --prefix tests/mcp-clients/node";

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp-clients")
}

/// Runs a Node client script against the `dsh-host` binary; its one JSON line of output.
fn node_client(script: &str, flags: &[&str]) -> Value {
    let dir = clients_dir().join("node");
    let sdk = dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
    assert!(sdk.is_file(), "{} is missing: {NODE_HINT}", sdk.display());
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache");
    let out = Command::new("node")
        .arg(dir.join(script))
        .arg(env!("CARGO_BIN_EXE_dsh-host"))
        .args(flags)
        .env("DSH_CACHE_DIR", cache)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node: {e}: {NODE_HINT}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{script} printed {stdout}: {e}"))
}

/// The TypeScript SDK times a request out unless progress arrives and the caller asked it to
/// reset the timeout on progress: a command that outlasts the timeout then completes with its
/// full result. Without the reset, the same call times out, so the progress is what kept it.
#[test]
fn typescript_sdk_client_outlasts_its_request_timeout_on_progress() {
    let r = node_client("progress.mjs", &["--progress-interval-ms", "300"]);
    assert_eq!(r["text"], serde_json::json!(["done\n"]), "{r}");
    assert_eq!(r["isError"], false, "{r}");
    let reports = r["reports"].as_array().unwrap();
    assert!(reports.len() >= 4, "{r}");
    assert!(
        reports
            .windows(2)
            .all(|w| w[0]["progress"].as_f64() < w[1]["progress"].as_f64()),
        "{r}"
    );
    assert_eq!(
        r["withoutReset"], "MCP error -32001: Request timed out",
        "{r}"
    );
}
