//! `--config FILE`: the command line's settings from a TOML file.
//!
//! Each key is the name of a long flag without its dashes (`timeout-ms`, `env-deny`, …): a common
//! flag, or one of `dsh-host mcp`'s own (`http`, `http-token-file`, `max-calls-in-flight`, …), and
//! means exactly what the flag means: the file is read into flags placed before the command
//! line's own (common ones after the program name, `mcp`'s after `mcp`), and clap parses both,
//! so every value gets the flag's own checks and messages. A flag given on the command line wins
//! over the file, and so does one that excludes the file's (`--http-token` over the file's
//! `http-token-file`); a repeatable flag (`env-deny`, `env-allow`, `http-allow-origin`) takes the
//! file's values and the command line's. `mcp`'s settings apply to `dsh-host mcp` only, and the
//! `http-*` ones only when it serves HTTP (`http` in the file or `--http`), so that one file can
//! serve both transports. A key that is no flag, a list for a flag that takes one value, or a
//! table, is refused naming the file and the key.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command, CommandFactory, Parser};

use crate::cli::Cli;

/// The flag that names the file.
const FLAG: &str = "config";

/// The subcommand whose own flags the file may also hold.
const MCP: &str = "mcp";

/// The `mcp` flag that chooses HTTP, which the other `http-*` flags need.
const HTTP: &str = "http";

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
/// names one, inserted as flags: common ones after the program name, `mcp`'s after `mcp`.
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
    if flags.mcp.iter().any(|f| f.key == "http-token") {
        warn_if_readable(&path);
    }
    Ok(merge(args, flags))
}

/// A file that holds a secret should be its user's only, like the token file.
fn warn_if_readable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        // Logging starts after the command line is read.
        eprintln!(
            "dsh-host: warning: the config file {} holds http-token and is readable by other \
             users (chmod 600 it)",
            path.display()
        );
    }
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

/// One setting of the file, as flag text (`--timeout-ms=5000`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileFlag {
    key: String,
    text: String,
}

/// The flags a config file stands for: common ones, and `mcp`'s own.
#[derive(Debug, Default, PartialEq, Eq)]
struct FileFlags {
    common: Vec<FileFlag>,
    mcp: Vec<FileFlag>,
}

/// The common flags a file may set: every global long flag but `--config`.
fn common_args(command: &Command) -> impl Iterator<Item = &Arg> {
    command
        .get_arguments()
        .filter(|a| a.is_global_set() && a.get_long().is_some_and(|l| l != FLAG))
}

/// `dsh-host mcp`'s own flags.
fn mcp_args(command: &Command) -> impl Iterator<Item = &Arg> {
    command
        .find_subcommand(MCP)
        .into_iter()
        .flat_map(Command::get_arguments)
        .filter(|a| !a.is_global_set() && a.get_long().is_some_and(|l| l != "help"))
}

/// The flags a config file's text stands for.
fn file_flags(text: &str) -> Result<FileFlags, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let command = Cli::command();
    let mut flags = FileFlags::default();
    for (key, value) in &table {
        let named = |a: &&Arg| a.get_long() == Some(key.as_str());
        let (arg, into) = if let Some(arg) = common_args(&command).find(named) {
            (arg, &mut flags.common)
        } else if let Some(arg) = mcp_args(&command).find(named) {
            (arg, &mut flags.mcp)
        } else {
            let known: Vec<&str> = common_args(&command)
                .chain(mcp_args(&command))
                .filter_map(Arg::get_long)
                .collect();
            return Err(format!(
                "unknown setting `{key}`; the settings are {}",
                known.join(", ")
            ));
        };
        let repeatable = matches!(arg.get_action(), ArgAction::Append);
        let switch = matches!(arg.get_action(), ArgAction::SetTrue);
        let mut push = |text: String| {
            into.push(FileFlag {
                key: key.clone(),
                text,
            })
        };
        match value {
            toml::Value::Array(items) if repeatable => {
                for item in items {
                    push(format!("--{key}={}", scalar(key, item)?));
                }
            }
            toml::Value::Array(_) => return Err(format!("`{key}` takes one value, not a list")),
            toml::Value::Boolean(on) if switch => {
                if *on {
                    push(format!("--{key}"));
                }
            }
            _ if switch => return Err(format!("`{key}` is true or false")),
            value => push(format!("--{key}={}", scalar(key, value)?)),
        }
    }
    Ok(flags)
}

