//! Waiting for something that should happen promptly: polled every 50 ms, and a panic naming
//! what did not happen in time.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Polls `done` until it holds; panics "not in time: {what}" after `within`.
pub async fn until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "not in time: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `attempt` until it gives a value, and returns it; panics "not in time: {what}" after
/// `within`.
pub async fn until_some<T, F>(what: &str, within: Duration, mut attempt: impl FnMut() -> F) -> T
where
    F: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = attempt().await {
            return value;
        }
        assert!(Instant::now() < deadline, "not in time: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
