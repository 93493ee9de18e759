"""One controller per rollout and per inventory: a lease in the journal, with a TTL and a
heartbeat.

A live holder's lease refuses a second controller with the holder's pid and host. A lease
whose TTL ran out belongs to a dead (or wedged) controller and is taken over; on the same
machine a holder pid that no longer exists is known dead at once, so a `resume` after a
crash need not sit out the TTL.
"""

from __future__ import annotations

import os
import secrets
import threading
import time

from fleetgate.errors import FleetgateError
from fleetgate.rollout.journal import Journal
from fleetgate.system.procs import pid_alive


class LeaseHeld(FleetgateError):
    exit_code = 12


class Lease:
    def __init__(self, journal: Journal, rid: str, scopes: list[str], *, ttl_s: float = 30.0):
        self.journal = journal
        self.rid = rid
        self.scopes = scopes
        self.ttl_s = ttl_s
        self.token = secrets.token_hex(8)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> list[str]:
        """Take every scope or none. Returns notes on stale leases taken over."""
        me = os.uname().nodename
        now = time.time()
        notes: list[str] = []
        with self.journal.tx() as db:
            for scope in self.scopes:
                row = db.execute("SELECT rollout_id, pid, hostname, expires_at FROM leases"
                                 " WHERE scope=?", (scope,)).fetchone()
                if row is None:
                    continue
                holder_rid, pid, host, expires = row
                dead_here = host == me and not pid_alive(pid)
                if expires > now and not dead_here:
                    raise LeaseHeld(
                        f"held by controller pid {pid} on {host} (rollout {holder_rid}) for "
                        f"{expires - now:.0f}s more; it renews while alive",
                        source=scope)
                notes.append(f"took over {scope} from pid {pid} on {host} ("
                             + ("process gone" if dead_here else
                                f"expired {now - expires:.0f}s ago") + ")")
            for scope in self.scopes:
                db.execute("INSERT OR REPLACE INTO leases(scope, rollout_id, pid, hostname, token,"
                           " acquired_at, expires_at) VALUES (?,?,?,?,?,?,?)",
                           (scope, self.rid, os.getpid(), me, self.token, now, now + self.ttl_s))
        self.journal.event(self.rid, "lease", {"acquired": self.scopes, "pid": os.getpid(),
                                               "host": me, "ttl_s": self.ttl_s, "notes": notes})
        return notes

    def renew(self) -> bool:
        with self.journal.tx() as db:
            n = 0
            for scope in self.scopes:
                n += db.execute("UPDATE leases SET expires_at=? WHERE scope=? AND token=?",
                                (time.time() + self.ttl_s, scope, self.token)).rowcount
        return n == len(self.scopes)

    def start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(self.ttl_s / 3):
                try:
                    if not self.renew():
                        self.lost.set()
                        return
                except Exception:  # a locked DB for 30s: count as lost, the engine stops safely
                    self.lost.set()
                    return

        self._thread = threading.Thread(target=beat, name="lease-heartbeat", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self.journal.tx() as db:
            for scope in self.scopes:
                db.execute("DELETE FROM leases WHERE scope=? AND token=?", (scope, self.token))


def holder(journal: Journal, scope: str) -> dict[str, object] | None:
    rows = journal.query("SELECT rollout_id, pid, hostname, expires_at FROM leases WHERE scope=?",
                         (scope,))
    if not rows:
        return None
    rid, pid, host, expires = rows[0]
    alive = expires > time.time() and not (host == os.uname().nodename and not pid_alive(pid))
    return {"rollout": rid, "pid": pid, "host": host, "expires_at": expires, "alive": alive}
