//! Commands that run other commands or code: wrappers (`env`, `timeout`, `sudo`, `find -exec`,
//! …), shells given code (`bash -c`, `eval`, `trap`), and builtins whose effect cannot be known
//! (`hash -p`). Each wrapper's options are parsed from its own table; an option that is not in
//! it makes the wrapper unanalysable, because it might take the next word as its value.

use crate::segments::{StdinSource, Word};

/// What runs behind one command.
#[derive(Debug)]
pub(crate) enum Inner {
    /// A command with these words (a dynamic word stands for what is filled in at run time).
    Command(Vec<Word>),
    /// Shell code to parse in turn.
    Code(String),
    /// Code that may run, read for deny and ask rules only (a git alias, a pager setting).
    Probe(String),
    /// An arithmetic expression bash evaluates (`let`).
    Arithmetic(String),
    /// The command runs something the engine cannot know.
    Unanalysable(String),
}

#[derive(Debug, Default)]
pub(crate) struct Analysis {
    pub inner: Vec<Inner>,
    /// Variables a wrapper sets for the inner command (`env X=1`, `sudo X=1`), or a builtin
    /// sets for later commands (`export X=1`).
    pub assigns: Vec<(String, Option<String>)>,
    /// Files the command writes (`tee F`, `dd of=F`, `time -o F`); none for a dynamic one.
    pub writes: Vec<Option<String>>,
    /// Files the command changes as its purpose (`cp`, `mv`, `install`, `ln`): they meet deny
    /// and ask `Write` rules, while the command's own `Bash` rule allows them.
    /// `true` for a directory whose contents change too (a recursive copy, a move).
    pub changes: Vec<(Option<String>, bool)>,
    pub unanalysable: Option<String>,
    /// The wrapper changes who runs its command or what runs (`sudo`, `chroot`) or acts itself
    /// (`find -delete`): its own form needs an allow rule too.
    pub own_check: bool,
}

/// How a wrapper's options read.
struct Options {
    /// Options taking a value: short letters and long names (without dashes).
    with_value: &'static [&'static str],
    /// Options without one.
    flags: &'static [&'static str],
    /// Words before the command that are not options (`timeout`'s duration).
    positional: usize,
    /// `NAME=VALUE` words before the command set its environment.
    assignments: bool,
    /// `-<digits>` is an option (`nice -5`).
    numeric: bool,
}

const NONE: Options = Options {
    with_value: &[],
    flags: &[],
    positional: 0,
    assignments: false,
    numeric: false,
};

