"""Webhook notifications: a rollout that halts, rolls a host back, waits for an approval,
completes or is aborted POSTs JSON to `--webhook URL`.

The payload is built from the journal when it is sent (each attempt), not when the event
happened: a retried or queued notification carries the rollout's state at that moment, never
a stale copy. Sending runs on one background thread so a slow or dead endpoint never holds up
the controller; a notification that still fails after its retries is recorded in the journal
as a `notify_error` event and the rollout carries on.

Webhook URLs are secrets (Slack and Teams put the token in the path, others in the query or
userinfo): only `redact(url)`, scheme://host:port, ever reaches a log line or the journal.
"""

from __future__ import annotations

import base64
import json
import queue
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from fleetgate.errors import BadInput
from fleetgate.rollout.journal import Journal
from fleetgate.rollout.status import HeldStep, diagnose_step, summary

SCHEMA = "fleetgate.rollout.notify/v1"
ROLLOUT_TRIGGERS = {"halted": "halt", "completed": "completed", "aborted": "aborted"}
# 4xx other than these mean the request itself is wrong: retrying cannot help.
RETRYABLE_4XX = (408, 425, 429)


def redact(url: str) -> str:
    """scheme://host[:port]/… with userinfo, path, query and fragment elided."""
    try:
        u = urllib.parse.urlsplit(url)
        host = u.hostname or "?"
        port = f":{u.port}" if u.port else ""
    except ValueError:
        return "(unparseable URL)"
    host = f"[{host}]" if ":" in host else host
    hidden = "/…" if (u.path not in ("", "/") or u.query or u.fragment) else ""
    return f"{u.scheme}://{'…@' if u.username or u.password else ''}{host}{port}{hidden}"


def check_url(url: str) -> str:
    """http(s) with a host; errors name the URL only in redacted form."""
    try:
        u = urllib.parse.urlsplit(url)
        _ = u.port  # raises on a non-numeric port
    except ValueError as exc:
        raise BadInput(f"not a URL: {exc}", source="--webhook", field=redact(url)) from None
    if u.scheme not in ("http", "https"):
        raise BadInput("only http and https webhooks are supported", source="--webhook",
                       field=redact(url))
    if not u.hostname:
        raise BadInput("the URL has no host", source="--webhook", field=redact(url))
    if any(c.isspace() for c in url):
        raise BadInput("the URL contains whitespace", source="--webhook", field=redact(url))
    return url


def trigger_of(event: dict[str, Any]) -> str | None:
    kind, d = event.get("kind"), event.get("data") or {}
    if kind == "rollout":
        return ROLLOUT_TRIGGERS.get(str(d.get("state")))
    if kind == "host" and d.get("to") == "rolled_back":
        return "rollback"
    if kind == "approval_needed":
        return "approval_needed"
    return None


def payload(j: Journal, rid: str, trigger: str, event: dict[str, Any], *,
            held_step: HeldStep = diagnose_step) -> dict[str, Any]:
    """The notification body, built from the journal now."""
    s = summary(j, rid, held_step=held_step)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(s["counts"].items()))
    what = {"halt": "halted", "completed": "completed", "aborted": "was aborted",
            "rollback": f"rolled back {event.get('host')}",
            "approval_needed": f"needs approval for wave {event.get('wave')}"}[trigger]
    text = (f"fleetgate rollout {rid} ({s['name']}) {what}: now {s['state']}"
            + (f" ({s['reason']})" if s["reason"] else "") + f"; hosts: {counts}")
    if s["state"] in ("halted", "aborted"):
        # Where the fleet stands and what to run, in the message an on-call sees first.
        text += "\n" + "\n".join(s["fleet"])
    if s["next_steps"]:
        text += "\nnext: " + "\n".join(s["next_steps"])
    return {"schema": SCHEMA, "trigger": trigger, "rollout": rid, "sent_at": time.time(),
            "fleet": s["fleet"], "next_steps": s["next_steps"],
            "text": text,  # what Slack/Mattermost-style incoming webhooks display
            "event": {k: event.get(k) for k in ("seq", "ts", "kind", "host", "wave", "data")},
            "status": s}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect would resend the body (and our Authorization) to a host nobody configured.
    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> None:
        raise urllib.error.HTTPError(req.full_url, code, f"redirect refused ({msg})", headers,
                                     fp)


