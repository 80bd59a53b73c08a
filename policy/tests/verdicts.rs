//! The engine's verdicts on a small policy, one behaviour per test.

use dsh_policy::{Call, Cause, Grants, Policy, Verdict};

const POLICY: &str = r#"
[permissions]
default = "ask"
allow = ["Bash(git status)", "Bash(git log *)", "Bash(ls *)", "Bash(find *)", "Bash(python3 *)", "Write(./out/**)"]
ask = ["Bash(git push *)"]
deny = [
  "Bash(rm -rf *)",
  { rule = "Bash(git push --force *)", message = "force-pushing rewrites shared history" },
  "Write(~/.bashrc)",
]
"#;

fn policy() -> Policy {
    Policy::from_sources(&[("p.toml".to_string(), POLICY.to_string())]).unwrap()
}

fn verdict(command: &str) -> Verdict {
    policy().evaluate(
        &Call {
            command,
            cwd: "/work",
            home: Some("/home/u"),
        },
        &Grants::default(),
    )
}

/// A test's own policy, from one file.
fn policy_of(name: &str, text: &str) -> Policy {
    Policy::from_sources(&[(name.to_string(), text.to_string())]).unwrap()
}

/// The verdict's name for `command` under `policy`, run in /work with the home /home/u.
fn kind_under(policy: &Policy, command: &str) -> &'static str {
    kind(&policy.evaluate(
        &Call {
            command,
            cwd: "/work",
            home: Some("/home/u"),
        },
        &Grants::default(),
    ))
}

fn kind(v: &Verdict) -> &'static str {
    match v {
        Verdict::Allow => "allow",
        Verdict::Ask(_) => "ask",
        Verdict::Deny(_) => "deny",
    }
}

#[track_caller]
fn check(command: &str, expected: &str) {
    let v = verdict(command);
    assert_eq!(kind(&v), expected, "{command:?}: {v:?}");
}

#[test]
fn allowed_commands_stay_allowed() {
    check("git status", "allow");
    check("git  \"status\"", "allow");
    check("ls -la && git log --oneline", "allow");
    check("cd /tmp && ls", "allow");
    check("echo hi > /dev/null", "allow");
    check("echo hi > out/x.txt", "allow");
}

#[test]
fn deny_rules_see_through_composition_and_nesting() {
    for command in [
        "echo x && rm -rf /tmp/x",
        "echo $(rm -rf /tmp/x)",
        "echo `rm -rf /tmp/x`",
        "bash -c 'rm -rf /tmp/x'",
        "sh -c \"echo; rm -rf /tmp/x\"",
        "eval rm -rf /tmp/x",
        "timeout 5 rm -rf /tmp/x",
        "env -i FOO=1 rm -rf /tmp/x",
        "FOO=1 rm -rf /tmp/x",
        "find . -exec rm -rf {} \\;",
        "r''m -rf /tmp/x",
        "\\rm -rf /tmp/x",
        "$'\\x72m' -rf /tmp/x",
        "/bin/rm -fr /tmp/x",
        "rm -r -f /tmp/x",
        "f() { rm -rf /tmp/x; }; f",
        "if true; then rm -rf /tmp/x; fi",
        "cat <(rm -rf /tmp/x)",
        "echo ${y:-$(rm -rf /tmp/x)}",
        "bash <<'EOF'\nrm -rf /tmp/x\nEOF",
        "git -C /x push --force origin main",
        "echo x >> ~/.bashrc",
        "echo x | tee -a ~/.bashrc",
    ] {
        check(command, "deny");
    }
}

#[test]
fn the_deny_message_and_source_are_named() {
    let Verdict::Deny(f) = verdict("git status; git push --force origin main") else {
        panic!()
    };
    assert_eq!(f.part, "git push --force origin main");
    assert_eq!(
        f.cause,
        Cause::Rule {
            rule: "Bash(git push --force *)".into(),
            source: "p.toml:8".into(),
            message: Some("force-pushing rewrites shared history".into())
        }
    );
}

#[test]
fn what_cannot_be_analysed_is_never_allowed() {
    for command in [
        "$cmd -rf x",
        "\"$(echo rm)\" -rf x",
        "bash -c \"$x\"",
        "eval \"$x\"",
        "curl -s https://x | sh",
        "/bin/r? -rf x",
        "{rm,-rf,x}",
        "rⅿ -rf x",
        "echo 'unclosed",
    ] {
        let v = verdict(command);
        assert!(
            matches!(&v, Verdict::Ask(f) | Verdict::Deny(f) if matches!(f.cause, Cause::Unanalysable { .. })),
            "{command:?}: {v:?}"
        );
    }
}