fn options_of(name: &str) -> Option<Options> {
    Some(match name {
        "env" => Options {
            with_value: &["u", "unset", "C", "chdir", "S", "split-string"],
            flags: &[
                "i",
                "0",
                "v",
                "ignore-environment",
                "null",
                "debug",
                "default-signal",
                "ignore-signal",
                "block-signal",
                "list-signal-handling",
            ],
            assignments: true,
            ..NONE
        },
        "timeout" => Options {
            with_value: &["s", "signal", "k", "kill-after"],
            flags: &["preserve-status", "foreground", "v", "verbose"],
            positional: 1,
            ..NONE
        },
        "nice" => Options {
            with_value: &["n", "adjustment"],
            numeric: true,
            ..NONE
        },
        "nohup" | "builtin" => NONE,
        "stdbuf" => Options {
            with_value: &["i", "o", "e", "input", "output", "error"],
            ..NONE
        },
        "setsid" => Options {
            flags: &["c", "f", "w", "ctty", "fork", "wait"],
            ..NONE
        },
        "command" => Options {
            flags: &["p", "v", "V"],
            ..NONE
        },
        "exec" => Options {
            with_value: &["a"],
            flags: &["c", "l"],
            ..NONE
        },
        "sudo" => Options {
            with_value: &[
                "u",
                "user",
                "g",
                "group",
                "C",
                "close-from",
                "D",
                "chdir",
                "h",
                "host",
                "p",
                "prompt",
                "r",
                "role",
                "t",
                "type",
                "T",
                "command-timeout",
                "U",
                "other-user",
            ],
            flags: &[
                "A",
                "askpass",
                "b",
                "background",
                "E",
                "preserve-env",
                "H",
                "set-home",
                "K",
                "remove-timestamp",
                "k",
                "reset-timestamp",
                "n",
                "non-interactive",
                "P",
                "preserve-groups",
                "S",
                "stdin",
                "s",
                "shell",
                "i",
                "login",
                "e",
                "edit",
                "l",
                "list",
                "v",
                "validate",
                "V",
                "version",
                "B",
                "bell",
                "N",
                "no-update",
            ],
            assignments: true,
            ..NONE
        },
        "doas" => Options {
            with_value: &["u", "C"],
            flags: &["n", "s", "L"],
            ..NONE
        },
        "time" => Options {
            with_value: &["f", "format", "o", "output"],
            flags: &[
                "a",
                "append",
                "p",
                "portability",
                "v",
                "verbose",
                "q",
                "quiet",
            ],
            ..NONE
        },
        "watch" => Options {
            with_value: &["n", "interval", "q", "equexit", "s", "shotsdir"],
            flags: &[
                "d",
                "differences",
                "t",
                "no-title",
                "b",
                "beep",
                "e",
                "errexit",
                "g",
                "chgexit",
                "c",
                "color",
                "C",
                "no-color",
                "x",
                "exec",
                "p",
                "precise",
                "w",
                "no-wrap",
                "r",
                "no-rerun",
            ],
            ..NONE
        },
        "flock" => Options {
            with_value: &[
                "w",
                "wait",
                "timeout",
                "E",
                "conflict-exit-code",
                "c",
                "command",
            ],
            flags: &[
                "s",
                "shared",
                "x",
                "e",
                "exclusive",
                "u",
                "unlock",
                "n",
                "nb",
                "nonblock",
                "o",
                "close",
                "F",
                "no-fork",
                "verbose",
            ],
            positional: 1,
            ..NONE
        },
        "ionice" => Options {
            with_value: &[
                "c",
                "class",
                "n",
                "classdata",
                "p",
                "pid",
                "P",
                "pgid",
                "u",
                "uid",
            ],
            flags: &["t", "ignore"],
            ..NONE
        },
        "taskset" => Options {
            flags: &["a", "all-tasks", "c", "cpu-list"],
            positional: 1,
            ..NONE
        },
        "chroot" => Options {
            with_value: &["userspec", "groups"],
            flags: &["skip-chdir"],
            positional: 1,
            ..NONE
        },
        "fakeroot" => Options {
            with_value: &["l", "lib", "faked", "s", "i", "b"],
            flags: &["u", "unknown-is-real"],
            ..NONE
        },
        "unshare" => Options {
            with_value: &[
                "R",
                "root",
                "w",
                "wd",
                "S",
                "setuid",
                "G",
                "setgid",
                "propagation",
                "setgroups",
                "map-user",
                "map-group",
                "map-users",
                "map-groups",
                "monotonic",
                "boottime",
            ],
            flags: &[
                "m",
                "mount",
                "u",
                "uts",
                "i",
                "ipc",
                "n",
                "net",
                "p",
                "pid",
                "U",
                "user",
                "C",
                "cgroup",
                "T",
                "time",
                "f",
                "fork",
                "r",
                "map-root-user",
                "c",
                "map-current-user",
                "map-auto",
                "kill-child",
                "mount-proc",
                "mount-binfmt",
                "keep-caps",
            ],
            ..NONE
        },
        "nsenter" => Options {
            with_value: &["t", "target", "S", "setuid", "G", "setgid"],
            flags: &[
                "a",
                "all",
                "m",
                "mount",
                "u",
                "uts",
                "i",
                "ipc",
                "n",
                "net",
                "p",
                "pid",
                "U",
                "user",
                "C",
                "cgroup",
                "T",
                "time",
                "r",
                "root",
                "w",
                "wd",
                "F",
                "no-fork",
                "preserve-credentials",
                "keep-caps",
                "Z",
                "follow-context",
            ],
            ..NONE
        },
        "pkexec" => Options {
            with_value: &["user"],
            flags: &["disable-internal-agent", "keep-cwd"],
            ..NONE
        },
        "unbuffer" => Options {
            flags: &["p"],
            ..NONE
        },
        "strace" | "ltrace" => Options {
            with_value: &[
                "o",
                "output",
                "e",
                "p",
                "attach",
                "s",
                "string-limit",
                "u",
                "user",
                "E",
                "env",
                "a",
                "columns",
                "b",
                "detach-on",
                "I",
                "interruptible",
                "O",
                "S",
                "summary-sort-by",
                "P",
                "trace-path",
                "X",
                "const-print-style",
                "trace",
                "signal",
                "status",
                "abbrev",
                "verbose",
                "raw",
                "read",
                "write",
                "fault",
                "inject",
                "kvm",
            ],
            flags: &[
                "f",
                "follow-forks",
                "ff",
                "output-separately",
                "c",
                "summary-only",
                "C",
                "summary",
                "d",
                "debug",
                "D",
                "daemonize",
                "F",
                "h",
                "help",
                "i",
                "instruction-pointer",
                "k",
                "stack-trace",
                "q",
                "quiet",
                "r",
                "relative-timestamps",
                "t",
                "absolute-timestamps",
                "T",
                "syscall-times",
                "v",
                "no-abbrev",
                "V",
                "version",
                "w",
                "summary-wall-clock",
                "x",
                "strings-in-hex",
                "y",
                "decode-fds",
                "z",
                "successful-only",
                "Z",
                "failed-only",
                "n",
                "syscall-number",
                "seccomp-bpf",
            ],
            ..NONE
        },
        "chrt" => Options {
            with_value: &[
                "T",
                "sched-runtime",
                "P",
                "sched-period",
                "D",
                "sched-deadline",
            ],
            flags: &[
                "a",
                "all-tasks",
                "b",
                "batch",
                "d",
                "deadline",
                "f",
                "fifo",
                "i",
                "idle",
                "o",
                "other",
                "r",
                "rr",
                "R",
                "reset-on-fork",
                "v",
                "verbose",
            ],
            positional: 1,
            ..NONE
        },
        "prlimit" => Options {
            with_value: &[
                "as",
                "core",
                "cpu",
                "data",
                "fsize",
                "locks",
                "memlock",
                "msgqueue",
                "nice",
                "nofile",
                "nproc",
                "rss",
                "rtprio",
                "rttime",
                "sigpending",
                "stack",
                "o",
                "output",
            ],
            flags: &["noheadings", "raw", "verbose"],
            ..NONE
        },
        "setpriv" => Options {
            with_value: &[
                "inh-caps",
                "ambient-caps",
                "bounding-set",
                "ruid",
                "euid",
                "rgid",
                "egid",
                "reuid",
                "regid",
                "groups",
                "securebits",
                "pdeathsig",
                "selinux-label",
                "apparmor-profile",
                "landlock-access",
                "landlock-rule",
            ],
            flags: &[
                "d",
                "dump",
                "nnp",
                "no-new-privs",
                "clear-groups",
                "keep-groups",
                "init-groups",
                "reset-env",
            ],
            ..NONE
        },
        "xargs" => Options {
            with_value: &[
                "a",
                "arg-file",
                "d",
                "delimiter",
                "E",
                "eof",
                "I",
                "replace",
                "L",
                "max-lines",
                "n",
                "max-args",
                "P",
                "max-procs",
                "s",
                "max-chars",
                "process-slot-var",
            ],
            flags: &[
                "0",
                "null",
                "r",
                "no-run-if-empty",
                "t",
                "verbose",
                "p",
                "interactive",
                "x",
                "exit",
                "o",
                "open-tty",
                "show-limits",
            ],
            ..NONE
        },
        _ => return None,
    })
}

/// Shells, and the options they take.
const SHELLS: &[&str] = &[
    "bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "rbash", "yash", "ksh93", "posh", "oksh",
    "lksh", "loksh", "hush", "bosh",
];
/// Shells of other languages: what they are given to run cannot be analysed as bash.
const OTHER_SHELLS: &[&str] = &[
    "fish",
    "csh",
    "tcsh",
    "nu",
    "elvish",
    "xonsh",
    "pwsh",
    "powershell",
    "rc",
    "es",
    "ion",
];
/// Interpreters that read their program from standard input when given none.
const INTERPRETERS: &[&str] = &[
    "python", "python2", "python3", "perl", "ruby", "node", "nodejs", "php", "lua", "Rscript",
    "irb", "bun", "deno",
];

/// The parsed options of a wrapper: where its command starts, and what the options said.
struct Parsed<'a> {
    /// Index of the first word of the inner command, if one follows.
    command: Option<usize>,
    /// Options seen, with their values (`("c", Some(code))`).
    seen: Vec<(&'a str, Option<&'a Word>)>,
    assigns: Vec<(String, Option<String>)>,
    positionals: Vec<&'a Word>,
}

