//! The environment a command gets: the host's, scrubbed of secrets, plus forced settings.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// Words that mark a variable as a secret when they appear anywhere in its name, in any case.
const SECRET_WORDS: [&[u8]; 4] = [b"KEY", b"SECRET", b"TOKEN", b"PASSWORD"];

/// Set for every command: no colours, no pagers, no prompts that would hang without a terminal.
pub(crate) const FORCED: [(&str, &str); 5] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// Whether a variable name looks like it holds a secret.
pub(crate) fn is_secret(name: &OsStr) -> bool {
    let upper = name.as_bytes().to_ascii_uppercase();
    SECRET_WORDS
        .iter()
        .any(|word| upper.windows(word.len()).any(|w| w == *word))
}

/// The child environment built from `vars` (normally the host's).
pub(crate) fn child_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vars
        .into_iter()
        .filter(|(name, _)| !is_secret(name))
        .filter(|(name, _)| {
            FORCED
                .iter()
                .all(|(forced, _)| name.as_bytes() != forced.as_bytes())
        })
        .collect();
    env.extend(FORCED.iter().map(|(k, v)| (k.into(), v.into())));
    env
}

/// The child environment built from the host's current environment.
pub(crate) fn host_child_env() -> Vec<(OsString, OsString)> {
    child_env(std::env::vars_os())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubs_secret_names_in_any_case() {
        for name in [
            "API_KEY",
            "my_secret_x",
            "GithubToken",
            "DB_PASSWORD",
            "keyring",
            "monkey",
        ] {
            assert!(is_secret(OsStr::new(name)), "{name}");
        }
        for name in ["PATH", "HOME", "PASSWD", "TOKE"] {
            assert!(!is_secret(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn forces_settings_over_host_values() {
        let env = child_env([
            ("TERM".into(), "xterm-256color".into()),
            ("PATH".into(), "/bin".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "x".into()),
        ]);
        let get = |k: &str| {
            env.iter()
                .filter(|(n, _)| n == k)
                .map(|(_, v)| v.to_str().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(get("TERM"), ["dumb"]);
        assert_eq!(get("PATH"), ["/bin"]);
        assert!(get("AWS_SECRET_ACCESS_KEY").is_empty());
        for (k, v) in FORCED {
            assert_eq!(get(k), [v]);
        }
    }
}
