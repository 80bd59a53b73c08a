//! The fast path (`src/fast.rs`) against the parser: for generated commands in and around the
//! subset it reads, and for every command of the attacker's corpus and mutations of them, the
//! fast path either leaves the command to the parser or gives the walk the very items (simple
//! commands, their redirects, assignments and words, with their places) that `brush-parser`'s
//! tree gives it; the segments found, and the verdicts under several policies, are the same
//! either way.
//! Words are checked the same way: the fast path's facts of a word are the parser's.
//!
//! The generator is seeded: a failure names the command, and reruns find it again.

#[path = "../../tests/policy-corpus/cases.rs"]
mod cases;

use dsh_policy::{Call, Grants, Policy, checks};

/// A small, seeded generator (SplitMix64): the test needs no crate for it and is repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Command names: plain ones, ones the rules below name, wrappers and shells whose arguments
/// are code, and keywords the fast path must leave to the parser.
const NAMES: &[&str] = &[
    "ls",
    "git",
    "rm",
    "echo",
    "cd",
    "cat",
    "grep",
    "build3",
    "deploy1",
    "tool2",
    "true",
    "sudo",
    "bash",
    "sh",
    "env",
    "xargs",
    "find",
    "tee",
    "dd",
    "cp",
    "mv",
    "python3",
    "timeout",
    "nice",
    "export",
    "eval",
    "command",
    "exec",
    "source",
    ".",
    "test",
    "./run.sh",
    "/bin/rm",
    "~/bin/x",
    "FOO=1",
    "PATH=/x",
    "GIT_DIR=.",
    "A+=b",
    "$CMD",
    "\"$(which rm)\"",
];

/// Keywords and other names the fast path must leave to the parser.
const OTHER_NAMES: &[&str] = &[
    "time",
    "if",
    "then",
    "fi",
    "for",
    "do",
    "done",
    "while",
    "case",
    "esac",
    "in",
    "function",
    "select",
    "coproc",
    "!",
    "{",
    "}",
    "[[",
    "[",
    "r\\m",
    "`which rm`",
    "${x}",
];

/// Arguments in the subset.
const ARGS: &[&str] = &[
    "-la",
    "-rf",
    "/",
    "--target",
    "x86_64",
    "--release",
    "--dangerous",
    "status",
    "push",
    "--force",
    "origin",
    "main",
    "rev-parse",
    "HEAD",
    "HEAD~1",
    "~",
    "~/x",
    "a=b",
    "of=/etc/passwd",
    "-c",
    "-i",
    "-exec",
    "x%y",
    "a:b",
    "a@b",
    "^x",
    "+x",
    ",",
    ".",
    "..",
    "./out/f",
    "/dev/null",
    "/etc/x",
    "2",
    "10",
    "-",
    "$x",
    "if",
    "fi",
    "then",
    "time",
];

/// Arguments out of it.
const OTHER_ARGS: &[&str] = &[
    "~user", "~+", "~1", "{}", "\\;", "*.rs", "a?", "[ab]", "{a,b}", "a#b", "#c", "\\x", "a\\ b",
    "${x}", "$1", "$?", "$@", "$$", "$'\\x41'", "$\"a\"", "$((1+2))", "$[1]", "`ls`", "a(", "a)",
    "<(ls)", ">(cat)", "é", "\u{202e}", "a\u{7}b", "!x", "a!",
];

/// Characters inside quotes, the troublesome ones often.
const QUOTED: &[&str] = &[
    "a", "b", " ", " ", "x y", ";", "|", "&", "&&", ">", "<", "(", ")", "$", "'", "\"", "\\", "`",
    "*", "?", "#", "~", "!", "{", "}", "[", "]", "\t", "\n", "rm -rf /", "$(", "=", "é",
];

/// What goes between commands.
const BETWEEN: &[&str] = &[
    " | ", " && ", " || ", "; ", " & ", "\n", ";", "|", "&&", "||", "&", " ;\n", " &&\n", " |\n",
    "\n\n", " ;; ", " |& ", ";&", " ( ", " ) ", "\t&&\t", " \\\n ", " # c\n",
];

