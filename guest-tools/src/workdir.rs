//! Where a `bash` call runs.
//!
//! Relative paths are resolved here, against the caller's session cwd, because only the guest
//! knows the session; without a session cwd the executor applies its own default.

/// The workdir to request: none → the session cwd (or none, the executor's default); relative
/// with a session cwd → joined onto it; otherwise as given.
pub fn resolve(workdir: Option<&str>, cwd: Option<&str>) -> Option<String> {
    match (workdir, cwd) {
        (None, cwd) => cwd.map(str::to_string),
        (Some(dir), Some(cwd)) if !dir.starts_with('/') => Some(join(cwd, dir)),
        (Some(dir), _) => Some(dir.to_string()),
    }
}

/// `cwd/dir` without doubling the separator; an empty `dir` is the cwd itself.
fn join(cwd: &str, dir: &str) -> String {
    if dir.is_empty() {
        cwd.to_string()
    } else if cwd.ends_with('/') {
        format!("{cwd}{dir}")
    } else {
        format!("{cwd}/{dir}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_uses_session_cwd_else_executor_default() {
        assert_eq!(resolve(None, Some("/home/u")), Some("/home/u".into()));
        assert_eq!(resolve(None, None), None);
    }

    #[test]
    fn relative_joins_onto_session_cwd() {
        assert_eq!(
            resolve(Some("src"), Some("/repo")),
            Some("/repo/src".into())
        );
        assert_eq!(
            resolve(Some("a/b"), Some("/repo/")),
            Some("/repo/a/b".into())
        );
        assert_eq!(resolve(Some("src"), Some("/")), Some("/src".into()));
        assert_eq!(
            resolve(Some("../x"), Some("/repo")),
            Some("/repo/../x".into())
        );
        assert_eq!(resolve(Some(""), Some("/repo")), Some("/repo".into()));
    }

    #[test]
    fn absolute_is_kept() {
        assert_eq!(resolve(Some("/tmp"), Some("/repo")), Some("/tmp".into()));
        assert_eq!(resolve(Some("/tmp"), None), Some("/tmp".into()));
    }

    #[test]
    fn relative_without_session_cwd_is_given_as_is() {
        assert_eq!(resolve(Some("src"), None), Some("src".into()));
    }
}
