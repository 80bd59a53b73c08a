//! A foreground run's output so far, for progress reports while the caller waits.

use std::sync::{Arc, Mutex};

use crate::output::stream::Output;

/// Counts the bytes a foreground command has written to stdout and stderr so far. The caller
/// makes one, hands a clone to [`crate::Executor::run_metered`] and reads it while the run goes
/// on; it reads 0 until the command has started (and with executors that do not count).
#[derive(Debug, Clone, Default)]
pub struct OutputMeter {
    streams: Arc<Mutex<Option<[Arc<Output>; 2]>>>,
}

impl OutputMeter {
    /// A meter reading 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes written to both streams so far, kept or not.
    pub fn bytes(&self) -> u64 {
        let streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        streams
            .as_ref()
            .map_or(0, |[out, err]| out.total() + err.total())
    }

    pub(crate) fn attach(&self, outputs: &[Arc<Output>; 2]) {
        *self.streams.lock().unwrap_or_else(|e| e.into_inner()) = Some(outputs.clone());
    }
}
