"""The environment a command gets: the host's, scrubbed of secrets, plus forced settings.

The same rule as the Rust executor (`host/executor/src/env.rs`): a variable whose name holds
`KEY`, `SECRET`, `TOKEN` or `PASSWORD` in any case is withheld, as is one matching an extra deny
pattern (`*` matches any run of characters, ASCII case ignored), unless its exact name is allowed.
Names and values are bytes, so a variable that is not UTF-8 passes through unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

SECRET_WORDS = (b"KEY", b"SECRET", b"TOKEN", b"PASSWORD")

# No colours, no pagers, no prompts that would hang without a terminal.
FORCED: Dict[bytes, bytes] = {
    b"NO_COLOR": b"1",
    b"TERM": b"dumb",
    b"PAGER": b"cat",
    b"GIT_PAGER": b"cat",
    b"GIT_TERMINAL_PROMPT": b"0",
}


def _name_bytes(name: str | bytes) -> bytes:
    return name if isinstance(name, bytes) else os.fsencode(name)


def _matches(pattern: bytes, name: bytes) -> bool:
    """Whether `name` matches `pattern`, where `*` matches any run of bytes, ASCII case ignored."""
    if not pattern:
        return not name
    if pattern[:1] == b"*":
        return any(_matches(pattern[1:], name[skip:]) for skip in range(len(name) + 1))
    return bool(name) and name[:1].upper() == pattern[:1].upper() and _matches(pattern[1:], name[1:])


def _check_name(what: str, name: str) -> str:
    if not isinstance(name, str) or not name or "=" in name or "\0" in name:
        raise ValueError(f"{what}: {name!r} is no variable name (empty, or holds '=' or NUL)")
    return name


@dataclass(frozen=True)
class EnvPolicy:
    """Which of the host's variables commands do not get, beyond the secret words."""

    deny: Sequence[str] = field(default_factory=tuple)
    """More patterns to scrub (`*` matches any run of characters; any case)."""
    allow: Sequence[str] = field(default_factory=tuple)
    """Names passed on whatever the rules say (exact, case-sensitive)."""

    def __post_init__(self) -> None:
        for pattern in self.deny:
            _check_name("env_deny", pattern)
        for name in self.allow:
            _check_name("env_allow", name)

    def scrubs(self, name: str | bytes) -> bool:
        """Whether a command does not get the variable `name`."""
        raw = _name_bytes(name)
        if any(_name_bytes(a) == raw for a in self.allow):
            return False
        upper = raw.upper()
        if any(word in upper for word in SECRET_WORDS):
            return True
        return any(_matches(_name_bytes(p), raw) for p in self.deny)

    def child_env(self, host: Optional[Mapping[bytes, bytes]] = None) -> Dict[bytes, bytes]:
        """The environment of a command, built from `host` (default: this process's)."""
        source = os.environb if host is None else host
        env = {k: v for k, v in source.items() if not self.scrubs(k) and k not in FORCED}
        env.update(FORCED)
        return env

    def scrubbed_host_names(self) -> List[str]:
        """The names in this process's environment that commands do not get, sorted."""
        return sorted(os.fsdecode(k) for k in os.environb if self.scrubs(k))
