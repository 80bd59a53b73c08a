//! `--config FILE`: the command line's common settings from a TOML file.
//!
//! Each key is the name of a common long flag without its dashes (`timeout-ms`, `env-deny`, …)
//! and means exactly what the flag means: the file is read into flags placed before the command
//! line's own, and clap parses both, so every value gets the flag's own checks and messages. A
//! flag given on the command line wins over the file; a repeatable flag (`env-deny`,
//! `env-allow`) takes the file's values and the command line's. A key that is no common flag, a
//! list for a flag that takes one value, or a table, is refused naming the file and the key.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{ArgAction, CommandFactory, Parser};

use crate::cli::Cli;

/// The flag that names the file.
const FLAG: &str = "config";

/// Why the `--config` file could not be applied (`dsh-host` exits 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// `--config` was the last argument.
    #[error("--config needs a file")]
    MissingPath,
    /// The file could not be read.
    #[error("cannot read the config file {path}: {source}")]
    Read {
        /// The file as named.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or holds a setting the command line does not have.
    #[error("config file {path}: {message}")]
    Invalid {
        /// The file as named.
        path: PathBuf,
        /// What is wrong, naming the setting.
        message: String,
    },
}

/// The command line `args` (program name first) with the settings of the `--config` file, if it
/// names one, inserted as flags after the program name.
pub fn with_config_file(args: Vec<OsString>) -> Result<Vec<OsString>, ConfigFileError> {
    let Some(path) = config_path(&args)? else {
        return Ok(args);
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigFileError::Read {
        path: path.clone(),
        source,
    })?;
    let flags = file_flags(&text)
        .and_then(|flags| check_values(&flags).map(|()| flags))
        .map_err(|message| ConfigFileError::Invalid {
            path: path.clone(),
            message,
        })?;
    let mut out = Vec::with_capacity(args.len() + flags.len());
    let mut args = args.into_iter();
    out.extend(args.next());
    out.extend(flags.into_iter().map(OsString::from));
    out.extend(args);
    Ok(out)
}

/// The value of `--config` on the command line (before any `--`).
fn config_path(args: &[OsString]) -> Result<Option<PathBuf>, ConfigFileError> {
    let long = format!("--{FLAG}");
    let with_value = format!("--{FLAG}=");
    let mut path = None;
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        let Some(arg) = arg.to_str() else { continue };
        if arg == "--" {
            break;
        }
        if arg == long {
            let value = rest.next().ok_or(ConfigFileError::MissingPath)?;
            path = Some(PathBuf::from(value));
        } else if let Some(value) = arg.strip_prefix(&with_value) {
            path = Some(PathBuf::from(value));
        }
    }
    Ok(path.filter(|p: &PathBuf| p != Path::new("")))
}

/// The flags a config file's text stands for.
fn file_flags(text: &str) -> Result<Vec<String>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let command = Cli::command();
    let mut flags = Vec::new();
    for (key, value) in &table {
        let arg = command
            .get_arguments()
            .find(|a| a.is_global_set() && a.get_long() == Some(key.as_str()) && key != FLAG)
            .ok_or_else(|| {
                let known: Vec<&str> = command
                    .get_arguments()
                    .filter(|a| a.is_global_set())
                    .filter_map(|a| a.get_long())
                    .filter(|l| *l != FLAG)
                    .collect();
                format!(
                    "unknown setting `{key}`; the settings are {}",
                    known.join(", ")
                )
            })?;
        let repeatable = matches!(arg.get_action(), ArgAction::Append);
        let switch = matches!(arg.get_action(), ArgAction::SetTrue);
        match value {
            toml::Value::Array(items) if repeatable => {
                for item in items {
                    flags.push(format!("--{key}={}", scalar(key, item)?));
                }
            }
            toml::Value::Array(_) => return Err(format!("`{key}` takes one value, not a list")),
            toml::Value::Boolean(on) if switch => {
                if *on {
                    flags.push(format!("--{key}"));
                }
            }
            _ if switch => return Err(format!("`{key}` is true or false")),
            value => flags.push(format!("--{key}={}", scalar(key, value)?)),
        }
    }
    Ok(flags)
}

/// Every value passes its flag's checks (alone, so that an error names the file).
fn check_values(flags: &[String]) -> Result<(), String> {
    let args = ["dsh-host"]
        .into_iter()
        .chain(flags.iter().map(String::as_str))
        .chain(["doctor"]);
    match Cli::try_parse_from(args) {
        Ok(_) => Ok(()),
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            Err(first.strip_prefix("error: ").unwrap_or(first).to_string())
        }
    }
}

/// A single value as flag text.
fn scalar(key: &str, value: &toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(x) => Ok(x.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        _ => Err(format!("`{key}` takes a string or a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_become_flags() {
        let flags = file_flags(
            "timeout-ms = 5000\ngrace-ms = 2.5\nenv-deny = [\"*_PAT\", \"DATABASE_URL\"]\n\
             keep-spill = true\ncontainment = \"subreaper\"\n",
        )
        .unwrap();
        assert_eq!(
            flags,
            [
                "--containment=subreaper",
                "--env-deny=*_PAT",
                "--env-deny=DATABASE_URL",
                "--grace-ms=2.5",
                "--keep-spill",
                "--timeout-ms=5000",
            ]
        );
    }

    #[test]
    fn bad_settings_are_named() {
        let unknown = file_flags("timeout = 5").unwrap_err();
        assert!(
            unknown.starts_with("unknown setting `timeout`; the settings are "),
            "{unknown}"
        );
        assert!(unknown.contains("timeout-ms"), "{unknown}");
        assert_eq!(
            file_flags("timeout-ms = [1, 2]").unwrap_err(),
            "`timeout-ms` takes one value, not a list"
        );
        assert_eq!(
            file_flags("keep-spill = 1").unwrap_err(),
            "`keep-spill` is true or false"
        );
        assert_eq!(
            file_flags("config = \"x\"").unwrap_err().split(';').next(),
            Some("unknown setting `config`")
        );
        assert!(file_flags("timeout-ms = ").is_err());
    }

    #[test]
    fn the_path_comes_from_the_command_line() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(config_path(&args(&["d", "mcp"])).unwrap(), None);
        assert_eq!(
            config_path(&args(&["d", "--config", "a.toml", "mcp"])).unwrap(),
            Some(PathBuf::from("a.toml"))
        );
        assert_eq!(
            config_path(&args(&["d", "mcp", "--config=b.toml"])).unwrap(),
            Some(PathBuf::from("b.toml"))
        );
        assert!(matches!(
            config_path(&args(&["d", "mcp", "--config"])),
            Err(ConfigFileError::MissingPath)
        ));
    }
}