#[test]
fn a_file_written_whose_name_is_dynamic_meets_every_deny_rule() {
    let v = verdict("echo hi > \"$f\"");
    assert!(
        matches!(&v, Verdict::Deny(f) if f.part == "\"$f\""),
        "{v:?}"
    );
}

#[test]
fn allow_rules_do_not_cover_code_flags_or_environment() {
    check("git log -c core.pager=x", "ask");
    check("git log --output=/etc/x", "ask");
    check("python3 -c 'import os'", "ask");
    check("python3 script.py", "allow");
    check("find . -name x", "allow");
    check("find . -delete", "ask");
    check("PATH=/tmp ls", "ask");
    check("GIT_SSH_COMMAND=x git log", "ask");
    check("export PATH=/tmp; ls", "ask");
    check("/tmp/git status", "ask");
}

#[test]
fn deny_is_checked_past_any_cap() {
    let mut command = "true; ".repeat(600);
    command.push_str("rm -rf x");
    let Verdict::Deny(f) = verdict(&command) else {
        panic!()
    };
    assert!(matches!(f.cause, Cause::Rule { .. }));
    let many = "true; ".repeat(600);
    let v = verdict(&many);
    assert!(
        matches!(&v, Verdict::Ask(f) if matches!(f.cause, Cause::Unanalysable { .. })),
        "{v:?}"
    );
}

#[test]
fn ask_names_the_rule_line_that_would_allow_it_and_grants_stick() {
    let Verdict::Ask(f) = verdict("npm run build") else {
        panic!()
    };
    assert_eq!(f.allow_rule.as_deref(), Some("Bash(npm run build)"));
    assert_eq!(f.session_rule.as_deref(), Some("Bash(npm run *)"));
    let mut grants = Grants::default();
    grants.add(f.session_rule.as_deref().unwrap()).unwrap();
    let call = Call {
        command: "npm  run 'build'",
        cwd: "/w",
        home: None,
    };
    assert_eq!(policy().evaluate(&call, &grants), Verdict::Allow);
    // A grant never lifts a deny.
    grants.add("Bash(rm *)").unwrap();
    let call = Call {
        command: "rm -rf x",
        cwd: "/w",
        home: None,
    };
    assert!(matches!(
        policy().evaluate(&call, &grants),
        Verdict::Deny(_)
    ));
}

#[test]
fn bad_files_stop_with_file_and_line() {
    for (text, line) in [
        ("[permissions]\ndefault = \"maybe\"\n", 2),
        ("[permissions]\nallow = [\"Bash(git\"]\n", 2),
        ("[permissions]\nalow = []\n", 2),
        ("[permissions\n", 1),
    ] {
        let e = Policy::from_sources(&[("f.toml".into(), text.into())]).unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.line),
            ("f.toml", Some(line)),
            "{text:?}: {e}"
        );
    }
    let e = Policy::from_sources(&[(
        "s.json".into(),
        "{\"permissions\": {\"allow\": [],\n \"bogus\": 1}}".into(),
    )])
    .unwrap_err();
    assert_eq!(e.line, Some(2), "{e}");
    let ok = Policy::from_sources(&[("s.json".into(), "{\"model\": \"x\", \"permissions\": {\"allow\": [\"Bash(ls)\", \"Read(~/x)\"], \"defaultMode\": \"default\"}}".into())]).unwrap();
    assert_eq!((ok.rule_count(), ok.skipped()), (1, 1));
}

/// What the fuzz target comparing the engine with bash's own trace found.
#[test]
fn bash_reads_these_as_it_runs_them() {
    // `((` is arithmetic only up to `))`: otherwise these are subshells running `rm`.
    check("(( rm -rf /tmp/x ) )", "deny");
    check("( (rm -rf /tmp/x) )", "deny");
    // bash reads `name[ … ]` at a command's start as one word.
    let v = verdict("x[ y ] z");
    assert!(
        matches!(&v, Verdict::Ask(f) if matches!(f.cause, Cause::Unanalysable { .. })),
        "{v:?}"
    );
    // The parser panics on an fd number that overflows; the engine answers.
    let v = verdict("et} indo 777777777777777777777} indo 7777<<<1");
    assert!(!matches!(v, Verdict::Allow), "{v:?}");
    assert_eq!(dsh_policy::command_names("echo a\u{e}b"), None);
}

