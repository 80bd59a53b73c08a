//! Whether a working directory can be used, with the message the tools show when it cannot.

use std::io;
use std::path::Path;

use crate::ExecError;

/// Checks that `dir` exists, is a directory, and can be entered.
pub(crate) fn check(dir: &str) -> Result<(), ExecError> {
    let meta = std::fs::metadata(dir).map_err(|err| unusable(dir, &err))?;
    if !meta.is_dir() {
        return Err(unusable(dir, &io::Error::from_raw_os_error(libc::ENOTDIR)));
    }
    rustix::fs::access(Path::new(dir), rustix::fs::Access::EXEC_OK)
        .map_err(|err| unusable(dir, &err.into()))
}

/// `workdir "/nope" is not usable: No such file or directory (os error 2)`.
pub(crate) fn unusable(dir: &str, err: &io::Error) -> ExecError {
    ExecError::WorkdirUnusable(format!("workdir {dir:?} is not usable: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_dir_and_os_error() {
        assert_eq!(
            check("/definitely/not/here"),
            Err(ExecError::WorkdirUnusable(
                "workdir \"/definitely/not/here\" is not usable: No such file or directory (os error 2)"
                    .into()
            ))
        );
        let file = tempfile::NamedTempFile::new().unwrap();
        let path = file.path().to_str().unwrap();
        assert_eq!(
            check(path),
            Err(ExecError::WorkdirUnusable(format!(
                "workdir {path:?} is not usable: Not a directory (os error 20)"
            )))
        );
        assert_eq!(check("/"), Ok(()));
    }
}
