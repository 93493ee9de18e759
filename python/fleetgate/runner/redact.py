"""The one redactor for what fleetgate keeps of a run: journal, events.jsonl and the rest of
ansible-runner's artifacts, batch results, worker logs, reports.

It masks (a) the values of the secret vars this process has resolved for its runs
(`add_secrets`), wherever they appear: a task that echoes a registry token, a failed
`command` whose message quotes its command line; and (b) text that looks like a credential
(`password=...`, `api_key: ...`, `"token": "..."`) in stdout and messages. Structured data
from Ansible also loses the values of secret-looking keys (`event`), and a `no_log` task
keeps nothing but Ansible's own "censored" marker.

The registry is per process on purpose: the controller and each batch worker resolve the
plan's secret vars themselves, so whatever either of them writes is masked the same way.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable
from typing import Any, TextIO

MASK = "<redacted>"
# Key names whose values are never kept (Ansible results, env dumps, JSON artifacts).
SECRET_KEY_RE = re.compile(r"pass(word)?|secret|token|private_key|api_key", re.IGNORECASE)
# The same words as `key=value` / `key: value` / `"key": "value"` in free text. Here the key
# must end in the word, so a metric such as `tokens_per_s=812` stays readable, and a bare
# `pass` is a verdict ("gemm pass: 3 of 3"), not a credential, unless it ends a longer key.
CREDENTIAL_WORDS = (r"password|passwd|passphrase|[\w.-]+[_.-]pass|secret(?:_access_key|_key)?"
                    r"|token|private_key|api_key")
KEY_VALUE_RE = re.compile(
    rf"(?P<key>\b[\w.-]*?(?:{CREDENTIAL_WORDS}))(?![\w-])(?P<sep>[\"']?[ \t]*[:=][ \t]*)"
    r"(?:(?P<q>[\"'])(?P<quoted>[^\"'\r\n]*)(?P=q)|(?P<bare>[^\s\"',;}\]]+))",
    re.IGNORECASE)
# What ansible-runner's callback puts in place of a no_log task's result.
CENSORED = ("the output has been hidden due to the fact that 'no_log: true' was specified "
            "for this result")
# Below this a value would be masked inside ordinary words; secret_vars refuses shorter ones.
MIN_SECRET_LEN = 8


class Redactor:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._needles: tuple[str, ...] = ()

    def add_secrets(self, values: Iterable[str]) -> None:
        found = set(self._needles)
        for v in values:
            if len(v) < MIN_SECRET_LEN:
                raise ValueError(f"a secret of {len(v)} characters cannot be masked")
            # Also as it appears inside JSON text (quotes, backslashes, non-ASCII escaped).
            found |= {v, json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1]}
        with self._lock:
            # Longest first: a secret that contains another is masked whole.
            self._needles = tuple(sorted(found, key=len, reverse=True))

    def text(self, s: str) -> str:
        for needle in self._needles:
            if needle in s:
                s = s.replace(needle, MASK)
        return KEY_VALUE_RE.sub(_mask_value, s)

    def data(self, obj: Any) -> Any:
        """Every string in `obj` through text(); keys and structure kept (journal data:
        a smoke metric named tokens_per_s keeps its value)."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {k: self.data(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.data(v) for v in obj]
        return obj

    def keyed(self, obj: Any) -> Any:
        """data(), and the value of every secret-looking key masked (Ansible results)."""
        if isinstance(obj, dict):
            return {k: MASK if isinstance(k, str) and SECRET_KEY_RE.search(k)
                    else self.keyed(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.keyed(v) for v in obj]
        return self.data(obj)

    def event(self, event: dict[str, Any]) -> dict[str, Any]:
        """An ansible-runner event as fleetgate keeps it."""
        clean: dict[str, Any] = self.keyed(event)
        data = clean.get("event_data")
        if isinstance(data, dict):
            res = data.get("res")
            if isinstance(res, dict) and (res.get("_ansible_no_log") or "censored" in res):
                # no_log: the task's command line, stdout and arguments stay on the host.
                data["res"] = {"censored": CENSORED}
                data.pop("task_args", None)
        return clean


def _mask_value(m: re.Match[str]) -> str:
    q = m.group("q") or ""
    return f"{m.group('key')}{m.group('sep')}{q}{MASK}{q}"


PROCESS = Redactor()


def add_secrets(values: Iterable[str]) -> None:
    PROCESS.add_secrets(values)


def text(s: str) -> str:
    return PROCESS.text(s)


def data(obj: Any) -> Any:
    return PROCESS.data(obj)


def event(e: dict[str, Any]) -> dict[str, Any]:
    return PROCESS.event(e)


class RedactingStream:
    """A text stream that masks what is written through it (a worker's stdout and stderr:
    a traceback can quote a variable)."""

    def __init__(self, inner: TextIO):
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(PROCESS.text(s))
        return len(s)

    def flush(self) -> None:
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