/// Every value passes its flag's checks (alone, so that an error names the file). `mcp`'s
/// flags are checked as `dsh-host mcp` takes them, with a stand-in address when the file has
/// none: its `http-*` settings wait for one from the command line.
fn check_values(flags: &FileFlags) -> Result<(), String> {
    let mut args = vec!["dsh-host"];
    args.extend(flags.common.iter().map(|f| f.text.as_str()));
    args.push(MCP);
    if !flags.mcp.iter().any(|f| f.key == HTTP) {
        args.push("--http=127.0.0.1:0");
    }
    args.extend(flags.mcp.iter().map(|f| f.text.as_str()));
    match Cli::try_parse_from(args) {
        Ok(_) => Ok(()),
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            Err(first.strip_prefix("error: ").unwrap_or(first).to_string())
        }
    }
}

/// `args` with the file's flags in place; those the command line overrides or excludes, and
/// `mcp`'s where they do not apply, left out.
fn merge(args: Vec<OsString>, flags: FileFlags) -> Vec<OsString> {
    let command = Cli::command();
    let given = given_flags(&args);
    let subcommand = subcommand_at(&command, &args);
    let serves_mcp = subcommand.is_some_and(|i| args[i] == MCP);
    let serves_http = given.contains(HTTP) || flags.mcp.iter().any(|f| f.key == HTTP);
    let mcp: Vec<FileFlag> = flags
        .mcp
        .into_iter()
        .filter(|f| serves_mcp && (serves_http || !f.key.starts_with("http-")))
        .filter(|f| !excluded(&command, &f.key, &given))
        .collect();
    let common = flags
        .common
        .into_iter()
        .filter(|f| !excluded(&command, &f.key, &given));

    let mut out = Vec::with_capacity(args.len() + mcp.len());
    let mut args = args.into_iter();
    out.extend(args.next());
    out.extend(common.map(|f| OsString::from(f.text)));
    // Up to and including the subcommand's name (at `i` counting the program name, out already).
    out.extend(args.by_ref().take(subcommand.unwrap_or(0)));
    out.extend(mcp.into_iter().map(|f| OsString::from(f.text)));
    out.extend(args);
    out
}

/// The long flags the command line gives (before any `--`), without their dashes.
fn given_flags(args: &[OsString]) -> HashSet<String> {
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .take_while(|a| *a != "--")
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split('=').next().unwrap_or(a).to_string())
        .collect()
}

/// Where the subcommand's name is in `args`: the first word that is neither a flag nor a
/// common flag's value.
fn subcommand_at(command: &Command, args: &[OsString]) -> Option<usize> {
    let mut words = args.iter().enumerate().skip(1);
    while let Some((i, word)) = words.next() {
        let word = word.to_str()?;
        if word == "--" {
            return None;
        }
        let Some(flag) = word.strip_prefix("--") else {
            if word.starts_with('-') {
                continue;
            }
            return Some(i);
        };
        let takes_value = !flag.contains('=')
            && common_args(command)
                .chain(
                    command
                        .get_arguments()
                        .filter(|a| a.get_long() == Some(FLAG)),
                )
                .any(|a| a.get_long() == Some(flag) && a.get_action().takes_values());
        if takes_value {
            words.next();
        }
    }
    None
}

