//! The WASI a Rust `wasm32-wasip2` guest's std imports (`wasi:cli/*`, `wasi:io/*`), backed by the
//! deny-all context of [`CallState`]: empty environment and arguments, stdin at EOF, stdout and
//! stderr discarded. Filesystem, sockets, clocks and random are deliberately not linked. Linked
//! only for a component that imports WASI: the tools component (built for
//! `wasm32-unknown-unknown`) does not; foreign or test components (tests/fault-guest) may.

use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi::cli::{WasiCli, WasiCliView};
use wasmtime_wasi::p2::bindings::cli;

use super::state::CallState;

impl wasmtime_wasi_io::IoView for CallState {
    fn table(&mut self) -> &mut ResourceTable {
        wasmtime_wasi::WasiView::ctx(self).table
    }
}

pub fn add_to_linker(l: &mut Linker<CallState>) -> wasmtime::Result<()> {
    wasmtime_wasi_io::add_to_linker_async(l)?;
    cli::exit::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::environment::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::stdin::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::stdout::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::stderr::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::terminal_input::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::terminal_output::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::terminal_stdin::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::terminal_stdout::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    cli::terminal_stderr::add_to_linker::<CallState, WasiCli>(l, CallState::cli)?;
    Ok(())
}
