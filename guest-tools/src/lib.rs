//! The bash tools as a WebAssembly component (world `tools-component` in `wit/bash.wit`).
//!
//! The component exports three model-facing tools, `bash`, `bash_output` and `bash_kill`, with
//! the instructions on how they work together, and holds every rule the model can observe: the
//! instructions, the parameter declarations and their JSON Schema, argument validation, value
//! checks, the rendering of results, status lines and the completion notices (see the tool
//! contract). It never touches a process, file, clock or random source:
//! commands run only through the imported `bash-executor` interface, and notices reach sessions
//! only through the imported `agent` interface, so any host supplying those two runs the same
//! tools with the same bytes.
//!
//! All logic is plain Rust against the traits in [`world`], built and tested natively; only
//! `component.rs` (compiled for `wasm32`) binds it to the generated WIT imports and exports.

pub mod dispatch;
pub mod instructions;
pub mod jsnum;
pub mod json;
mod json_tokens;
pub mod jstrim;
pub mod notice;
pub mod policy;
pub mod render;
pub mod schema;
pub mod status;
pub mod tools;
pub mod validate;
pub mod workdir;
pub mod world;

#[cfg(target_arch = "wasm32")]
mod component;

/// Recording doubles of the imports, for this crate's tests and, behind the `test-support`
/// feature, for harnesses outside it (the fuzz target). Not part of the component.
#[cfg(any(test, feature = "test-support"))]
pub mod fake;
