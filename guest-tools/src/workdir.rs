//! Where a `bash` call runs.
//!
//! Relative paths are resolved here, against the caller's session cwd, because only the guest
//! knows the session; without a session cwd the executor applies its own default. Resolution
//! against the session cwd is lexical, as Node's `path.resolve` does it: `.` and empty segments
//! go, and each `..` takes the segment before it, without looking at the file system (so
//! `link/..` is the directory that holds `link`, not the parent of the link's target, and
//! `missing/../sub` is `sub`). Anything else goes as given (the tool contract).

/// The workdir to request: none or empty → the session cwd (or none, the executor's default);
/// relative with a session cwd → resolved against it; otherwise as given.
pub fn resolve(workdir: Option<&str>, cwd: Option<&str>) -> Option<String> {
    match (workdir, cwd) {
        (None | Some(""), cwd) => cwd.map(str::to_string),
        (Some(dir), Some(cwd)) if !dir.starts_with('/') => Some(normalize(&format!("{cwd}/{dir}"))),
        (Some(dir), _) => Some(dir.to_string()),
    }
}

/// `path` with `.` and empty segments dropped and each `..` taking the segment before it (at the
/// root, `..` is the root; a relative path, from a relative session cwd, keeps the `..`s it cannot
/// take back).
fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => match segments.last() {
                Some(&last) if last != ".." => {
                    segments.pop();
                }
                _ if absolute => {}
                _ => segments.push(".."),
            },
            name => segments.push(name),
        }
    }
    let joined = segments.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
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
    fn relative_resolves_against_session_cwd() {
        assert_eq!(
            resolve(Some("src"), Some("/repo")),
            Some("/repo/src".into())
        );
        assert_eq!(
            resolve(Some("a/b"), Some("/repo/")),
            Some("/repo/a/b".into())
        );
        assert_eq!(resolve(Some("src"), Some("/")), Some("/src".into()));
        assert_eq!(resolve(Some("../x"), Some("/repo")), Some("/x".into()));
        assert_eq!(resolve(Some(""), Some("/repo")), Some("/repo".into()));
        assert_eq!(resolve(Some("."), Some("/repo/")), Some("/repo".into()));
    }

    #[test]
    fn dot_dot_is_lexical() {
        assert_eq!(
            resolve(Some("missing/../sub"), Some("/repo")),
            Some("/repo/sub".into())
        );
        // Not the parent of the link's target.
        assert_eq!(resolve(Some("lnk/.."), Some("/repo")), Some("/repo".into()));
        assert_eq!(resolve(Some("../../../.."), Some("/a/b")), Some("/".into()));
        assert_eq!(
            resolve(Some("./a//b/./c/.."), Some("/r")),
            Some("/r/a/b".into())
        );
    }

    #[test]
    fn a_relative_session_cwd_keeps_what_it_cannot_take_back() {
        assert_eq!(resolve(Some("../x/./y"), Some("a")), Some("x/y".into()));
        assert_eq!(resolve(Some("../.."), Some("a")), Some("..".into()));
        assert_eq!(resolve(Some(".."), Some("a")), Some(".".into()));
    }

    #[test]
    fn absolute_is_kept_as_given() {
        assert_eq!(resolve(Some("/tmp"), Some("/repo")), Some("/tmp".into()));
        assert_eq!(resolve(Some("/tmp"), None), Some("/tmp".into()));
        assert_eq!(
            resolve(Some("/a/./b/../c/"), Some("/repo")),
            Some("/a/./b/../c/".into())
        );
    }

    #[test]
    fn without_session_cwd_relative_is_as_given_and_empty_is_the_default() {
        assert_eq!(resolve(Some("src"), None), Some("src".into()));
        assert_eq!(
            resolve(Some("missing/../sub"), None),
            Some("missing/../sub".into())
        );
        assert_eq!(resolve(Some(""), None), None);
    }
}
