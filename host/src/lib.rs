//! dsh-host: a native wasmtime host for the bash tools component.
//!
//! The tools (`bash`, `bash_output`, `bash_kill`) live in a WebAssembly component that holds all
//! model-facing logic and reaches processes only through its `bash-executor` import. This crate
//! supplies that import with a real process executor ([`executor::LocalExecutor`]), routes the
//! component's completion notices to agent sessions ([`inject`]), and serves the tools on the
//! command line and over MCP.
//!
//! To embed the tools in a Rust agent host: make a [`executor::LocalExecutor`] (or any
//! [`executor::Executor`]), load the component into a [`ToolHost`], open a [`Session`] per agent
//! session and hand the model's tool calls to [`ToolHost::call`]. [`ToolHost::tools`] holds the
//! definitions to show the model; a background task's completion notice arrives on the session
//! that started it. `host/examples/embed.rs` is the same as a program (`cargo run -p dsh-host
//! --example embed`); `docs/hosting.md` describes what any host, in any language, must do.
//!
//! ```rust,standalone_crate
//! use dsh_host::executor::{Config, Executor, LocalExecutor};
//! use dsh_host::{HostOptions, ToolHost};
//! use std::sync::Arc;
//! use tokio_util::sync::CancellationToken;
//!
//! fn main() -> anyhow::Result<()> {
//!     // Before any thread starts: commands are started through this program as spawn helper.
//!     dsh_host::executor::helper::dispatch();
//!     let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//!     runtime.block_on(async {
//!         let (task_done, ended) = tokio::sync::mpsc::unbounded_channel();
//!         let executor: Arc<dyn Executor> = LocalExecutor::new(Config::default(), task_done)?;
//!         // The embedded component, its compiled form cached on disk (`default_cache_dir`).
//!         let host = ToolHost::new(HostOptions::new(), executor, ended).await?;
//!         let names: Vec<&str> = host.tools().iter().map(|t| t.name.as_str()).collect();
//!         assert_eq!(names, ["bash", "bash_output", "bash_kill"]);
//!
//!         let mut session = host.open_session(Some("/".to_string()));
//!         let caller = session.caller(); // its owner token and cwd
//!         let args = r#"{"command": "pwd; exit 3", "description": "Print the directory"}"#;
//!         let result = host.call("bash", args, &caller, CancellationToken::new()).await;
//!         assert_eq!(result.text, "/\n[exit code: 3]");
//!         assert!(!result.is_error); // a non-zero exit is for the model to judge
//!
//!         let args = r#"{"command": "true", "description": "Do nothing", "run_in_background": true}"#;
//!         let started = host.call("bash", args, &caller, CancellationToken::new()).await;
//!         assert_eq!(started.text, "started background task bash-1");
//!         let notice = session.next_injection().await.expect("the session is open");
//!         assert_eq!(
//!             notice.text,
//!             "background bash task bash-1 finished [status: completed, exit code: 0]. \
//!              Read its output with bash_output."
//!         );
//!         host.shutdown().await;
//!         Ok(())
//!     })
//! }
//! ```

#![deny(missing_docs)]

pub mod cli;
pub mod config_file;
pub mod engine;
pub mod inject;
pub mod mcp;
pub mod policy;
mod task_names;

pub use dsh_executor as executor;
pub use engine::{
    Caller, ComponentSource, HostOptions, ToolAnnotations, ToolDefinition, ToolHost, ToolResult,
};
pub use inject::{Injection, Session, SessionRouter};