fn parse_options<'a>(words: &'a [Word], spec: &Options) -> Result<Parsed<'a>, String> {
    let mut parsed = Parsed {
        command: None,
        seen: Vec::new(),
        assigns: Vec::new(),
        positionals: Vec::new(),
    };
    let name = words[0].text.as_str();
    let mut i = 1;
    while i < words.len() {
        let word = &words[i];
        if word.dynamic {
            // An option or a command, only known at run time.
            return Err(format!(
                "a word of {name} expanded at run time before its command"
            ));
        }
        let text = word.text.as_str();
        if text == "--" {
            i += 1;
            break;
        }
        if name == "env" && text == "-" {
            // `env -` is `env -i`.
            i += 1;
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (key, value) = match long.split_once('=') {
                Some((k, _)) => (k, true),
                None => (long, false),
            };
            if spec.with_value.contains(&key) {
                if value {
                    parsed.seen.push((key, Some(word)));
                } else {
                    parsed.seen.push((key, words.get(i + 1)));
                    i += 1;
                }
            } else if spec.flags.contains(&key) {
                parsed.seen.push((key, None));
            } else {
                return Err(format!(
                    "an option of {name} the policy does not know ({text})"
                ));
            }
            i += 1;
            continue;
        }
        if text.len() > 1 && text.starts_with('-') {
            let letters = &text[1..];
            if spec.numeric && letters.chars().all(|c| c.is_ascii_digit()) {
                i += 1;
                continue;
            }
            let mut taken_next = false;
            for (at, c) in letters.char_indices() {
                let key = &letters[at..at + c.len_utf8()];
                if spec.with_value.contains(&key) {
                    if at + c.len_utf8() < letters.len() {
                        parsed.seen.push((key, Some(word)));
                    } else {
                        parsed.seen.push((key, words.get(i + 1)));
                        taken_next = true;
                    }
                    break;
                } else if spec.flags.contains(&key) {
                    parsed.seen.push((key, None));
                } else {
                    return Err(format!(
                        "an option of {name} the policy does not know ({text})"
                    ));
                }
            }
            i += if taken_next { 2 } else { 1 };
            continue;
        }
        if spec.assignments && is_assignment(text) {
            parsed.assigns.push(split_assignment(text));
            i += 1;
            continue;
        }
        if parsed.positionals.len() < spec.positional {
            parsed.positionals.push(word);
            i += 1;
            continue;
        }
        break;
    }
    if i < words.len() {
        parsed.command = Some(i);
    }
    Ok(parsed)
}

