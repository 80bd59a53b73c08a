//! The environment a command gets: the host's, scrubbed of secrets, plus forced settings.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// Words that mark a variable as a secret when they appear anywhere in its name, in any case.
const SECRET_WORDS: [&[u8]; 4] = [b"KEY", b"SECRET", b"TOKEN", b"PASSWORD"];

/// Which of the host's variables commands do not get: names holding a secret word (the
/// executor contract's rule) or matching one of the operator's deny patterns, unless the
/// operator allows the name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    /// More patterns to scrub (`*` matches any run of characters; any case).
    pub deny: Vec<String>,
    /// Names passed on whatever the patterns say (exact, case-sensitive).
    pub allow: Vec<String>,
}

impl EnvPolicy {
    /// Whether a command does not get the variable `name`.
    pub fn scrubs(&self, name: &OsStr) -> bool {
        if self.allow.iter().any(|a| a.as_bytes() == name.as_bytes()) {
            return false;
        }
        is_secret(name)
            || self
                .deny
                .iter()
                .any(|pattern| matches_pattern(pattern.as_bytes(), name.as_bytes()))
    }

    /// The names in the host's environment that commands do not get, sorted.
    pub fn scrubbed_host_names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::env::vars_os()
            .map(|(name, _)| name)
            .filter(|name| self.scrubs(name))
            .map(|name| name.to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

/// Whether `name` matches `pattern`, where `*` matches any run of bytes, ignoring ASCII case.
fn matches_pattern(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|skip| matches_pattern(rest, &name[skip..])),
        Some((first, rest)) => name
            .split_first()
            .is_some_and(|(n, name)| n.eq_ignore_ascii_case(first) && matches_pattern(rest, name)),
    }
}

/// Set for every command: no colours, no pagers, no prompts that would hang without a terminal.
pub(crate) const FORCED: [(&str, &str); 5] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// Whether a variable name holds one of the secret words.
fn is_secret(name: &OsStr) -> bool {
    let upper = name.as_bytes().to_ascii_uppercase();
    SECRET_WORDS
        .iter()
        .any(|word| upper.windows(word.len()).any(|w| w == *word))
}

/// The child environment built from `vars` (normally the host's).
pub(crate) fn child_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    policy: &EnvPolicy,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vars
        .into_iter()
        .filter(|(name, _)| !policy.scrubs(name))
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
pub(crate) fn host_child_env(policy: &EnvPolicy) -> Vec<(OsString, OsString)> {
    child_env(std::env::vars_os(), policy)
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
    fn operator_patterns_and_allowed_names() {
        let policy = EnvPolicy {
            deny: vec![
                "*_PAT".into(),
                "*_CREDENTIALS".into(),
                "*_PASSWD".into(),
                "SSH_AUTH_SOCK".into(),
                "corp_*".into(),
                "EXACT".into(),
            ],
            allow: vec!["GITLAB_PAT".into(), "MY_API_KEY".into()],
        };
        for name in [
            "GITHUB_PAT",
            "google_application_credentials",
            "ROOT_PASSWD",
            "SSH_AUTH_SOCK",
            "CORP_PROXY",
            "exact",
            "GITHUB_TOKEN",
        ] {
            assert!(policy.scrubs(OsStr::new(name)), "{name}");
        }
        for name in [
            "GITLAB_PAT",
            "MY_API_KEY",
            "PATH",
            "PATTERN",
            "EXACTLY",
            "SSH_AUTH_SOCKET",
        ] {
            assert!(!policy.scrubs(OsStr::new(name)), "{name}");
        }
        // By default only the contract's words count.
        for name in ["DATABASE_URL", "GITHUB_PAT", "SSH_AUTH_SOCK"] {
            assert!(!EnvPolicy::default().scrubs(OsStr::new(name)), "{name}");
        }
        assert!(EnvPolicy::default().scrubs(OsStr::new("GITHUB_TOKEN")));
    }

    #[test]
    fn patterns_match_whole_names() {
        assert!(matches_pattern(b"*", b""));
        assert!(matches_pattern(b"a*b*c", b"AxxBC"));
        assert!(!matches_pattern(b"a*b", b"ab_"));
        assert!(!matches_pattern(b"", b"a"));
    }

    #[test]
    fn forces_settings_over_host_values() {
        let env = child_env(
            [
                ("TERM".into(), "xterm-256color".into()),
                ("PATH".into(), "/bin".into()),
                ("AWS_SECRET_ACCESS_KEY".into(), "x".into()),
            ],
            &EnvPolicy::default(),
        );
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
