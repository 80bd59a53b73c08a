//! dsh-host: a native wasmtime host for the bash tools component.
//!
//! The tools (`bash`, `bash_output`, `bash_kill`) live in a WebAssembly component that holds all
//! model-facing logic and reaches processes only through its `bash-executor` import. This crate
//! supplies that import with a real process executor ([`executor::LocalExecutor`]), routes the
//! component's completion notices to agent sessions ([`inject`]), and serves the tools on the
//! command line and over MCP.

pub mod cli;
pub mod config_file;
pub mod engine;
pub mod inject;
pub mod mcp;

pub use dsh_executor as executor;
pub use engine::{
    Caller, ComponentSource, HostOptions, ToolAnnotations, ToolDefinition, ToolHost, ToolResult,
};
pub use inject::{Injection, Session, SessionRouter};