/// Redirects, plain and not.
const REDIRECTS: &[&str] = &[
    "> f",
    ">f",
    "2>&1",
    "2>/dev/null",
    ">> log",
    "< in",
    "&> out",
    "&>> out",
    ">| f",
    "<> f",
    "<& 0",
    ">&2",
    "1>f",
    "10>f",
    ">&-",
    "> /dev/null",
    "> ./out/x",
    "> ~/.bashrc",
    ">&file",
    "99999999999>x",
    "<<EOF\nx\nEOF\n",
    "<<< x",
    "> >(cat)",
    "< <(ls)",
    "2 > f",
    "> $x",
    ">",
    "> \"$(date)\"",
    "> 'a b'",
];

fn quoted(rng: &mut Rng, depth: usize) -> String {
    let mut inner = String::new();
    for _ in 0..rng.below(4) {
        if depth < 3 && rng.chance(15) {
            inner.push_str(&format!("$({})", command(rng, depth + 1)));
        } else if rng.chance(85) {
            inner.push_str(rng.pick(&[
                "a",
                "b c",
                "x.y",
                " ",
                "dir with spaces",
                "warning: unused",
                ";",
                "|",
                "&",
                "(",
                ")",
                "*",
                "{",
                "}",
                "#",
                "!",
                "~",
                "=",
                "$x",
            ]));
        } else {
            inner.push_str(rng.pick(QUOTED));
        }
    }
    if rng.chance(50) {
        format!("'{}'", inner.replace('\'', ""))
    } else {
        format!("\"{}\"", inner.replace('"', ""))
    }
}

fn word(rng: &mut Rng, depth: usize) -> String {
    let mut w = String::new();
    let pieces = if rng.chance(80) { 1 } else { 1 + rng.below(3) };
    for _ in 0..pieces {
        match rng.below(10) {
            0..=4 if rng.chance(93) => w.push_str(rng.pick(ARGS)),
            0..=4 => w.push_str(rng.pick(OTHER_ARGS)),
            5 | 6 => w.push_str(&quoted(rng, depth)),
            7 if depth < 3 => w.push_str(&format!("$({})", command(rng, depth + 1))),
            8 => w.push_str(rng.pick(&["$HOME", "$x", "$FOO_1", "$_"])),
            _ => w.push_str(rng.pick(&["a", "x", "out", "file.txt", "-v", "--", "0"])),
        }
    }
    w
}

fn simple(rng: &mut Rng, depth: usize) -> String {
    let mut parts = Vec::new();
    if rng.chance(10) {
        parts.push(rng.pick(&REDIRECTS[..18]).to_string());
    }
    if rng.chance(15) {
        parts.push(
            rng.pick(&[
                "FOO=1",
                "A=\"$(ls)\"",
                "X=",
                "PAGER=less",
                "B+=c",
                "LD_PRELOAD=x",
            ])
            .to_string(),
        );
    }
    parts.push(if rng.chance(95) {
        rng.pick(NAMES).to_string()
    } else {
        rng.pick(OTHER_NAMES).to_string()
    });
    // A wrapper often runs what follows: give it a command.
    if rng.chance(20) {
        parts.push(rng.pick(&["-c", "--", "-n", "-u root", "10"]).to_string());
        if rng.chance(50) {
            parts.push(format!("'{}'", command(rng, depth + 1).replace('\'', "")));
        } else {
            parts.push(rng.pick(NAMES).to_string());
        }
    }
    for _ in 0..rng.below(5) {
        if rng.chance(15) {
            parts.push(if rng.chance(80) {
                rng.pick(&REDIRECTS[..18]).to_string()
            } else {
                rng.pick(REDIRECTS).to_string()
            });
        } else {
            parts.push(word(rng, depth));
        }
    }
    let blank = if rng.chance(5) {
        "\t"
    } else if rng.chance(10) {
        "  "
    } else {
        " "
    };
    parts.join(blank)
}

fn command(rng: &mut Rng, depth: usize) -> String {
    let mut out = simple(rng, depth);
    let more = if depth > 0 {
        rng.below(2)
    } else {
        rng.below(5)
    };
    for _ in 0..more {
        out.push_str(if rng.chance(85) {
            rng.pick(&[" | ", " && ", " || ", "; ", " & ", "\n"])
        } else {
            rng.pick(BETWEEN)
        });
        out.push_str(&simple(rng, depth));
    }
    if rng.chance(10) {
        out.push_str(rng.pick(&[";", " &", "\n", " ", ";\n", " |", " &&"]));
    }
    if rng.chance(5) {
        out.insert_str(0, rng.pick(&["\n", " ", "\t", "\n\n"]));
    }
    out
}

