//! Validation of [`Config`], and the conversion of its millisecond settings into durations.

use std::time::Duration;

use crate::{Config, ConfigError};

/// Longest wait we ever arm. Larger finite settings are honoured as "practically forever" instead
/// of overflowing `Duration` or the timer wheel.
const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl Config {
    /// Checks every setting; the error names the first bad one as the CLI spells it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        positive_ms("timeout-ms", self.default_timeout_ms)?;
        positive_ms("max-timeout-ms", self.max_timeout_ms)?;
        if self.default_timeout_ms > self.max_timeout_ms {
            return Err(ConfigError {
                setting: "timeout-ms",
                reason: format!(
                    "{} exceeds max-timeout-ms ({})",
                    self.default_timeout_ms, self.max_timeout_ms
                ),
            });
        }
        positive_count("max-output-bytes", self.max_output_bytes)?;
        positive_ms("grace-ms", self.grace_ms)?;
        positive_count("max-spill-bytes", self.max_spill_bytes)?;
        positive_count("max-spill-total-bytes", self.max_spill_total_bytes)?;
        positive_count("max-session-spill-bytes", self.max_session_spill_bytes)?;
        positive_count("max-tasks", self.max_tasks as u64)?;
        positive_count("max-finished-tasks", self.max_finished_tasks as u64)?;
        positive_count("max-session-tasks", self.max_session_tasks as u64)?;
        positive_count(
            "max-session-finished-tasks",
            self.max_session_finished_tasks as u64,
        )?;
        positive_count("max-command-bytes", self.max_command_bytes)?;
        if let Some(ms) = self.yield_after_ms {
            positive_ms("yield-after-ms", ms)?;
        }
        if self.max_command_bytes > crate::bash::long_command::MAX_COMMAND_BYTES {
            return Err(ConfigError {
                setting: "max-command-bytes",
                reason: format!(
                    "{} exceeds the largest supported ({})",
                    self.max_command_bytes,
                    crate::bash::long_command::MAX_COMMAND_BYTES
                ),
            });
        }
        // A missing default cwd would fail every call without a workdir: refuse it up front.
        // The spill dir is not checked: an unusable one degrades to memory-only output.
        if let Some(cwd) = &self.cwd {
            match std::fs::metadata(cwd) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(ConfigError {
                        setting: "cwd",
                        reason: format!("{} is not a directory", cwd.display()),
                    });
                }
                Err(err) => {
                    return Err(ConfigError {
                        setting: "cwd",
                        reason: format!("{}: {err}", cwd.display()),
                    });
                }
            }
        }
        Ok(())
    }
}

fn positive_ms(setting: &'static str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(ConfigError {
            setting,
            reason: format!("expected a finite number > 0, got {value}"),
        })
    }
}

fn positive_count(setting: &'static str, value: u64) -> Result<(), ConfigError> {
    if value > 0 {
        Ok(())
    } else {
        Err(ConfigError {
            setting,
            reason: "expected a number > 0, got 0".to_string(),
        })
    }
}

/// A validated millisecond setting as a duration, clamped to [`LONGEST`].
pub(crate) fn duration_ms(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms / 1000.0).map_or(LONGEST, |d| d.min(LONGEST))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid() {
        assert_eq!(Config::default().validate(), Ok(()));
    }

    #[test]
    fn each_bad_setting_is_named() {
        type Edit = fn(&mut Config);
        let cases: [(Edit, &str); 20] = [
            (|c| c.default_timeout_ms = 0.0, "timeout-ms"),
            (|c| c.default_timeout_ms = f64::NAN, "timeout-ms"),
            (|c| c.max_timeout_ms = f64::INFINITY, "max-timeout-ms"),
            (|c| c.max_timeout_ms = -1.0, "max-timeout-ms"),
            (|c| c.default_timeout_ms = 700_000.0, "timeout-ms"),
            (|c| c.max_output_bytes = 0, "max-output-bytes"),
            (|c| c.grace_ms = f64::NEG_INFINITY, "grace-ms"),
            (|c| c.max_spill_bytes = 0, "max-spill-bytes"),
            (|c| c.max_spill_total_bytes = 0, "max-spill-total-bytes"),
            (|c| c.max_session_spill_bytes = 0, "max-session-spill-bytes"),
            (|c| c.max_tasks = 0, "max-tasks"),
            (|c| c.max_finished_tasks = 0, "max-finished-tasks"),
            (|c| c.max_session_tasks = 0, "max-session-tasks"),
            (
                |c| c.max_session_finished_tasks = 0,
                "max-session-finished-tasks",
            ),
            (|c| c.max_command_bytes = 0, "max-command-bytes"),
            (
                |c| c.max_command_bytes = (64 << 20) + 1,
                "max-command-bytes",
            ),
            (|c| c.cwd = Some("/definitely/not/here".into()), "cwd"),
            (|c| c.yield_after_ms = Some(0.0), "yield-after-ms"),
            (|c| c.yield_after_ms = Some(f64::NAN), "yield-after-ms"),
            (|c| c.yield_after_ms = Some(f64::INFINITY), "yield-after-ms"),
        ];
        for (edit, setting) in cases {
            let mut config = Config::default();
            edit(&mut config);
            assert_eq!(config.validate().unwrap_err().setting, setting);
        }
    }

    #[test]
    fn durations_clamp() {
        assert_eq!(duration_ms(1500.0), Duration::from_millis(1500));
        assert_eq!(duration_ms(1e300), LONGEST);
    }
}
