//! Errors of preparing a sandbox that say where they happened and keep their error number: the
//! helper prints the text and tells the host the number (all its failure record holds).

use std::fmt;
use std::io;

/// An error number with the text that explains it.
#[derive(Debug)]
struct Explained {
    errno: i32,
    text: String,
}

impl fmt::Display for Explained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Explained {}

/// `err` preceded by `what` (`"{what}: {err}"`), keeping its error number where it has one.
pub(crate) fn context(err: &io::Error, what: impl fmt::Display) -> io::Error {
    let text = format!("{what}: {err}");
    match errno(err) {
        Some(errno) => io::Error::new(err.kind(), Explained { errno, text }),
        None => io::Error::new(err.kind(), text),
    }
}

/// The error number of `err`, or of the error it explains ([`context`]).
pub(crate) fn errno(err: &io::Error) -> Option<i32> {
    err.raw_os_error().or_else(|| {
        err.get_ref()
            .and_then(|inner| inner.downcast_ref::<Explained>())
            .map(|explained| explained.errno)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_keeps_the_number_through_every_level() {
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        let once = context(&emfile, "reading /home");
        let twice = context(&once, "the rules could not be made");
        assert_eq!(errno(&twice), Some(libc::EMFILE));
        assert!(
            twice
                .to_string()
                .starts_with("the rules could not be made: reading /home: "),
            "{twice}"
        );
        assert_eq!(errno(&context(&io::Error::other("x"), "y")), None);
    }
}