/// A near miss: `command` with one character inserted, removed or replaced.
fn mutate(rng: &mut Rng, command: &str) -> String {
    let chars: Vec<char> = command.chars().collect();
    let at = rng.below(chars.len() + 1);
    let c = rng.pick(&[
        ";", "|", "&", "(", ")", "'", "\"", "$", "\\", "`", "\n", " ", "\t", "#", "*", "{", "}",
        "<", ">", "!", "~", "=", "0", "a",
    ]);
    let mut out: String = chars[..at].iter().collect();
    match rng.below(3) {
        0 => out.push_str(c),
        1 if at < chars.len() => out.push_str(c),
        _ => {}
    }
    let skip = usize::from(at < chars.len() && rng.chance(66));
    out.extend(&chars[(at + skip).min(chars.len())..]);
    out
}

fn policies() -> Vec<Policy> {
    let mut bench = (String::new(), String::new(), String::new());
    for i in 0..66 {
        bench
            .0
            .push_str(&format!("\"Bash(tool{i} --dangerous *)\", "));
        bench.1.push_str(&format!("\"Bash(deploy{i} *)\", "));
        bench
            .2
            .push_str(&format!("\"Bash(build{i} --target * --release)\", "));
    }
    let texts = [
        format!(
            "[permissions]\ndefault = \"ask\"\ndeny = [{}\"Write(~/.bashrc)\"]\nask = [{}]\n\
             allow = [{}\"Bash(true)\"]\n",
            bench.0, bench.1, bench.2
        ),
        r#"[permissions]
default = "ask"
allow = ["Bash(git status)", "Bash(git log *)", "Bash(ls *)", "Bash(echo *)", "Bash(cat *)", "Bash(grep *)", "Write(./out/**)"]
ask = ["Bash(git push *)"]
deny = ["Bash(rm -rf *)", "Bash(git push --force *)", "Write(~/.bashrc)"]
"#
        .to_string(),
        r#"[permissions]
default = "allow"
deny = ["Bash(rm *)", "Bash(dd *)", "Bash(sudo *)", "Write(/etc/**)", "Write(./out/**)"]
ask = ["Bash(git *)"]
"#
        .to_string(),
    ];
    texts
        .iter()
        .map(|t| Policy::from_sources(&[("p.toml".into(), t.clone())]).unwrap())
        .collect()
}

#[derive(Default)]
struct Tally {
    fast: usize,
    parser: usize,
}

/// One command: what the fast path gives the walk is what the parser's tree gives it, and the
/// segments and verdicts are the same either way.
fn check(command: &str, policies: &[Policy], tally: &mut Tally) {
    match checks::fast_items(command) {
        Some(items) => {
            tally.fast += 1;
            let Some(parsed) = checks::parser_items(command) else {
                panic!(
                    "the fast path read {command:?}, which the parser reads otherwise or not at all"
                );
            };
            assert_eq!(
                items, parsed,
                "the fast path's items differ for {command:?}"
            );
        }
        None => tally.parser += 1,
    }
    let (fast, parser) = (
        checks::segments(command, true),
        checks::segments(command, false),
    );
    assert_eq!(fast, parser, "the segments differ for {command:?}");
    for policy in policies {
        let call = Call {
            command,
            cwd: "/work",
            home: Some("/home/u"),
        };
        assert_eq!(
            policy.evaluate(&call, &Grants::default()),
            policy.evaluate_by_parser(&call, &Grants::default()),
            "the verdicts differ for {command:?}"
        );
    }
}

#[test]
fn generated_commands_read_alike() {
    let policies = policies();
    let mut rng = Rng(0x5eed_0001);
    let mut tally = Tally::default();
    let mut near = Tally::default();
    for _ in 0..3000 {
        let command = command(&mut rng, 0);
        check(&command, &policies, &mut tally);
        let near_miss = mutate(&mut rng, &command);
        check(&near_miss, &policies, &mut near);
    }
    // The test means something only when both paths are taken often.
    assert!(
        tally.fast > 600 && tally.parser > 600,
        "{} fast, {} parser",
        tally.fast,
        tally.parser
    );
    assert!(
        near.fast > 300 && near.parser > 300,
        "near misses: {} fast, {} parser",
        near.fast,
        near.parser
    );
    eprintln!(
        "generated: {} by the fast path, {} by the parser; near misses: {} and {}",
        tally.fast, tally.parser, near.fast, near.parser
    );
}