fn is_assignment(text: &str) -> bool {
    match text.split_once('=') {
        Some((name, _)) => {
            // `BASH_FUNC_f%%` is how an exported function travels in the environment.
            let name = name
                .strip_prefix("BASH_FUNC_")
                .map_or(name, |f| f.trim_end_matches('%'));
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

fn split_assignment(text: &str) -> (String, Option<String>) {
    match text.split_once('=') {
        Some((name, value)) => (name.to_string(), Some(value.to_string())),
        None => (text.to_string(), None),
    }
}

fn has(parsed: &Parsed, keys: &[&str]) -> bool {
    parsed.seen.iter().any(|(k, _)| keys.contains(k))
}

fn value<'a>(parsed: &Parsed<'a>, keys: &[&str]) -> Option<Option<&'a Word>> {
    parsed
        .seen
        .iter()
        .find(|(k, _)| keys.contains(k))
        .map(|(_, v)| *v)
}

/// The value of an option: the whole word (`-c`'s next word), or after `=` or the letter.
fn option_text(word: &Word, key: &str) -> Option<String> {
    if word.dynamic {
        return None;
    }
    let text = &word.text;
    if let Some(rest) = text.strip_prefix("--") {
        return Some(
            rest.split_once('=')
                .map_or(text.clone(), |(_, v)| v.to_string()),
        );
    }
    if let Some(letters) = text.strip_prefix('-')
        && let Some(at) = letters.find(key)
    {
        let rest = &letters[at + key.len()..];
        if !rest.is_empty() {
            return Some(rest.to_string());
        }
    }
    Some(text.clone())
}

fn code_from(word: Option<&Word>, key: &str, what: &str) -> Inner {
    match word.and_then(|w| option_text(w, key)) {
        Some(code) => Inner::Code(code),
        None => Inner::Unanalysable(format!("{what} expanded at run time")),
    }
}

fn joined(words: &[Word]) -> Option<String> {
    if words.iter().any(|w| w.dynamic) {
        return None;
    }
    Some(
        words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// What `words` (a simple command, name first) runs in turn.
pub(crate) fn analyse(words: &[Word], stdin: Option<&StdinSource>) -> Analysis {
    let mut out = Analysis::default();
    let Some(first) = words.first() else {
        return out;
    };
    let name = first.text.rsplit('/').next().unwrap_or(&first.text);
    // Bash evaluates an array subscript as arithmetic, running a `$(…)` written in it: these
    // builtins take names with subscripts (`test -v 'a[$(…)]'`, `printf -v 'a[…]'`).
    if matches!(
        name,
        "test"
            | "["
            | "printf"
            | "read"
            | "declare"
            | "typeset"
            | "local"
            | "export"
            | "readonly"
            | "unset"
            | "mapfile"
            | "readarray"
            | "getopts"
            | "let"
    ) && words[1..]
        .iter()
        .any(|w| w.text.contains('[') && (w.text.contains("$(") || w.text.contains('`')))
    {
        out.unanalysable =
            Some("a subscript holding a command substitution, which bash runs".into());
        // The substitution's command is checked too (deny rules name it).
        for w in &words[1..] {
            if w.text.contains('[') {
                out.inner.push(Inner::Arithmetic(w.text.clone()));
            }
        }
    }
    if SHELLS.contains(&name) && words.iter().any(|w| w.text == "expand_aliases") {
        out.unanalysable = Some("expand_aliases, which makes names run their aliases".into());
        return out;
    }
    if let Some(spec) = options_of(name) {
        wrapper(name, words, &spec, &mut out);
        // Who runs the command, or what a name runs, changes: the wrapper needs an allow too.
        out.own_check |= matches!(
            name,
            "sudo" | "doas" | "chroot" | "setpriv" | "pkexec" | "unshare" | "nsenter"
        );
        return out;
    }
    if SHELLS.contains(&name) {
        shell(words, stdin, &mut out);
        return out;
    }
    // Given no arguments, such a shell runs what it reads: a pipe, a file, the terminal.
    if OTHER_SHELLS.contains(&name) {
        out.unanalysable = Some(format!(
            "code for {name}, a shell whose language the policy does not parse"
        ));
        return out;
    }
    match name {
        "busybox" | "toybox" if words.len() > 1 => {
            out.inner.push(Inner::Command(words[1..].to_vec()))
        }
        "eval" => out.inner.push(
            match joined(&words[1..])
                .map(|c| c.strip_prefix("-- ").map(str::to_string).unwrap_or(c))
            {
                Some(code) => Inner::Code(code),
                None => Inner::Unanalysable("eval of code expanded at run time".to_string()),
            },
        ),
        "trap" => trap(words, &mut out),
        "shopt"
            if words
                .iter()
                .any(|w| w.dynamic || w.text == "expand_aliases") =>
        {
            out.unanalysable =
                Some("shopt expand_aliases, which makes names run their aliases".into())
        }
        "source" | "." => match words.get(1) {
            None => {}
            Some(file) if file.dynamic => {
                out.unanalysable = Some(format!("{name} of a file named at run time"))
            }
            Some(file) if stream_fd(&file.text).is_some() => match (stream_fd(&file.text), stdin) {
                (Some(0), Some(StdinSource::Code(code))) => {
                    out.inner.push(Inner::Code(code.clone()))
                }
                _ => out.unanalysable = Some(format!("{name} reading its program from a stream")),
            },
            // A script file: it runs what it holds (a known limit).
            Some(_) => {}
        },
        "let" => {
            for w in &words[1..] {
                if w.dynamic {
                    out.unanalysable = Some("let of an expression expanded at run time".into());
                } else {
                    out.inner.push(Inner::Arithmetic(w.text.clone()));
                }
            }
        }
        "git" => git_config_code(words, &mut out),
        "read" | "mapfile" | "readarray" | "getopts" | "printf" => {
            // Every name among their words may be assigned (`read -r PATH`, `printf -v PATH`).
            for w in &words[1..] {
                if !w.dynamic && is_name(&w.text) {
                    out.assigns.push((w.text.clone(), None));
                }
            }
            if matches!(name, "mapfile" | "readarray")
                && words.iter().any(|w| w.text.starts_with("-C") || w.dynamic)
            {
                out.unanalysable = Some(format!("{name} -C, which runs a callback"));
            }
        }
        "alias" => {
            for w in &words[1..] {
                match (w.dynamic, w.text.split_once('=')) {
                    (true, _) => out.inner.push(Inner::Unanalysable(
                        "an alias expanded at run time".to_string(),
                    )),
                    (false, Some((_, code))) => out.inner.push(Inner::Code(code.to_string())),
                    _ => {}
                }
            }
        }
        "su" | "runuser" => {
            let code = words
                .iter()
                .position(|w| matches!(w.text.as_str(), "-c" | "--command"))
                .map(|i| words.get(i + 1));
            match code {
                Some(word) => out.inner.push(code_from(word, "c", "su's code")),
                None => out.unanalysable = Some(format!("{name} starting a shell")),
            }
        }
        "script" => {
            let flag = |w: &Word| {
                w.text == "--command"
                    || w.text.starts_with('-') && !w.text.starts_with("--") && w.text.ends_with('c')
            };
            if let Some(i) = words.iter().position(flag) {
                out.inner
                    .push(code_from(words.get(i + 1), "c", "script's code"));
            } else if let Some(w) = words.iter().find(|w| w.text.starts_with("--command=")) {
                out.inner
                    .push(code_from(Some(w), "command", "script's code"));
            }
        }
        "find" => {
            find(words, &mut out);
            // Its own actions (`-delete`, `-fprint`) are its own: checked as a command too.
            out.own_check = true;
        }
        "tee" => {
            for w in words[1..]
                .iter()
                .filter(|w| w.dynamic || !w.text.starts_with('-'))
            {
                out.writes.push((!w.dynamic).then(|| w.text.clone()));
            }
        }
        "cp" | "mv" | "install" | "ln" => copy_targets(name, words, &mut out),
        "dd" => {
            for w in &words[1..] {
                if w.dynamic {
                    out.writes.push(None);
                } else if let Some(target) = w.text.strip_prefix("of=") {
                    out.writes.push(Some(target.to_string()));
                }
            }
        }
        "export" | "declare" | "typeset" | "local" | "readonly" => {
            for w in &words[1..] {
                if is_assignment(&w.text) {
                    let (var, value) = split_assignment(&w.text);
                    // A nameref (`declare -n p=PATH`) assigns what it names.
                    if let Some(target) = value.as_deref().filter(|v| is_name(v)) {
                        out.assigns.push((target.to_string(), None));
                    }
                    out.assigns.push((var, value));
                } else if w.dynamic {
                    out.unanalysable = Some(format!("{name} of a name expanded at run time"));
                } else if is_name(&w.text) {
                    out.assigns.push((w.text.clone(), None));
                }
            }
        }
        "hash" if words.iter().any(|w| w.text.starts_with("-p") || w.dynamic) => {
            out.unanalysable = Some("hash -p, which makes a name run another program".to_string())
        }
        "enable" if words.iter().any(|w| w.text.starts_with("-f") || w.dynamic) => {
            out.unanalysable = Some("enable -f, which loads a builtin from a library".to_string())
        }

        "complete" | "compgen" if words.iter().any(|w| w.text.starts_with("-C")) => {
            out.unanalysable = Some(format!("{name} -C, which runs a command"))
        }
        "bind" if words.iter().any(|w| w.text.starts_with("-x")) => {
            out.unanalysable = Some("bind -x, which runs a command".to_string())
        }
        _ if INTERPRETERS.contains(&name) || is_versioned_python(name) => {
            let reads_stdin = words.len() == 1 || words[1..].iter().any(|w| w.text == "-");
            if reads_stdin && !matches!(stdin, Some(StdinSource::File)) {
                out.unanalysable = Some(format!("{name} reading its program from standard input"));
            }
        }
        _ => {}
    }
    out
}

fn is_versioned_python(name: &str) -> bool {
    name.strip_prefix("python")
        .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

fn wrapper(name: &str, words: &[Word], spec: &Options, out: &mut Analysis) {
    let parsed = match parse_options(words, spec) {
        Ok(parsed) => parsed,
        Err(problem) => {
            out.unanalysable = Some(problem);
            return;
        }
    };
    out.assigns.extend(parsed.assigns.iter().cloned());
    let rest = parsed.command.map(|i| &words[i..]);
    match name {
        "env" => {
            if let Some(word) = value(&parsed, &["S", "split-string"]) {
                out.inner.push(code_from(word, "S", "env -S's string"));
                return;
            }
        }
        "command" if has(&parsed, &["v", "V"]) => return,
        "time" => {
            if let Some(word) = value(&parsed, &["o", "output"]) {
                out.writes.push(word.and_then(|w| option_text(w, "o")));
            }
        }
        "watch" if !has(&parsed, &["x", "exec"]) => {
            if let Some(rest) = rest {
                out.inner.push(match joined(rest) {
                    Some(code) => Inner::Code(code),
                    None => Inner::Unanalysable("watch's command expanded at run time".to_string()),
                });
            }
            return;
        }
        "flock" => {
            if let Some(word) = value(&parsed, &["c", "command"]) {
                out.inner.push(code_from(word, "c", "flock's code"));
                return;
            }
        }
        "sudo" => {
            if has(
                &parsed,
                &[
                    "e", "edit", "l", "list", "v", "validate", "V", "version", "K", "k",
                ],
            ) {
                return;
            }
            if has(&parsed, &["s", "shell", "i", "login"]) {
                match rest {
                    Some(rest) => out.inner.push(match joined(rest) {
                        Some(code) => Inner::Code(code),
                        None => {
                            Inner::Unanalysable("sudo's shell command expanded at run time".into())
                        }
                    }),
                    None => out.unanalysable = Some("sudo starting a shell".to_string()),
                }
                return;
            }
        }
        // strace writes its trace to `-o FILE` and sets the command's environment with `-E`.
        "strace" | "ltrace" => {
            for (key, word) in &parsed.seen {
                match *key {
                    "o" | "output" => out.writes.push(word.and_then(|w| option_text(w, key))),
                    "E" | "env" => {
                        let text = word.and_then(|w| option_text(w, key));
                        let (name, value) = match text {
                            Some(t) => split_assignment(&t),
                            None => (String::new(), None),
                        };
                        // A name known only at run time may be any: count it as PATH.
                        let name = if name.is_empty() {
                            "PATH".to_string()
                        } else {
                            name
                        };
                        out.assigns.push((name, value));
                    }
                    _ => {}
                }
            }
        }
        // fakeroot runs the daemon and preloads the library it is named, and saves its state
        // to `-s FILE`.
        "fakeroot" => {
            if has(&parsed, &["l", "lib", "faked"]) {
                out.unanalysable =
                    Some("fakeroot running a daemon or loading a library it is named".into());
                return;
            }
            if let Some(word) = value(&parsed, &["s"]) {
                out.writes.push(word.and_then(|w| option_text(w, "s")));
            }
        }
        "doas" if has(&parsed, &["s"]) => {
            out.unanalysable = Some("doas starting a shell".to_string());
            return;
        }
        "taskset" if rest.is_none() => return,
        "chroot" if rest.is_none() => {
            out.unanalysable = Some("chroot starting a shell".to_string());
            return;
        }
        "xargs" => {
            let replace = value(&parsed, &["I", "replace"])
                .flatten()
                .and_then(|w| option_text(w, "I"));
            let mut inner: Vec<Word> = match rest {
                Some(rest) => rest.to_vec(),
                None => vec![Word {
                    text: "echo".to_string(),
                    dynamic: false,
                }],
            };
            match replace {
                Some(r) => {
                    for w in inner.iter_mut().skip(1) {
                        if w.text.contains(&r) {
                            w.dynamic = true;
                        }
                    }
                }
                None => inner.push(Word {
                    text: String::new(),
                    dynamic: true,
                }),
            }
            out.inner.push(Inner::Command(inner));
            return;
        }
        _ => {}
    }
    if let Some(rest) = rest {
        out.inner.push(Inner::Command(rest.to_vec()));
    }
}

fn shell(words: &[Word], stdin: Option<&StdinSource>, out: &mut Analysis) {
    let mut code_flag = false;
    let mut i = 1;
    while i < words.len() {
        let w = &words[i];
        if w.dynamic {
            out.unanalysable = Some(format!("a {} option expanded at run time", words[0].text));
            return;
        }
        let t = w.text.as_str();
        match t {
            "--" => {
                i += 1;
                break;
            }
            "--rcfile" | "--init-file" | "-o" | "+o" | "-O" | "+O" => i += 2,
            _ if t.starts_with("--") => i += 1,
            _ if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 => {
                let letters = &t[1..];
                if letters.contains('c') && t.starts_with('-') {
                    code_flag = true;
                }
                if letters.contains('s') && t.starts_with('-') {
                    out.unanalysable = Some(format!(
                        "{} reading its program from standard input",
                        words[0].text
                    ));
                    return;
                }
                // `-o`/`-O` at the end of a cluster take the next word.
                i += if letters.ends_with(['o', 'O']) { 2 } else { 1 };
            }
            _ => break,
        }
    }
    if code_flag {
        out.inner.push(match words.get(i) {
            Some(w) if !w.dynamic => Inner::Code(w.text.clone()),
            _ => Inner::Unanalysable(format!("{}'s -c code expanded at run time", words[0].text)),
        });
        return;
    }
    if let Some(script) = words.get(i) {
        if script.dynamic {
            out.unanalysable = Some(format!("{} of a script named at run time", words[0].text));
        } else if let Some(fd) = stream_fd(&script.text) {
            // `bash -`, `bash /dev/stdin`, `bash /dev/fd/3`: the program comes from a stream.
            match (fd, stdin) {
                (0, Some(StdinSource::Code(code))) => out.inner.push(Inner::Code(code.clone())),
                _ => {
                    out.unanalysable = Some(format!(
                        "{} reading its program from a stream",
                        words[0].text
                    ))
                }
            }
        }
        // Otherwise a script file: it runs what it holds (a known limit).
        return;
    }
    match stdin {
        Some(StdinSource::Code(code)) => out.inner.push(Inner::Code(code.clone())),
        Some(StdinSource::File) => {}
        Some(StdinSource::Dynamic) | None => {
            out.unanalysable = Some(format!(
                "{} reading its program from standard input",
                words[0].text
            ))
        }
    }
}

fn trap(words: &[Word], out: &mut Analysis) {
    let Some(first) = words.get(1) else { return };
    if first.dynamic {
        out.inner.push(Inner::Unanalysable(
            "a trap's code expanded at run time".to_string(),
        ));
        return;
    }
    let (first, at) = match first.text.as_str() {
        "--" => match words.get(2) {
            Some(w) => (w, 2),
            None => return,
        },
        _ => (first, 1),
    };
    if first.dynamic {
        out.inner.push(Inner::Unanalysable(
            "a trap's code expanded at run time".to_string(),
        ));
        return;
    }
    let t = first.text.as_str();
    if matches!(t, "-p" | "-l" | "-") || (words.len() == at + 1 && !t.contains(' ')) {
        return;
    }
    out.inner.push(Inner::Code(t.to_string()));
}

fn find(words: &[Word], out: &mut Analysis) {
    let mut i = 1;
    while i < words.len() {
        let w = &words[i];
        if !w.dynamic && matches!(w.text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
            let start = i + 1;
            let mut end = start;
            // Up to a literal `;` or `+` (one from an expansion ends nothing).
            while end < words.len()
                && (words[end].dynamic || !matches!(words[end].text.as_str(), ";" | "+"))
            {
                end += 1;
            }
            let mut inner: Vec<Word> = words[start..end.min(words.len())].to_vec();
            for w in &mut inner {
                if w.text.contains("{}") {
                    w.dynamic = true;
                }
            }
            if inner.is_empty() {
                out.unanalysable = Some("find -exec without a command".to_string());
            } else {
                out.inner.push(Inner::Command(inner));
            }
            i = end + 1;
            continue;
        }
        if !w.dynamic
            && let Some(file) = ["-fprint", "-fprint0", "-fprintf", "-fls"]
                .contains(&w.text.as_str())
                .then(|| words.get(i + 1))
                .flatten()
        {
            out.writes.push((!file.dynamic).then(|| file.text.clone()));
        }
        i += 1;
    }
}

/// Is `word` (of the command `name`) a flag that makes it run code or programs it names, or
/// change files it would not otherwise? An allow rule's `*` never covers one.
pub(crate) fn is_code_flag(name: &str, word: &str) -> bool {
    let key = word.split_once('=').map_or(word, |(k, _)| k);
    let name = name.rsplit('/').next().unwrap_or(name);
    // GNU tools take any unambiguous start of a long option (`--to-comm` for `--to-command`):
    // a start of a code-running one is one (an ambiguous start the tool refuses anyway).
    if let Some(start) = key.strip_prefix("--").filter(|s| !s.is_empty())
        && long_code_flags(name)
            .iter()
            .any(|flag| flag.starts_with(start))
    {
        return true;
    }
    match name {
        "git" => {
            matches!(
                key,
                "-c" | "--config-env"
                    | "--exec-path"
                    | "--upload-pack"
                    | "--receive-pack"
                    | "--ext-diff"
                    | "--open-files-in-pager"
                    | "-O"
                    | "--exec"
                    | "-x"
                    | "--extcmd"
                    | "foreach"
                    | "--output"
                    | "--textconv"
                    | "--template"
            ) || word.starts_with("-c") && word.len() > 2
                || word.starts_with("-O") && word.len() > 2
        }
        // `-exec` and its kin run a command checked as a segment of its own.
        "find" => matches!(
            key,
            "-delete" | "-fprint" | "-fprint0" | "-fprintf" | "-fls"
        ),
        "awk" | "gawk" | "mawk" | "nawk" | "busybox" => {
            key == "-f"
                || word.contains("system")
                || word.contains('|')
                || word.contains('>')
                || word.contains("getline")
        }
        "perl" => {
            word.starts_with("-e") || word.starts_with("-E") || is_cluster_with(word, &['e', 'E'])
        }
        "ruby" | "lua" => word.starts_with("-e"),
        "node" | "nodejs" | "deno" | "bun" => {
            matches!(
                key,
                "-e" | "--eval" | "-p" | "--print" | "eval" | "-r" | "--require" | "--import"
            )
        }
        "php" => word.starts_with("-r"),
        "tar" => matches!(
            key,
            "--to-command"
                | "--checkpoint-action"
                | "-I"
                | "--use-compress-program"
                | "--rsh-command"
                | "-F"
                | "--info-script"
                | "--new-volume-script"
        ),
        "rsync" => matches!(key, "-e" | "--rsh" | "--rsync-path"),
        "sed" | "gsed" => {
            matches!(key, "-f" | "--file" | "-i" | "--in-place")
                || is_cluster_with(word, &['i', 'f'])
                || word.starts_with("-i")
                || sed_script_runs_or_writes(sed_script_of(word))
        }
        "ssh" | "scp" | "sftp" => {
            let lower = word.to_ascii_lowercase();
            lower.contains("proxycommand") || lower.contains("localcommand") || key == "-F"
        }
        "vim" | "vi" | "nvim" | "ex" | "view" => {
            matches!(key, "-c" | "--cmd" | "-S") || word.starts_with('+')
        }
        "make" | "gmake" => matches!(key, "-f" | "--file" | "--eval" | "-E"),
        _ if name.starts_with("python") => word.starts_with("-c") || is_cluster_with(word, &['c']),
        _ => false,
    }
}

/// The long options of `cp`, `mv`, `install` and `ln` that take a value in the next word (or
/// after `=`), and those that take none (or only after `=`).
fn copy_options(name: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match name {
        "cp" => (
            &["target-directory", "suffix", "sparse", "no-preserve"],
            &[
                "archive",
                "attributes-only",
                "backup",
                "copy-contents",
                "debug",
                "dereference",
                "force",
                "interactive",
                "keep-directory-symlink",
                "link",
                "no-clobber",
                "no-dereference",
                "no-target-directory",
                "one-file-system",
                "parents",
                "preserve",
                "recursive",
                "reflink",
                "remove-destination",
                "strip-trailing-slashes",
                "symbolic-link",
                "update",
                "verbose",
                "context",
                "help",
                "version",
            ],
        ),
        "mv" => (
            &["target-directory", "suffix"],
            &[
                "backup",
                "context",
                "debug",
                "exchange",
                "force",
                "interactive",
                "no-clobber",
                "no-copy",
                "no-target-directory",
                "strip-trailing-slashes",
                "update",
                "verbose",
                "help",
                "version",
            ],
        ),
        "install" => (
            &[
                "target-directory",
                "suffix",
                "mode",
                "owner",
                "group",
                "strip-program",
            ],
            &[
                "backup",
                "compare",
                "context",
                "debug",
                "directory",
                "no-target-directory",
                "preserve-context",
                "preserve-timestamps",
                "strip",
                "verbose",
                "help",
                "version",
            ],
        ),
        _ => (
            &["target-directory", "suffix"],
            &[
                "backup",
                "directory",
                "force",
                "interactive",
                "logical",
                "no-dereference",
                "no-target-directory",
                "physical",
                "relative",
                "symbolic",
                "verbose",
                "help",
                "version",
            ],
        ),
    }
}

/// The long option `start` names (a whole name, or the one name it begins), if exactly one.
fn long_option<'a>(start: &str, names: &[&'a str]) -> Option<&'a str> {
    if let Some(exact) = names.iter().find(|n| **n == start) {
        return Some(exact);
    }
    let mut found = names.iter().filter(|n| n.starts_with(start));
    match (found.next(), found.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// The files `cp`, `mv`, `install` and `ln` change ([`Analysis::changes`]): the destination, and
/// the destination joined with each source's base name (for a destination that is a directory:
/// the engine cannot know which it is, so both are checked); for `mv`, the sources too (they are
/// removed); for `install -d`, each directory. A recursive copy (`-r`, `-R`, `-a`, `-T`,
/// `--parents`) and a move change whole trees: a rule for anything in them applies. A word known
/// only at run time, and an option the engine does not know, make a file named at run time.
fn copy_targets(name: &str, words: &[Word], out: &mut Analysis) {
    let (long_values, long_flags) = copy_options(name);
    let short_values: &[char] = if name == "install" {
        &['m', 'o', 'g', 'S', 't']
    } else {
        &['S', 't']
    };
    let mut positional: Vec<&Word> = Vec::new();
    let mut target_dir: Option<String> = None;
    let mut directories = false;
    let mut tree = name == "mv";
    let mut i = 1;
    let mut options_end = false;
    while i < words.len() {
        let w = &words[i];
        i += 1;
        if w.dynamic {
            out.changes.push((None, true));
            continue;
        }
        let text = w.text.as_str();
        if options_end || !text.starts_with('-') || text == "-" {
            positional.push(w);
            continue;
        }
        if text == "--" {
            options_end = true;
            continue;
        }
        let (key, attached): (String, Option<String>) = if let Some(long) = text.strip_prefix("--")
        {
            let (start, value) = match long.split_once('=') {
                Some((k, v)) => (k, Some(v.to_string())),
                None => (long, None),
            };
            let all: Vec<&str> = long_values.iter().chain(long_flags).copied().collect();
            let Some(full) = long_option(start, &all) else {
                // Unknown or ambiguous: the tool may read it otherwise than the engine would.
                out.changes.push((None, true));
                continue;
            };
            if !long_values.contains(&full) {
                directories |= full == "directory";
                tree |= matches!(
                    full,
                    "recursive" | "archive" | "no-target-directory" | "parents"
                );
                continue;
            }
            (full.to_string(), value)
        } else {
            // A short cluster: the first letter taking a value takes the rest or the next word.
            let letters = &text[1..];
            let at = letters.find(|c: char| short_values.contains(&c));
            let flags = &letters[..at.unwrap_or(letters.len())];
            directories |= flags.contains('d');
            tree |= flags.contains(['r', 'R', 'a', 'T']);
            let Some(at) = at else { continue };
            let rest = &letters[at + 1..];
            let key = match &letters[at..at + 1] {
                "t" => "target-directory",
                _ => "other",
            };
            (
                key.to_string(),
                (!rest.is_empty()).then(|| rest.to_string()),
            )
        };
        let value = match attached {
            Some(v) => Some(v),
            None => {
                i += 1;
                match words.get(i - 1) {
                    Some(v) if !v.dynamic => Some(v.text.clone()),
                    Some(_) => {
                        out.changes.push((None, true));
                        None
                    }
                    None => None,
                }
            }
        };
        if key == "target-directory" {
            match value {
                Some(v) => target_dir = Some(v),
                None => out.changes.push((None, true)),
            }
        }
    }
    let base = |w: &Word| {
        w.text
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_string()
    };
    let join = |dir: &str, file: String| format!("{}/{file}", dir.trim_end_matches('/'));
    if name == "install" && directories {
        out.changes
            .extend(positional.iter().map(|w| (Some(w.text.clone()), false)));
        return;
    }
    let (dest, sources) = match target_dir {
        Some(dir) => (Some(dir), &positional[..]),
        None => match positional.split_last() {
            Some((last, rest)) if !rest.is_empty() => (Some(last.text.clone()), rest),
            // `ln -s TARGET` links TARGET's base name here.
            Some((only, _)) if name == "ln" => {
                out.changes.push((Some(base(only)), false));
                (None, &positional[..0])
            }
            _ => (None, &positional[..0]),
        },
    };
    if let Some(dest) = dest {
        for source in sources {
            out.changes.push((Some(join(&dest, base(source))), tree));
        }
        out.changes.push((Some(dest), tree));
    }
    if name == "mv" {
        out.changes
            .extend(sources.iter().map(|w| (Some(w.text.clone()), true)));
    }
}

/// The script a word of sed may be: the value of `--expression=`, what follows `e` in a cluster
/// of short options (`-e…`, `-ne…`), else the word itself.
fn sed_script_of(word: &str) -> &str {
    if let Some((key, script)) = word.split_once('=')
        && let Some(start) = key.strip_prefix("--").filter(|s| !s.is_empty())
        && "expression".starts_with(start)
    {
        return script;
    }
    match word.strip_prefix('-') {
        Some(cluster) if !cluster.starts_with('-') => {
            cluster.find('e').map_or("", |at| &cluster[at + 1..])
        }
        _ => word,
    }
}

/// Whether `script`, read as a sed script, may hold a command that runs a shell (`e`, the `e`
/// flag of `s`) or writes a file (`w`, `W`, the `w` flag of `s`). Any word could be the script,
/// so every covered word is read this way, erring towards yes: a file name such as `web.txt`
/// reads as a `w` command and then needs a rule that names it.
fn sed_script_runs_or_writes(script: &str) -> bool {
    let c: Vec<char> = script.chars().collect();
    // The index after the next unescaped `delim` from `i` (the end when there is none); in a
    // regex, a bracket expression (`[/]`, `[]/]`, `[^]/]`, `[[:alpha:]/]`) holds no delimiter.
    let past = |mut i: usize, delim: char, regex: bool| {
        while i < c.len() {
            match c[i] {
                '\\' => i += 2,
                '[' if regex => {
                    i += 1;
                    if c.get(i) == Some(&'^') {
                        i += 1;
                    }
                    if c.get(i) == Some(&']') {
                        i += 1;
                    }
                    while i < c.len() && c[i] != ']' {
                        if c[i] == '[' && matches!(c.get(i + 1), Some(':' | '.' | '=')) {
                            let close = c[i + 1];
                            i += 2;
                            while i + 1 < c.len() && !(c[i] == close && c[i + 1] == ']') {
                                i += 1;
                            }
                            i += 1;
                        }
                        i += 1;
                    }
                    i += 1;
                }
                ch if ch == delim => return i + 1,
                _ => i += 1,
            }
        }
        c.len()
    };
    let line_end = |i: usize| {
        c[i..]
            .iter()
            .position(|&ch| ch == '\n')
            .map_or(c.len(), |p| i + p)
    };
    // A label or version: to `;` or a blank.
    let word_end = |i: usize| {
        c[i..]
            .iter()
            .position(|&ch| matches!(ch, ';' | '\n' | ' ' | '\t'))
            .map_or(c.len(), |p| i + p)
    };
    let mut i = 0;
    let mut at_command = true;
    while i < c.len() {
        let ch = c[i];
        if !at_command {
            at_command = matches!(ch, ';' | '\n' | '}');
            if ch == '#' {
                i = line_end(i);
            }
            i += 1;
            continue;
        }
        match ch {
            // Between commands, and addresses (`3`, `$`, `1,+2`, `0~4`, `/re/I`, `\%re%`).
            ' '
            | '\t'
            | '\n'
            | ';'
            | '{'
            | '}'
            | '!'
            | '0'..='9'
            | '$'
            | ','
            | '+'
            | '~'
            | 'I'
            | 'M' => i += 1,
            '/' => i = past(i + 1, '/', true),
            '\\' => i = c.get(i + 1).map_or(c.len(), |&d| past(i + 2, d, true)),
            'e' | 'w' | 'W' => return true,
            's' | 'y' => {
                let Some(&delim) = c.get(i + 1) else {
                    return false;
                };
                let regex = ch == 's';
                i = past(past(i + 2, delim, regex), delim, false);
                if regex {
                    // Flags, blanks among them.
                    while i < c.len()
                        && (c[i].is_ascii_alphanumeric() || matches!(c[i], ' ' | '\t'))
                    {
                        if matches!(c[i], 'e' | 'w') {
                            return true;
                        }
                        i += 1;
                    }
                }
                at_command = false;
            }
            // Text, its lines continued by a trailing backslash (`a\`, newline, lines).
            'a' | 'i' | 'c' => {
                i += 1;
                while i < c.len() && matches!(c[i], ' ' | '\t') {
                    i += 1;
                }
                if c.get(i) == Some(&'\\') {
                    i += 1;
                    if c.get(i) == Some(&'\n') {
                        i += 1;
                    }
                }
                loop {
                    let end = line_end(i);
                    let backslashes = c[i..end].iter().rev().take_while(|&&ch| ch == '\\').count();
                    i = end + 1;
                    if backslashes % 2 == 0 || i >= c.len() {
                        break;
                    }
                }
            }
            // File names and comments run to the end of the line.
            'r' | 'R' | '#' => i = line_end(i),
            ':' | 'b' | 't' | 'T' | 'v' => {
                i += 1;
                while i < c.len() && matches!(c[i], ' ' | '\t') {
                    i += 1;
                }
                i = word_end(i);
            }
            _ => {
                at_command = false;
                i += 1;
            }
        }
    }
    false
}

/// The long options (without `--`) that make `name` run code or change files it would not
/// otherwise: what [`is_code_flag`] also matches by their starts.
fn long_code_flags(name: &str) -> &'static [&'static str] {
    match name {
        "git" => &[
            "config-env",
            "exec-path",
            "upload-pack",
            "receive-pack",
            "ext-diff",
            "open-files-in-pager",
            "exec",
            "extcmd",
            "output",
            "textconv",
            "template",
        ],
        "node" | "nodejs" | "deno" | "bun" => &["eval", "print", "require", "import"],
        "tar" => &[
            "to-command",
            "checkpoint-action",
            "use-compress-program",
            "rsh-command",
            "info-script",
            "new-volume-script",
        ],
        "rsync" => &["rsh", "rsync-path"],
        "sed" | "gsed" => &["file", "in-place"],
        "vim" | "vi" | "nvim" | "ex" | "view" => &["cmd"],
        "make" | "gmake" => &["file", "makefile", "eval"],
        "install" => &["strip-program"],
        _ => &[],
    }
}

fn is_cluster_with(word: &str, letters: &[char]) -> bool {
    word.strip_prefix('-')
        .is_some_and(|l| !l.starts_with('-') && l.chars().any(|c| letters.contains(&c)))
}

/// Drop git's global options (between `git` and its subcommand), for deny and ask rules.
pub(crate) fn without_git_globals(words: &[String]) -> Option<Vec<String>> {
    let name = words.first()?;
    if name.rsplit('/').next() != Some("git") {
        return None;
    }
    let mut out = vec![name.clone()];
    let mut i = 1;
    let mut dropped = false;
    while i < words.len() {
        let w = words[i].as_str();
        match w {
            "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" | "--config-env"
            | "--super-prefix" | "--attr-source" => {
                i += 2;
                dropped = true;
            }
            _ if w.starts_with("--") && w.contains('=') => {
                i += 1;
                dropped = true;
            }
            "--no-pager"
            | "-P"
            | "-p"
            | "--paginate"
            | "--bare"
            | "--no-replace-objects"
            | "--literal-pathspecs"
            | "--glob-pathspecs"
            | "--noglob-pathspecs"
            | "--icase-pathspecs"
            | "--no-optional-locks"
            | "--no-advice"
            | "--exec-path" => {
                i += 1;
                dropped = true;
            }
            _ => break,
        }
    }
    if !dropped {
        return None;
    }
    out.extend(words[i.min(words.len())..].iter().cloned());
    Some(out)
}

fn is_name(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `git -c KEY=VALUE` settings whose value is a command git runs: read for deny and ask rules.
fn git_config_code(words: &[Word], out: &mut Analysis) {
    let mut i = 1;
    while i < words.len() {
        let w = &words[i];
        let setting = match w.text.as_str() {
            "-c" => words.get(i + 1).map(|v| v.text.as_str()),
            t => t.strip_prefix("-c").filter(|rest| rest.contains('=')),
        };
        if let Some((key, value)) = setting.and_then(|s| s.split_once('=')) {
            let key = key.to_ascii_lowercase();
            let code = if key.starts_with("alias.") {
                value.strip_prefix('!')
            } else if matches!(
                key.as_str(),
                "core.pager"
                    | "core.sshcommand"
                    | "core.editor"
                    | "core.fsmonitor"
                    | "sequence.editor"
                    | "diff.external"
                    | "gpg.program"
                    | "core.askpass"
            ) || key.starts_with("pager.")
                || key.ends_with(".textconv")
                || key.ends_with(".command")
                || key.ends_with(".cmd")
            {
                Some(value)
            } else if key.starts_with("credential.") {
                value.strip_prefix('!')
            } else {
                None
            };
            if let Some(code) = code {
                out.inner.push(Inner::Probe(code.to_string()));
            }
        }
        i += 1;
    }
}

/// The descriptor a path reads a stream from (`-` and `/dev/stdin` are 0, `/dev/fd/3` is 3).
fn stream_fd(path: &str) -> Option<u32> {
    match path {
        "-" | "/dev/stdin" => Some(0),
        _ => path
            .strip_prefix("/dev/fd/")
            .or_else(|| path.strip_prefix("/proc/self/fd/"))
            .and_then(|n| n.parse().ok()),
    }
}
