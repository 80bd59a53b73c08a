//! What /proc says about a process, for tests that check that nothing survived.
//!
//! Shared by the test files through `#[path]`.

/// The state letter and the parent pid of `pid`, or `None` when it no longer exists.
pub fn state_and_ppid(pid: i32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is parenthesized and may hold spaces: the fields follow its last `)`.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether `pid` runs: a zombie (or a process being torn down) is dead for our purposes.
pub fn alive(pid: i32) -> bool {
    state_and_ppid(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'))
}
