"""Permission rules through the package: `Tools(policy=..., approve=...)` with the tools component
composed with the policy middleware, whose path `DSH_POLICY_COMPONENT` names (tests/policy_python.rs
composes it and runs these with pytest). Whether a command ran is read from the file it creates,
never from the text alone; the refusal texts are the ones `dsh-host --component COMPOSED --policy
p.toml call bash ...` prints for the same command and file.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from dsh_tools import ComponentError, PolicyError, Question, Session, ToolResult, Tools

POLICY = """[permissions]
allow = ["Bash(touch allowed)"]
ask = ["Bash(touch asked)"]
deny = ["Bash(touch denied)"]
default = "ask"
"""
FILES = [("p.toml", POLICY)]

DENIED = (
    "[policy: denied — `touch denied` matches deny rule Bash(touch denied) (p.toml:4). "
    "The command did not run; do not retry it in another form.]"
)
DECLINED = (
    "[policy: declined by the user — `touch asked` (ask rule Bash(touch asked), p.toml:3). "
    "The command did not run; do not retry it in another form.]"
)
TIMED_OUT = (
    "[policy: not approved in time — `touch asked` (ask rule Bash(touch asked), p.toml:3) "
    "got no answer within 0.3 s. The command did not run.]"
)
CANNOT_ASK_RULE = (
    "[policy: needs approval — `touch asked` matches ask rule Bash(touch asked) (p.toml:3), "
    "and this client cannot ask the user. The command did not run.]"
)
CANNOT_ASK_DEFAULT = (
    "[policy: needs approval — `touch other` matches no allow rule and the default verdict is "
    "ask (p.toml:5), and this client cannot ask the user. The command did not run. "
    "An operator can allow it with the rule Bash(touch other).]"
)


@pytest.fixture
def component() -> str:
    path = os.environ.get("DSH_POLICY_COMPONENT")
    if not path:
        pytest.fail("DSH_POLICY_COMPONENT is not set: it names the tools composed with the policy middleware")
    return path


def bash(session: Session, command: str, background: bool = False) -> ToolResult:
    args: Dict[str, Any] = {"command": command, "description": "Test a permission rule"}
    if background:
        args["run_in_background"] = True
    return session.call("bash", args)


class Asked:
    """An approve callback giving `answer`, keeping each question."""

    def __init__(self, answer: Optional[str]):
        self.answer = answer
        self.questions: List[Question] = []

    def __call__(self, q: Question) -> Optional[str]:
        self.questions.append(q)
        return self.answer


def test_an_allowed_command_runs_and_no_one_is_asked(component: str, tmp_path: Path) -> None:
    asked = Asked("decline")
    with Tools(component=component, policy=FILES, approve=asked) as tools, tools.session(cwd=str(tmp_path)) as s:
        r = bash(s, "touch allowed")
    assert (r.text, r.is_error) == ("(no output)", False)
    assert (tmp_path / "allowed").exists()
    assert asked.questions == []


def test_a_denied_command_is_refused_and_does_not_run(component: str, tmp_path: Path) -> None:
    asked = Asked("once")
    with Tools(component=component, policy=FILES, approve=asked) as tools, tools.session(cwd=str(tmp_path)) as s:
        fg = bash(s, "touch denied")
        bg = bash(s, "touch denied", background=True)
    assert (fg.text, fg.is_error) == (DENIED, True)
    assert (bg.text, bg.is_error) == (DENIED, True)
    assert not (tmp_path / "denied").exists()
    assert asked.questions == [], "a deny is never put to the person"


def test_a_file_given_as_a_path_is_cited_as_given(component: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "p.toml").write_text(POLICY)
    monkeypatch.chdir(tmp_path)
    with Tools(component=component, policy=["p.toml"]) as tools, tools.session(cwd=str(tmp_path)) as s:
        assert tools.policy_rule_count == 3
        assert bash(s, "touch denied").text == DENIED
    assert not (tmp_path / "denied").exists()


def test_once_runs_the_command_and_grants_nothing(component: str, tmp_path: Path) -> None:
    asked = Asked("once")
    with Tools(component=component, policy=FILES, approve=asked) as tools, tools.session(cwd=str(tmp_path)) as s:
        r = bash(s, "touch asked")
        assert (r.text, r.is_error) == ("(no output)", False)
        assert (tmp_path / "asked").exists()
        assert asked.questions == [
            Question(
                owner=s.owner,
                command="touch asked",
                cwd=str(tmp_path),
                parts=("touch asked",),
                rule="Bash(touch asked)",
                source="p.toml:3",
                construct=None,
                session_rule=None,
            )
        ]
        assert s.grants() == []
        # Once is once: the same command is asked again.
        bash(s, "touch asked")
        assert len(asked.questions) == 2


def test_session_grants_the_rule_for_that_session_only(component: str, tmp_path: Path) -> None:
    asked = Asked("session")
    with Tools(component=component, policy=FILES, approve=asked) as tools:
        with tools.session(cwd=str(tmp_path)) as s:
            assert bash(s, "touch g1").is_error is False
            assert (tmp_path / "g1").exists()
            assert [q.session_rule for q in asked.questions] == ["Bash(touch g1 *)"]
            assert s.grants() == tools.grants(s.owner) == ["Bash(touch g1 *)"]
            # The grant covers the next command of that prefix: it runs without a question.
            assert bash(s, "touch g1 g2").is_error is False
            assert (tmp_path / "g2").exists()
            assert len(asked.questions) == 1
            # Another session holds no grant of this one.
            with tools.session(cwd=str(tmp_path)) as other:
                assert other.grants() == []
                bash(other, "touch g1 g3")
                assert len(asked.questions) == 2
        assert tools.grants(s.owner) == [], "a session's grants end when it closes"
        with tools.session(cwd=str(tmp_path)) as later:
            bash(later, "touch g1 g4")
            assert len(asked.questions) == 3


def test_a_call_without_a_session_holds_no_grant(component: str, tmp_path: Path) -> None:
    asked = Asked("session")
    with Tools(component=component, policy=FILES, approve=asked) as tools:
        args = {"command": f"touch {tmp_path}/n1", "description": "Test a permission rule"}
        assert tools.call("bash", args).is_error is False
        assert (tmp_path / "n1").exists()
        assert [q.owner for q in asked.questions] == [None]
        assert tools.grants(None) == []
        tools.call("bash", args)
        assert len(asked.questions) == 2, "session ran it once: there is no session to hold the grant"


def test_a_grant_never_lifts_a_deny(component: str, tmp_path: Path) -> None:
    policy = [("p.toml", '[permissions]\ndeny = ["Bash(touch g1 denied)"]\ndefault = "ask"\n')]
    asked = Asked("session")
    with Tools(component=component, policy=policy, approve=asked) as tools, tools.session(cwd=str(tmp_path)) as s:
        bash(s, "touch g1")
        assert s.grants() == ["Bash(touch g1 *)"]
        r = bash(s, "touch g1 denied")
    assert r.is_error and r.text.startswith("[policy: denied — `touch g1 denied` matches deny rule")
    assert not (tmp_path / "denied").exists()


def test_decline_refuses_with_the_declined_text(component: str, tmp_path: Path) -> None:
    with Tools(component=component, policy=FILES, approve=Asked("decline")) as tools, tools.session(cwd=str(tmp_path)) as s:
        r = bash(s, "touch asked")
    assert (r.text, r.is_error) == (DECLINED, True)
    assert not (tmp_path / "asked").exists()


@pytest.mark.parametrize("answer", [None, "yes", "ONCE", "allow"])
def test_any_other_answer_declines(component: str, tmp_path: Path, answer: Optional[str]) -> None:
    with Tools(component=component, policy=FILES, approve=Asked(answer)) as tools, tools.session(cwd=str(tmp_path)) as s:
        r = bash(s, "touch asked")
        assert tools.approval_failures == [f"approve answered {answer!r}, not one of 'once', 'session', 'decline': declined"]
    assert r.text == DECLINED
    assert not (tmp_path / "asked").exists()


def test_a_callback_that_raises_declines(component: str, tmp_path: Path) -> None:
    def approve(_q: Question) -> str:
        raise RuntimeError("the approval dialog broke")

    with Tools(component=component, policy=FILES, approve=approve) as tools, tools.session(cwd=str(tmp_path)) as s:
        r = bash(s, "touch asked")
        assert tools.approval_failures == ["approve raised RuntimeError: the approval dialog broke: declined"]
    assert r.text == DECLINED
    assert not (tmp_path / "asked").exists()


def test_a_slow_callback_times_out_and_its_late_answer_is_dropped(component: str, tmp_path: Path) -> None:
    answered = threading.Event()

    def approve(_q: Question) -> str:
        time.sleep(1.0)
        answered.set()
        return "once"

    with Tools(component=component, policy=FILES, approve=approve, approve_timeout=0.3) as tools:
        with tools.session(cwd=str(tmp_path)) as s:
            started = time.monotonic()
            r = bash(s, "touch asked")
            waited = time.monotonic() - started
        assert (r.text, r.is_error) == (TIMED_OUT, True)
        assert waited < 0.9, f"the call waited {waited:.2f} s, past the 0.3 s timeout"
        assert answered.wait(5)
    assert not (tmp_path / "asked").exists()


def test_without_a_callback_nobody_can_be_asked(component: str, tmp_path: Path) -> None:
    with Tools(component=component, policy=FILES) as tools, tools.session(cwd=str(tmp_path)) as s:
        by_rule = bash(s, "touch asked")
        by_default = bash(s, "touch other")
    assert (by_rule.text, by_rule.is_error) == (CANNOT_ASK_RULE, True)
    assert (by_default.text, by_default.is_error) == (CANNOT_ASK_DEFAULT, True)
    assert not (tmp_path / "asked").exists() and not (tmp_path / "other").exists()


def test_without_policy_files_the_engine_defaults_apply(component: str, tmp_path: Path) -> None:
    # The composed component works without policy=: no files, the built-in default (ask).
    with Tools(component=component) as tools, tools.session(cwd=str(tmp_path)) as s:
        assert tools.policy_rule_count == 0
        r = bash(s, "touch other")
    assert r.text == (
        "[policy: needs approval — `touch other` matches no allow rule and the default verdict is "
        "ask (the built-in default), and this client cannot ask the user. The command did not run. "
        "An operator can allow it with the rule Bash(touch other).]"
    )
    assert not (tmp_path / "other").exists()


def test_an_async_callback_is_awaited(component: str, tmp_path: Path) -> None:
    questions: List[Question] = []

    async def approve(q: Question) -> str:
        await asyncio.sleep(0.01)
        questions.append(q)
        return "once"

    with Tools(component=component, policy=FILES, approve=approve) as tools, tools.session(cwd=str(tmp_path)) as s:
        r = bash(s, "touch asked")
    assert (r.text, r.is_error) == ("(no output)", False)
    assert (tmp_path / "asked").exists()
    assert [q.rule for q in questions] == ["Bash(touch asked)"]


def test_a_slow_async_callback_times_out_and_is_cancelled(component: str, tmp_path: Path) -> None:
    cancelled = threading.Event()

    async def approve(_q: Question) -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "once"

    with Tools(component=component, policy=FILES, approve=approve, approve_timeout=0.3) as tools:
        with tools.session(cwd=str(tmp_path)) as s:
            r = bash(s, "touch asked")
    assert r.text == TIMED_OUT
    assert cancelled.wait(5), "the coroutine still ran after the timeout"
    assert not (tmp_path / "asked").exists()


def test_an_async_callback_runs_on_the_given_loop(component: str, tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    seen: List[asyncio.AbstractEventLoop] = []

    async def approve(_q: Question) -> str:
        seen.append(asyncio.get_running_loop())
        return "once"

    try:
        with Tools(component=component, policy=FILES, approve=approve, approve_loop=loop) as tools:
            with tools.session(cwd=str(tmp_path)) as s:
                assert bash(s, "touch asked").is_error is False
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)
        loop.close()
    assert seen == [loop]
    assert (tmp_path / "asked").exists()


def test_a_pending_question_does_not_hold_up_other_sessions(component: str, tmp_path: Path) -> None:
    release = threading.Event()
    asking = threading.Event()

    def approve(_q: Question) -> str:
        asking.set()
        release.wait(10)
        return "decline"

    with Tools(component=component, policy=FILES, approve=approve) as tools:
        with tools.session(cwd=str(tmp_path)) as waiting, tools.session(cwd=str(tmp_path)) as other:
            results: List[ToolResult] = []
            asker = threading.Thread(target=lambda: results.append(bash(waiting, "touch asked")))
            asker.start()
            assert asking.wait(10)
            # While the question is open, another session's allowed command runs.
            assert bash(other, "touch allowed").is_error is False
            assert (tmp_path / "allowed").exists()
            release.set()
            asker.join(10)
    assert [r.text for r in results] == [DECLINED]


def test_a_file_that_does_not_load_stops_construction_naming_file_and_line(
    component: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad.toml").write_text('[permissions]\nalow = ["Bash(ls)"]\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PolicyError) as err:
        Tools(component=component, policy=["bad.toml"])
    assert str(err.value).startswith("the policy files do not load: bad.toml:2: unknown field `alow`"), str(err.value)
    # Every file is checked, a later one too, under the name given.
    with pytest.raises(PolicyError, match=r"^the policy files do not load: second\.toml:1: "):
        Tools(component=component, policy=[("p.toml", POLICY), ("second.toml", "[permissions\n")])


def test_an_unreadable_file_stops_construction_naming_it(component: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(PolicyError, match=f"^cannot read the policy file {re.escape(str(missing))}: No such file or directory$"):
        Tools(component=component, policy=[missing])


def test_policy_needs_a_component_with_the_approval_import(tmp_path: Path) -> None:
    # The bundled component has no permission rules: refused, rather than ignoring the rules.
    needs = r"needs a component that imports dsh:bash/approval@0\.9\.0.*policy/middleware/compose\.sh"
    with pytest.raises(ComponentError, match="^policy= " + needs):
        Tools(policy=FILES)
    with pytest.raises(ComponentError, match="^approve= " + needs):
        Tools(approve=Asked("once"))