#[test]
fn the_corpus_reads_alike() {
    let policies = policies();
    let mut rng = Rng(0x5eed_0002);
    let mut tally = Tally::default();
    for case in cases::load() {
        let command = case.command_in("/work/case");
        check(&command, &policies, &mut tally);
        for _ in 0..4 {
            check(&mutate(&mut rng, &command), &policies, &mut tally);
        }
    }
    assert!(
        tally.fast > 100,
        "{} fast, {} parser",
        tally.fast,
        tally.parser
    );
}

#[test]
fn the_benchmark_command_takes_the_fast_path() {
    let unit = "cd src && build3 --target x86_64 --release | grep -v 'warning: unused' > /dev/null; \
                echo \"$(git rev-parse HEAD)\" && ls -la \"dir with spaces\" || true\n";
    let command = unit.repeat(80);
    assert!(checks::fast_items(&command).is_some());
    check(&command, &policies(), &mut Tally::default());
}

/// Words: the fast path's facts are the parser's, or it leaves the word to the parser.
#[test]
fn generated_words_read_alike() {
    let mut rng = Rng(0x5eed_0003);
    let (mut fast, mut parser) = (0, 0);
    for i in 0..20000 {
        let raw = if i % 2 == 0 {
            word(&mut rng, 0)
        } else {
            let w = word(&mut rng, 0);
            mutate(&mut rng, &w)
        };
        match checks::fast_word_facts(&raw) {
            Some(facts) => {
                fast += 1;
                assert_eq!(
                    facts,
                    checks::word_facts(&raw),
                    "the facts differ for {raw:?}"
                );
            }
            None => parser += 1,
        }
    }
    assert!(fast > 2000 && parser > 2000, "{fast} fast, {parser} parser");
}

/// Constructs at the edge of the subset, each read alike.
#[test]
fn edge_cases_read_alike() {
    let policies = policies();
    let mut tally = Tally::default();
    for command in [
        "",
        "\n\n",
        "ls",
        "ls;",
        "ls &",
        "ls & ls",
        "ls;ls",
        "a&&b||c|d",
        "a &&\n\n b",
        "a |\n b",
        "a\n\nb\n",
        "a; \nb",
        ";",
        "a;;",
        "a | | b",
        "&& a",
        "a &&",
        "2>&1",
        "> f",
        "> f ls",
        "FOO=1",
        "FOO=1 ls",
        "FOO=\"$(rm -rf /)\" ls",
        "ls FOO=1",
        "export PATH=/x",
        "echo 2>f",
        "echo 2 >f",
        "echo a2>f",
        "echo 007>f",
        "echo 1234567890>f",
        "ls >",
        "ls > > f",
        "ls &> f",
        "ls &>> f",
        "ls 2&>f",
        "ls >&2",
        "ls >& f",
        "ls <&0",
        "ls >| f",
        "ls <> f",
        "echo \"$(git rev-parse HEAD)\"",
        "echo \"$(echo \"$(rm x)\")\"",
        "echo $(a | b && c; d & e)",
        "echo $( a  b )",
        "echo $(a\tb)",
        "echo $(a\nb)",
        "echo $((1+2))",
        "echo $( (ls) )",
        "echo $(echo ')')",
        "echo $(echo \")\")",
        "echo \"a)b\" 'c(d'",
        "echo '",
        "echo \"",
        "echo $(",
        "echo $(ls",
        "echo $HOME \"$HOME\" $a_b1",
        "$CMD arg",
        "\"$(which rm)\" -rf /",
        "echo ~ ~/x ~user ~+ x~y",
        "cd ~",
        "if true; then ls; fi",
        "time ls",
        "! ls",
        "ls | time ls",
        "FOO=1 if",
        "echo if then fi",
        "{ ls; }",
        "(ls)",
        "ls # comment",
        "ls a\\ b",
        "echo `ls`",
        "echo $'a'",
        "echo ${x}",
        "ls *.rs",
        "ls\r",
        "ls é",
        "bash -c 'rm -rf /'",
        "sudo rm -rf /",
        "env FOO=1 rm -rf /",
        "xargs rm -rf",
        "tee ./out/x < f",
        "echo x > ~/.bashrc",
        "echo x > \"$HOME/.bashrc\"",
        "echo x >> /etc/passwd",
        "git -C . push --force",
        "PAGER='rm -rf /' git log",
        "PS1='$(rm x)' ls",
        "a=$(rm x) b=\"$(ls)\"",
    ] {
        check(command, &policies, &mut tally);
    }
}
