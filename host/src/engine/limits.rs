//! Per-call guest limits: a memory cap and a CPU budget.
//!
//! The CPU budget is fuel, which counts only instructions the guest executes: time spent waiting
//! in the executor (a command that runs for minutes) costs none of it.

use wasmtime::ResourceLimiter;

/// Linear memory one call's instance may grow to.
pub const GUEST_MEMORY_LIMIT: usize = 64 * 1024 * 1024;
/// Wasm instructions (roughly) one call may execute; real calls use a tiny fraction.
pub const GUEST_FUEL: u64 = 500_000_000;

/// Raised when the guest asks for more memory than its cap, so the fault can be named.
#[derive(Debug, thiserror::Error)]
#[error("guest exceeded its memory limit ({limit} bytes, asked for {desired})")]
pub struct MemoryLimitExceeded {
    pub limit: usize,
    pub desired: usize,
}

pub struct GuestLimiter {
    memory: usize,
}

impl GuestLimiter {
    pub fn new(memory: usize) -> Self {
        Self { memory }
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory {
            // Trap at once rather than let the guest's allocator abort with an anonymous trap.
            return Err(MemoryLimitExceeded {
                limit: self.memory,
                desired,
            }
            .into());
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}