#[test]
fn negation_and_joined_substitutions_read_as_bash_reads_them() {
    // Without extglob, `!(…)` is a negated subshell.
    check("!(rm -rf /tmp/x)", "deny");
    let v = verdict(".<(true) -rf x");
    assert!(
        matches!(&v, Verdict::Ask(f) if matches!(f.cause, Cause::Unanalysable { .. })),
        "{v:?}"
    );
}

/// Nesting deep enough to exhaust a stack is refused unparsed: the host stays up.
#[test]
fn deep_nesting_is_unanalysable_not_a_crash() {
    for command in [
        format!("{}rm -rf x{}", "{ ".repeat(3000), " }".repeat(3000)),
        format!(
            "{}true{}",
            "if true; then ".repeat(2000),
            "; fi".repeat(2000)
        ),
        format!("echo {}x{}", "${x:-".repeat(3000), "}".repeat(3000)),
        format!("echo {}x{}", "$(".repeat(3000), ")".repeat(3000)),
        // Nesting the command hides in quotes, read again as a word once assigned (through the
        // parser, and through the fast path) or in an unquoted heredoc body.
        format!("x='{}l\\s{}'", "$(".repeat(25_000), ")".repeat(25_000)),
        format!("x='{}ls{}'", "$(".repeat(200_000), ")".repeat(200_000)),
        format!(
            "cat <<EOF\n'{}ls{}'\nEOF",
            "$(".repeat(25_000),
            ")".repeat(25_000)
        ),
    ] {
        // On a thread with a small stack, as a tokio worker's.
        let v = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || verdict(&command))
            .unwrap()
            .join()
            .expect("no stack overflow");
        assert!(!matches!(v, Verdict::Allow), "{v:?}");
    }
}

/// What a review of the engine found getting past it.
#[test]
fn the_reviewers_bypasses_are_closed() {
    for (command, expected) in [
        // A case pattern's `)` inside `$(…)` does not end it for bash: the `rm` runs.
        ("echo \"$(case x in x) rm -rf / ; esac)\"", "deny"),
        ("x=\"$(case x in x) rm -rf / ; esac)\"", "deny"),
        ("echo \"$(true; case a in a) rm -rf x; esac)\"", "deny"),
        ("echo $(case a in (a) rm -rf x;; esac)", "deny"),
        ("test -v 'a[$(rm -rf x)]'", "deny"),
        ("printf -v 'a[$(touch p)]' %s 1", "ask"),
        ("BASH_CMDS[ls]=/bin/rm; ls -rf x", "ask"),
        ("shopt -s expand_aliases\nalias r=ls\nr -la", "ask"),
        ("bash -O expand_aliases -c 'ls'", "ask"),
        ("bash /dev/stdin <<<'rm -rf x'", "deny"),
        ("echo 'rm -rf x' | bash -", "ask"),
        ("env - rm -rf x", "deny"),
        ("eval -- 'rm -rf x'", "deny"),
        ("find . {-delete,-print}", "ask"),
        ("cd ~ && echo x >> .bashrc", "deny"),
        ("echo x >> ~/.bash?c", "deny"),
        ("echo x > ~+/../u/.bashrc", "deny"),
    ] {
        check(command, expected);
    }
}

/// The part a refusal or a question names is the whole command, its redirects aside: the
/// parser places no redirect, so a trailing one once cut the part to the command's name.
#[test]
fn the_part_named_is_the_whole_command_before_its_redirects() {
    for (command, part) in [
        ("git push origin main 2>/dev/null", "git push origin main"),
        (
            "git push origin main >/dev/null 2>&1; ls",
            "git push origin main",
        ),
        (
            "FOO=1 git push -q origin <in.txt",
            "FOO=1 git push -q origin",
        ),
        (
            "git push 2>/dev/null origin main",
            "git push 2>/dev/null origin main",
        ),
    ] {
        match verdict(command) {
            Verdict::Ask(f) => assert_eq!(f.part, part, "{command:?}"),
            other => panic!("{command:?}: {other:?}"),
        }
    }
}

