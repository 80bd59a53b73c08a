//! Embedding the tools in a Rust agent host: the README's example, compiled by `cargo test`.
//!
//! `cargo run -p dsh-host --example embed`

use std::sync::Arc;

use dsh_host::executor::{Config, Executor, LocalExecutor};
use dsh_host::{HostOptions, ToolHost};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    let executor: Arc<dyn Executor> = LocalExecutor::new(Config::default(), done_tx)?;
    let host = ToolHost::new(HostOptions::new(), executor, done_rx).await?;

    let mut session = host.open_session(Some(std::env::temp_dir().display().to_string()));
    let args = r#"{"command":"echo hello; sleep 0.1 &","description":"Greet and leave a child"}"#;
    let result = host
        .call("bash", args, &session.caller(), CancellationToken::new())
        .await;
    println!("{} (error: {})", result.text, result.is_error);

    let args = r#"{"command":"sleep 0.2","description":"Wait in the background","run_in_background":true}"#;
    let started = host
        .call("bash", args, &session.caller(), CancellationToken::new())
        .await;
    println!("{}", started.text);
    // The component writes the completion notice and injects it into this session.
    if let Some(notice) = session.next_injection().await {
        println!("{}", notice.text);
    }

    host.shutdown().await; // kills and awaits running tasks
    Ok(())
}