def _post(url: str, body: bytes, timeout_s: float) -> int:
    u = urllib.parse.urlsplit(url)
    headers = {"Content-Type": "application/json", "User-Agent": "fleetgate-rollout"}
    if u.username or u.password:
        # urllib will not send URL userinfo itself; move it into a Basic header.
        cred = f"{urllib.parse.unquote(u.username or '')}:{urllib.parse.unquote(u.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
        netloc = u.hostname or ""
        netloc = (f"[{netloc}]" if ":" in netloc else netloc) + (f":{u.port}" if u.port else "")
        url = urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - scheme checked
    with urllib.request.build_opener(_NoRedirect).open(req, timeout=timeout_s) as resp:
        return int(resp.status)


class Notifier:
    """A journal listener that queues notifications; `close()` sends what is queued."""

    def __init__(self, j: Journal, rid: str, url: str, *, timeout_s: float = 5.0,
                 retries: int = 3, backoff_s: float = 1.0,
                 log: Callable[[str], None] | None = None,
                 held_step: HeldStep = diagnose_step):
        self.j, self.rid, self.url = j, rid, check_url(url)
        self.held_step = held_step
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self.log = log or (lambda _m: None)
        self._q: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="fleetgate-notify", daemon=True)
        self._thread.start()

    def __call__(self, event: dict[str, Any]) -> None:
        trigger = trigger_of(event)
        if trigger and event.get("rollout_id") == self.rid:
            self._q.put((trigger, event))

    def close(self, timeout_s: float = 60.0) -> None:
        """Send what is queued (bounded: a dead endpoint must not keep the CLI from exiting)."""
        self._q.put(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            self.deliver(*item)
        # Events committed while the last ones were being sent (a halt during a retry) queue
        # up behind the close marker; they are part of the story too.
        while True:
            try:
                late = self._q.get_nowait()
            except queue.Empty:
                return
            if late is not None:
                self.deliver(*late)

    def _scrub(self, text: str) -> str:
        """An error message without any part of the secret URL in it."""
        u = urllib.parse.urlsplit(self.url)
        for secret in (self.url, u.password, u.username, u.query, u.path, u.fragment):
            if secret and len(secret) > 1:
                text = text.replace(secret, "…")
        return " ".join(text.split())[:300]

    def deliver(self, trigger: str, event: dict[str, Any]) -> bool:
        error = ""
        attempts = 0
        for attempt in range(self.retries + 1):
            attempts = attempt + 1
            try:
                body = json.dumps(payload(self.j, self.rid, trigger, event,
                                          held_step=self.held_step), default=str)
                code = _post(self.url, body.encode(), self.timeout_s)
                self.log(f"notified {redact(self.url)}: {trigger} (HTTP {code})")
                return True
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code}: {exc.reason}"
                if 400 <= exc.code < 500 and exc.code not in RETRYABLE_4XX:
                    break
            except Exception as exc:  # network, TLS, timeout, a journal hiccup: all retried
                error = f"{type(exc).__name__}: {exc}"
            if attempt < self.retries:
                time.sleep(self.backoff_s * 2 ** attempt)
        error = self._scrub(error)
        self.log(f"notification to {redact(self.url)} failed after {attempts} attempt(s): "
                 f"{error}")
        try:
            self.j.event(self.rid, "notify_error", {"trigger": trigger, "url": redact(self.url),
                                                    "attempts": attempts, "error": error,
                                                    "on_seq": event.get("seq")})
        except Exception as exc:  # the journal is the controller's to worry about
            self.log(f"could not record the failed notification: {exc}")
        return False


def attach(j: Journal, rid: str, url: str, *, log: Callable[[str], None] | None = None,
           held_step: HeldStep = diagnose_step) -> Notifier:
    n = Notifier(j, rid, url, log=log, held_step=held_step)
    j.listeners.append(n)
    return n