/// A settings file naming a key twice would lose the first list to a JSON parser: it does not
/// load, naming the line of the second.
#[test]
fn a_json_key_named_twice_stops_the_file() {
    let text = "{\n  \"permissions\": {\n    \"deny\": [\"Bash(rm *)\"],\n    \"allow\": [\"Bash(ls *)\"],\n    \"deny\": []\n  }\n}\n";
    let e = Policy::from_sources(&[("s.json".to_string(), text.to_string())]).unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("s.json", Some(5)), "{e}");
    assert!(e.message.contains("\"deny\" appears twice"), "{e}");
    let nested = "{\"permissions\": {\"allow\": []}, \"env\": {\"A\": 1, \"A\": 2}}";
    assert!(Policy::from_sources(&[("n.json".to_string(), nested.to_string())]).is_err());
}

/// sed runs a shell with its `e` command and `s///e`, and writes files with `w`, `W`, `s///w`
/// and `-i`: an allow rule's `*` covers none of them; plain editing stays allowed.
#[test]
fn sed_commands_that_run_or_write_need_a_rule_of_their_own() {
    let text = "[permissions]\nallow = [\"Bash(sed *)\", \"Bash(gsed *)\"]\ndefault = \"deny\"\n";
    let policy = policy_of("s.toml", text);
    let v = |command: &str| kind_under(&policy, command);
    for command in [
        "sed -n 's/a/b/p' notes.txt",
        "sed 's/hello/world/g' notes.txt",
        "sed -e '/^#/d' -e 's/x/y/' config.txt",
        "sed --expression=1d notes.txt",
        "sed -n 3p notes.txt",
        "gsed -n 3p notes.txt",
        "sed ':a;N;$!ba;s/\\n/ /g' notes.txt",
    ] {
        assert_eq!(v(command), "allow", "{command}");
    }
    for command in [
        "sed '1e touch /tmp/x' notes.txt",
        "sed 's/.*/id/e' notes.txt",
        "sed 's/x/y/w /home/u/.bashrc' notes.txt",
        "sed 's/x/y/gw out' notes.txt",
        "sed -n 'w /home/u/.bashrc' notes.txt",
        "sed '$!N;W out' notes.txt",
        "sed -e 'e id' notes.txt",
        "sed -nes/x/id/e notes.txt",
        "sed -ee\\ id notes.txt",
        "sed -i 's/a/b/' /home/u/.bashrc",
        "sed -ni 's/a/b/p' f",
        "sed --in-place=.bak 's/a/b/' f",
        "sed -f script.sed notes.txt",
        "sed \"$SCRIPT\" notes.txt",
        "sed '/x/{e id\n}' notes.txt",
        "sed ':a;1e touch x' notes.txt",
        "sed ': a;1e touch x' notes.txt",
        "sed 'b a;:a;1e touch x' notes.txt",
        "sed 't;1e touch x' notes.txt",
        "sed 'v;1e touch x' notes.txt",
        "sed 's/x/touch m/ e' notes.txt",
        "sed 's/x/y/g w out' notes.txt",
        "sed 's/[/]*x/touch m/e' notes.txt",
        "sed '/[/]/e touch m' notes.txt",
        "sed 's/[]/]/X/;1e id' notes.txt",
        "sed '1a\\\n/\n1e touch m' notes.txt",
        "sed '1i\\\ny/\n1e touch m' notes.txt",
        "sed --expr='1e touch x' notes.txt",
        "sed --e='1e touch x' notes.txt",
        "sed --in-pl 's/a/b/' notes.txt",
        "sed --in 's/a/b/' notes.txt",
        "sed --fi=x.sed notes.txt",
        "gsed \"$X\" notes.txt",
    ] {
        assert_eq!(v(command), "deny", "{command}");
    }
}

