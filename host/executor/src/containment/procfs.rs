//! What `/proc` says about processes: who they are, their parents, groups and sessions.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Read as _;
use std::sync::OnceLock;

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcInfo {
    pub(crate) pid: i32,
    pub(crate) ppid: i32,
    pub(crate) pgid: i32,
    pub(crate) sid: i32,
    pub(crate) alive: bool,
}

/// All processes visible in `/proc`.
pub(crate) fn snapshot() -> Vec<ProcInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut procs = Vec::new();
    let mut path = String::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        path.clear();
        path.push_str("/proc/");
        path.push_str(name.to_str().unwrap_or_default());
        path.push_str("/stat");
        if let Some(info) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|stat| parse_stat(pid, &stat))
        {
            procs.push(info);
        }
    }
    procs
}

/// The descendants of `root` (zombies included, marked dead), found by walking the `children`
/// lists of their threads rather than all of `/proc`; from a full [`snapshot`] where the kernel
/// has no such lists.
pub(crate) fn subtree(root: i32) -> Vec<ProcInfo> {
    static CHILDREN_LISTS: OnceLock<bool> = OnceLock::new();
    if !*CHILDREN_LISTS.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists())
    {
        let all = snapshot();
        let found = descendants(root, &all);
        return all.into_iter().filter(|p| found.contains(&p.pid)).collect();
    }
    let mut procs = Vec::new();
    let mut queue = vec![root];
    let mut path = String::new();
    let mut text = String::new();
    while let Some(parent) = queue.pop() {
        path.clear();
        let _ = write!(path, "/proc/{parent}/task");
        let Ok(tasks) = std::fs::read_dir(&path) else {
            continue;
        };
        for task in tasks.flatten() {
            let mut children = task.path();
            children.push("children");
            text.clear();
            if std::fs::File::open(&children)
                .and_then(|mut f| f.read_to_string(&mut text))
                .is_err()
            {
                continue;
            }
            for pid in text
                .split_ascii_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                if pid == root || procs.iter().any(|p: &ProcInfo| p.pid == pid) {
                    continue;
                }
                path.clear();
                let _ = write!(path, "/proc/{pid}/stat");
                if let Some(info) = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|stat| parse_stat(pid, &stat))
                {
                    procs.push(info);
                    queue.push(pid);
                }
            }
        }
    }
    procs
}

/// Parses `pid (comm) state ppid ...`; `comm` may contain anything, so split after its last `)`.
fn parse_stat(pid: i32, stat: &str) -> Option<ProcInfo> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    let sid = fields.next()?.parse().ok()?;
    Some(ProcInfo {
        pid,
        ppid,
        pgid,
        sid,
        alive: !matches!(state, "Z" | "X" | "x"),
    })
}

/// Live descendants of `root` in `procs`.
pub(crate) fn descendants(root: i32, procs: &[ProcInfo]) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<&ProcInfo>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            if child.pid != root {
                queue.push(child.pid);
                if child.alive {
                    found.push(child.pid);
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let info = parse_stat(42, "42 (a) b (c)) S 7 42 40 0 -1").unwrap();
        assert_eq!(
            info,
            ProcInfo {
                pid: 42,
                ppid: 7,
                pgid: 42,
                sid: 40,
                alive: true
            }
        );
        assert!(!parse_stat(1, "1 (z) Z 0 1 1 1").unwrap().alive);
    }

    #[test]
    fn finds_descendants_but_not_zombies() {
        let p = |pid, ppid, alive| ProcInfo {
            pid,
            ppid,
            pgid: 1,
            sid: 1,
            alive,
        };
        let procs = [
            p(1, 0, true),
            p(10, 1, true),
            p(11, 10, true),
            p(12, 11, false),
            p(13, 12, true),
            p(20, 1, true),
        ];
        let mut found = descendants(10, &procs);
        found.sort();
        assert_eq!(found, [11, 13]);
    }
}