/// The command line sets a flag that excludes the file's `key` (`--http-token` excludes the
/// file's `http-token-file`, and the other way round).
fn excluded(command: &Command, key: &str, given: &HashSet<String>) -> bool {
    let all: Vec<&Arg> = common_args(command).chain(mcp_args(command)).collect();
    let Some(arg) = all.iter().find(|a| a.get_long() == Some(key)) else {
        return false;
    };
    let scope = |a: &Arg| {
        if a.is_global_set() {
            command
        } else {
            command.find_subcommand(MCP).unwrap_or(command)
        }
    };
    all.iter()
        .filter(|other| {
            other
                .get_long()
                .is_some_and(|l| l != key && given.contains(l))
        })
        .any(|other| {
            let conflicts = |a: &Arg, b: &Arg| {
                scope(a)
                    .get_arg_conflicts_with(a)
                    .iter()
                    .any(|c| c.get_id() == b.get_id())
            };
            conflicts(arg, other) || conflicts(other, arg)
        })
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

    fn texts(flags: &[FileFlag]) -> Vec<&str> {
        flags.iter().map(|f| f.text.as_str()).collect()
    }

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn settings_become_flags() {
        let flags = file_flags(
            "timeout-ms = 5000\ngrace-ms = 2.5\nenv-deny = [\"*_PAT\", \"DATABASE_URL\"]\n\
             keep-spill = true\ncontainment = \"subreaper\"\n",
        )
        .unwrap();
        assert_eq!(
            texts(&flags.common),
            [
                "--containment=subreaper",
                "--env-deny=*_PAT",
                "--env-deny=DATABASE_URL",
                "--grace-ms=2.5",
                "--keep-spill",
                "--timeout-ms=5000",
            ]
        );
        assert!(flags.mcp.is_empty());
    }

    #[test]
    fn mcp_settings_become_its_flags() {
        let flags = file_flags(
            "http = \"127.0.0.1:8765\"\nhttp-token-file = \"/run/dsh/token\"\n\
             http-allow-origin = [\"https://a.example\", \"http://localhost:3000\"]\n\
             http-max-sessions = 8\nhttp-session-idle-ms = 60000\nmax-calls-in-flight = 4\n\
             progress-interval-ms = 5000\ncwd = \"/srv\"\n",
        )
        .unwrap();
        assert_eq!(texts(&flags.common), ["--cwd=/srv"]);
        assert_eq!(
            texts(&flags.mcp),
            [
                "--http=127.0.0.1:8765",
                "--http-allow-origin=https://a.example",
                "--http-allow-origin=http://localhost:3000",
                "--http-max-sessions=8",
                "--http-session-idle-ms=60000",
                "--http-token-file=/run/dsh/token",
                "--max-calls-in-flight=4",
                "--progress-interval-ms=5000",
            ]
        );
        assert_eq!(check_values(&flags), Ok(()));
        // The http-* settings alone pass: the address may come from the command line.
        assert_eq!(
            check_values(&file_flags("http-max-sessions = 2\n").unwrap()),
            Ok(())
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
        assert!(unknown.contains("http-max-sessions"), "{unknown}");
        assert_eq!(
            file_flags("timeout-ms = [1, 2]").unwrap_err(),
            "`timeout-ms` takes one value, not a list"
        );
        assert_eq!(
            file_flags("http = [\"1\", \"2\"]").unwrap_err(),
            "`http` takes one value, not a list"
        );
        assert_eq!(
            file_flags("keep-spill = 1").unwrap_err(),
            "`keep-spill` is true or false"
        );
        for key in ["config", "help"] {
            assert_eq!(
                file_flags(&format!("{key} = \"x\""))
                    .unwrap_err()
                    .split(';')
                    .next(),
                Some(format!("unknown setting `{key}`").as_str())
            );
        }
        assert!(file_flags("timeout-ms = ").is_err());
    }

    /// A bad value gets the flag's own message.
    #[test]
    fn mcp_values_get_the_flags_checks() {
        let check = |text: &str| check_values(&file_flags(text).unwrap()).unwrap_err();
        assert_eq!(
            check("http = \"example.com:80\""),
            "invalid value 'example.com:80' for '--http <ADDR>': expected IP:PORT (e.g. \
             127.0.0.1:8765, [::1]:8765), localhost:PORT or PORT, got \"example.com:80\""
        );
        assert_eq!(
            check("http-max-sessions = 0"),
            "invalid value '0' for '--http-max-sessions <N>': expected a whole number > 0, got 0"
        );
        assert_eq!(
            check("http-session-idle-ms = -5"),
            "invalid value '-5' for '--http-session-idle-ms <MS>': expected a finite number > 0, \
             got -5"
        );
        assert!(
            check("http-allow-origin = \"not an origin\"")
                .starts_with("invalid value 'not an origin' for '--http-allow-origin <ORIGIN>'")
        );
        assert_eq!(
            check("http-token = \"a\"\nhttp-token-file = \"f\""),
            "the argument '--http-token <TOKEN>' cannot be used with '--http-token-file <FILE>'"
        );
    }

    #[test]
    fn mcp_settings_go_after_mcp_and_the_command_line_wins() {
        let flags = file_flags(
            "timeout-ms = 5\nhttp = \"8765\"\nhttp-token-file = \"f\"\nhttp-max-sessions = 2\n",
        )
        .unwrap();
        let merged = merge(
            args(&[
                "d",
                "--cwd",
                "x",
                "mcp",
                "--http-token",
                "t",
                "--http-max-sessions",
                "3",
            ]),
            flags,
        );
        assert_eq!(
            merged,
            args(&[
                "d",
                "--timeout-ms=5",
                "--cwd",
                "x",
                "mcp",
                "--http=8765",
                // The command line's later one wins.
                "--http-max-sessions=2",
                // The command line's token excludes the file's token file.
                "--http-token",
                "t",
                "--http-max-sessions",
                "3",
            ])
        );
        let cli = Cli::try_parse_from(&merged).unwrap();
        let crate::cli::Command::Mcp { http, .. } = cli.command else {
            panic!("not mcp: {cli:?}");
        };
        assert_eq!(http.http_max_sessions, 3);
        assert_eq!(http.http_token.as_deref(), Some("t"));
        assert_eq!(http.http_token_file, None);
    }

    #[test]
    fn mcp_settings_apply_only_where_they_mean_something() {
        let file = "http-max-sessions = 2\nmax-calls-in-flight = 3\ngrace-ms = 7\n";
        // Other commands take the common settings only.
        assert_eq!(
            merge(args(&["d", "tools"]), file_flags(file).unwrap()),
            args(&["d", "--grace-ms=7", "tools"])
        );
        // Over stdio, the http-* settings wait for an address.
        assert_eq!(
            merge(args(&["d", "mcp"]), file_flags(file).unwrap()),
            args(&["d", "--grace-ms=7", "mcp", "--max-calls-in-flight=3"])
        );
        assert_eq!(
            merge(args(&["d", "mcp", "--http=0"]), file_flags(file).unwrap()),
            args(&[
                "d",
                "--grace-ms=7",
                "mcp",
                "--http-max-sessions=2",
                "--max-calls-in-flight=3",
                "--http=0"
            ])
        );
        // A common flag's value is not the subcommand.
        assert_eq!(
            merge(
                args(&[
                    "d",
                    "--config",
                    "mcp",
                    "--cwd=/",
                    "--component",
                    "tools",
                    "mcp"
                ]),
                file_flags("max-calls-in-flight = 3").unwrap()
            ),
            args(&[
                "d",
                "--config",
                "mcp",
                "--cwd=/",
                "--component",
                "tools",
                "mcp",
                "--max-calls-in-flight=3"
            ])
        );
    }

    #[test]
    fn the_path_comes_from_the_command_line() {
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
