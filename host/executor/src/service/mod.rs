//! The executor as a service: any [`crate::Executor`] behind a small versioned protocol on a
//! byte stream (JSON-RPC 2.0, one object per line; `docs/executor-protocol.md`), and the client
//! that makes the far side an executor again.
//!
//! Made for a connection that may fail: every call that can start a command carries a request
//! id and runs at most once per id, reads name explicit offsets so an answer can be asked for
//! again, and task-done events carry a sequence number so none is passed on twice.

pub mod client;
pub(crate) mod failure;
pub mod resume;
pub mod serve;
pub(crate) mod session;
pub mod wire;

pub use client::{ConnectError, RemoteExecutor};
pub use serve::{ServeOptions, serve};
