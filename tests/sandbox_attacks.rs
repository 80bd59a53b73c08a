//! The sandbox's bypasses, tried: each attack must fail, judged by ground truth.

#[path = "support/sandbox.rs"]
mod sandbox;