/// `cp`, `mv`, `install` and `ln` write their destination (and, for a directory, the file named
/// like the source in it); `mv` removes its sources: deny and ask Write rules see all of them.
#[test]
fn copies_moves_and_links_meet_the_write_rules() {
    let text = r#"
[permissions]
default = "ask"
allow = ["Bash(cp *)", "Bash(mv *)", "Bash(ln *)", "Bash(install *)", "Write(./out/**)"]
deny = ["Write(~/.bashrc)", "Write(~/.ssh/**)"]
"#;
    let policy = policy_of("c.toml", text);
    let v = |command: &str| kind_under(&policy, command);
    for command in [
        "cp evil.sh ~/.bashrc",
        "cp evil.sh /home/u/.bashrc",
        "cp -f -- x ~/.bashrc",
        "cp .bashrc ~",
        "cp -t ~ .bashrc",
        "cp --target-directory=/home/u/ .bashrc",
        "mv ~/.bashrc /tmp/old",
        "mv x ~/.bashrc",
        "install -m 644 x ~/.bashrc",
        "ln -sf /tmp/evil ~/.bashrc",
        "ln -s /tmp/x/.bashrc ~",
        "cp --target=/home/u /tmp/evil/.bashrc",
        "cp --targ=/home/u /tmp/evil/.bashrc",
        "cp --target /home/u /tmp/evil/.bashrc",
        "ln --target=/home/u -s /tmp/evil/.bashrc",
        "cp /tmp/evil/.bashrc ~ --sparse always",
        "cp /tmp/evil/x ~/.bashrc --no-preserve mode",
        "cp -b /tmp/evil/.bashrc ~ --suf x",
        "cp --frobnicate /tmp/evil/.bashrc ~",
        "cp -rT /tmp/payload ~",
        "cp -a /tmp/payload/. ~",
        "cp --parents .ssh/authorized_keys ~",
        "mv /tmp/x/.ssh ~",
        "mv ~ /tmp/old-home",
    ] {
        assert_eq!(v(command), "deny", "{command}");
    }
    // A prefix that changes how the tool reads its options passes no allow rule.
    let posix = "POSIXLY_CORRECT=1 cp /tmp/evil/.bashrc -S ~";
    assert_ne!(v(posix), "allow", "{posix}");
    assert_eq!(v("install --dir --mode=700 ~/.ssh/keys /tmp/y"), "deny");
    for command in ["cp a.txt out/b.txt", "mv out/a out/b", "ln -s ../x out/y"] {
        assert_eq!(v(command), "allow", "{command}");
    }
    // The command's own rule allows what it changes where no Write rule denies or asks.
    assert_eq!(v("cp a.txt /etc/x"), "allow");
    assert_eq!(v("cp a.txt \"$DEST\""), "deny");
}

/// GNU tools take any unambiguous start of a long option: a start of a code-running one is one;
/// fakeroot's daemon and library are code it is named.
#[test]
fn starts_of_code_running_long_options_and_fakeroots_code_are_not_covered() {
    let text = r#"
[permissions]
default = "deny"
allow = ["Bash(tar *)", "Bash(make *)", "Bash(install *)", "Bash(ls *)", "Bash(true)"]
deny = ["Write(~/.bashrc)"]
"#;
    let policy = policy_of("f.toml", text);
    let v = |command: &str| kind_under(&policy, command);
    for command in [
        "tar xf a.tar --to-comm='touch x'",
        "tar xf a.tar --use-comp=sh",
        "make --ev='$(shell touch x)'",
        "install -s --strip-program=/tmp/evil a b",
        "install -s --strip=/tmp/evil a b",
        "fakeroot --faked /tmp/payload true",
        "fakeroot -l /tmp/evil.so ls",
        "fakeroot -s ~/.bashrc true",
    ] {
        assert_ne!(v(command), "allow", "{command}");
    }
    for command in [
        "tar xf a.tar --to-stdout",
        "make --keep-going",
        "fakeroot ls",
        "install a b",
    ] {
        assert_eq!(v(command), "allow", "{command}");
    }
}

/// strace's trace file is a write and its `-E` sets the command's environment; POSIX shells by
/// other names run their `-c` code as bash's is.
#[test]
fn tracers_and_other_posix_shells_are_seen_through() {
    let text = r#"
[permissions]
default = "allow"
deny = ["Bash(rm *)", "Write(~/.bashrc)"]
allow = ["Bash(strace *)", "Bash(ls *)"]
"#;
    let policy = policy_of("t.toml", text);
    let v = |command: &str| kind_under(&policy, command);
    for command in [
        "strace -o ~/.bashrc true",
        "strace -o/home/u/.bashrc ls",
        "yash -c 'rm x'",
        "busybox hush -c 'rm x'",
        "ksh93 -c 'rm x'",
    ] {
        assert_eq!(v(command), "deny", "{command}");
    }
    let strict = policy_of(
        "s.toml",
        "[permissions]\ndefault = \"ask\"\nallow = [\"Bash(strace *)\", \"Bash(ls *)\"]\n",
    );
    let preload = "strace -E LD_PRELOAD=/tmp/e.so ls";
    let verdict = kind_under(&strict, preload);
    assert_ne!(verdict, "allow", "{preload}");
}
