"""The rollout journal: one SQLite database in WAL mode under the state dir.

It is the controller's memory across crashes. Every host and rollout transition is committed
*before* the action it starts and again with the action's result; every ansible-runner event
and smoke verdict is kept, so `rollout history` replays a rollout and `rollout resume` knows
exactly which hosts were in flight. Several processes write to it (the controller, its batch
workers, `approve`/`abort` from an operator's shell): WAL lets readers run beside one writer,
and the busy timeout serialises writers.

The database is 0600 in 0700 directories (it holds every host's failure output), and every
event and reason passes the redactor first (runner/redact.py), so a secret var's value or a
`password=...` in a task's message never reaches it.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, get_args

from fleetgate.errors import BadInput
from fleetgate.inputs import file_kind
from fleetgate.runner import redact
from fleetgate.runner.private_state import make_private, private_dirs, private_state_dir

SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts(
  id TEXT PRIMARY KEY, name TEXT NOT NULL, inventory TEXT NOT NULL, artifact TEXT NOT NULL,
  state TEXT NOT NULL, wave INTEGER NOT NULL DEFAULT 0, phase TEXT NOT NULL DEFAULT '',
  reason TEXT NOT NULL DEFAULT '', resumable INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS hosts(
  rollout_id TEXT NOT NULL, host TEXT NOT NULL, wave INTEGER NOT NULL, state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '', applies INTEGER NOT NULL DEFAULT 0,
  updated_at REAL NOT NULL, PRIMARY KEY(rollout_id, host));
CREATE TABLE IF NOT EXISTS events(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, rollout_id TEXT NOT NULL, ts REAL NOT NULL,
  kind TEXT NOT NULL, host TEXT, wave INTEGER, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_rollout ON events(rollout_id, seq);
CREATE INDEX IF NOT EXISTS events_by_host ON events(rollout_id, host, kind);
CREATE INDEX IF NOT EXISTS events_by_kind ON events(rollout_id, kind, seq);
CREATE INDEX IF NOT EXISTS hosts_by_wave ON hosts(rollout_id, wave, host);
CREATE TABLE IF NOT EXISTS batches(
  id TEXT PRIMARY KEY, rollout_id TEXT NOT NULL, wave INTEGER NOT NULL, kind TEXT NOT NULL,
  hosts TEXT NOT NULL, dir TEXT NOT NULL, state TEXT NOT NULL, pid INTEGER,
  started_at REAL NOT NULL, finished_at REAL);
CREATE INDEX IF NOT EXISTS batches_by_state ON batches(rollout_id, state, started_at);
CREATE TABLE IF NOT EXISTS requests(
  id INTEGER PRIMARY KEY AUTOINCREMENT, rollout_id TEXT NOT NULL, kind TEXT NOT NULL,
  wave INTEGER, reason TEXT NOT NULL, by TEXT NOT NULL, ts REAL NOT NULL);
CREATE TABLE IF NOT EXISTS leases(
  scope TEXT PRIMARY KEY, rollout_id TEXT NOT NULL, pid INTEGER NOT NULL,
  hostname TEXT NOT NULL, token TEXT NOT NULL, acquired_at REAL NOT NULL,
  expires_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS requests_by_kind ON requests(rollout_id, kind, id);
"""

ROLLOUT_STATES = ("planned", "running", "soaking", "completed", "halted", "aborted")
TERMINAL_ROLLOUT = ("completed", "halted", "aborted")
HostState = Literal["pending", "draining", "applying", "verifying", "rolling_back", "healthy",
                    "failed_held", "rolled_back", "drain_failed", "skipped"]
HOST_STATES: tuple[HostState, ...] = get_args(HostState)
IN_FLIGHT: tuple[HostState, ...] = ("draining", "applying", "verifying", "rolling_back")
TERMINAL_HOST: tuple[HostState, ...] = ("healthy", "failed_held", "rolled_back", "drain_failed",
                                         "skipped")
# drain_failed: the host could not be taken out of service, so nothing was applied; it counts
# against the budget like any failure, and its reason says where the scheduler left the node.
FAILED_HOST: tuple[HostState, ...] = ("failed_held", "rolled_back", "drain_failed")


def host_state(text: str) -> HostState:
    """A state read back from the journal: one of HOST_STATES, or the journal is corrupt."""
    for s in HOST_STATES:
        if s == text:
            return s
    raise ValueError(f"journal holds an unknown host state {text!r}")


def _account() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry (a container)
        return str(os.getuid())


def default_path() -> Path:
    return private_state_dir() / "rollouts" / "journal.db"


def _open_private(path: Path) -> None:
    """The database file made 0600 before SQLite opens it: SQLite creates its -wal and -shm
    files with the database's mode. A journal from before this rule is made private once."""
    private_dirs(path.parent)
    # Create it only if it is missing. Never open and close an existing journal behind
    # SQLite's back: POSIX drops every fcntl lock a process holds on a file when any of its
    # descriptors on that file is closed, so another Journal of this process (the
    # controller's, while `start` opens a second) would silently lose its locks, and writes
    # from two processes would overwrite each other (seen: a controller's transitions gone).
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if p.exists():
            make_private(p)


# A rollout's id, the journal's key: it also names the rollout's directory and reaches
# command lines, so it is checked wherever one comes in.
ROLLOUT_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{2,80}$")


def check_id(rid: str) -> str:
    if not ROLLOUT_ID_RE.fullmatch(rid):
        raise BadInput("a rollout id is lower-case letters, digits and dashes", source="ID",
                       field=repr(rid))
    return rid

@dataclass(frozen=True)
class RolloutRow:
    id: str
    name: str
    inventory: str
    artifact: dict[str, Any]
    state: str
    wave: int
    phase: str
    reason: str
    resumable: bool
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class HostRow:
    host: str
    wave: int
    state: HostState
    reason: str
    applies: int
    updated_at: float


@functools.cache
def _schema_columns() -> dict[str, set[str]]:
    """Every table of SCHEMA and its columns, as SQLite itself reads SCHEMA."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.executescript(SCHEMA)
        tables = [r[0] for r in mem.execute("SELECT name FROM sqlite_master WHERE type='table'"
                                            " AND name NOT LIKE 'sqlite_%'")]
        return {t: {r[1] for r in mem.execute(f"PRAGMA table_info({t})")} for t in tables}
    finally:
        mem.close()


def _not_ours(db: sqlite3.Connection) -> str | None:
    """Why the database `db` is not a fleetgate journal, or None if it is one (or is empty:
    a journal whose first open stopped before its tables were made)."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'"
                                       " AND name NOT LIKE 'sqlite_%'")}
    if tables and "rollouts" not in tables:
        shown = ", ".join(sorted(tables)[:5])
        return f"its tables ({shown}) are not a journal's; a database of something else"
    for table, columns in _schema_columns().items():
        if table not in tables:
            continue  # an older journal: CREATE TABLE IF NOT EXISTS adds it
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        if not columns <= have:
            missing = ", ".join(sorted(columns - have))
            return (f"its table {table} has no column {missing}; a database of something "
                    "else, or of another version")
    return None


def _check_existing(path: Path) -> str | None:
    """An existing file's schema, read through a read-only connection before anything is
    written to it or chmodded: a database of another program is refused as it was found.
    Reading a WAL database read-only makes its -wal and -shm files when they are missing;
    ones made here for a database that is then refused are removed again."""
    sidecars = [path.with_name(path.name + s) for s in ("-wal", "-shm")]
    before = {p for p in sidecars if p.exists()}
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            why = _not_ours(db)
        finally:
            db.close()
    except sqlite3.Error as exc:
        why = str(exc)
    if why is not None:
        for p in sidecars:
            # The -shm index is rebuilt by whoever opens next; a -wal we made holds nothing.
            if p not in before and p.exists() and (p.name.endswith("-shm")
                                                   or p.stat().st_size == 0):
                p.unlink()
    return why


def _connect(path: Path) -> sqlite3.Connection:
    """The journal database, opened and checked; anything that is not one is one line of
    BadInput (exit 2), never an sqlite3 traceback. A FIFO or device in its place is refused
    before SQLite opens it (reading one would block forever), and an existing file that is
    not a journal before it is changed in any way."""
    def not_a_journal(why: object) -> BadInput:
        return BadInput(f"not a fleetgate journal ({' '.join(str(why).split())})", source=path)

    try:
        if path.exists():
            if not path.is_file():
                raise not_a_journal(file_kind(path.stat().st_mode))
            if (why := _check_existing(path)) is not None:
                raise not_a_journal(why)
        _open_private(path)
        # isolation_level=None: we open transactions ourselves (BEGIN IMMEDIATE), so a
        # read-then-write (the lease) cannot interleave with another process's write.
        db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    except OSError as exc:
        raise BadInput(f"cannot open the journal: {exc.strerror or exc}", source=path) from None
    except sqlite3.Error as exc:
        raise not_a_journal(exc) from None
    try:
        db.execute("PRAGMA journal_mode=WAL")
        # FULL: a transition the controller acted on must survive a power cut, not just a crash.
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=30000")
        db.executescript(SCHEMA)
        if (why := _not_ours(db)) is not None:  # changed since the read-only look
            raise not_a_journal(why)
    except sqlite3.Error as exc:
        db.close()
        raise not_a_journal(exc) from None
    except BadInput:
        db.close()
        raise
    return db


class Watcher(Protocol):
    """Kept in step with an owned rollout's host rows (budgets.Tally): `reset` with every row
    when the rollout is owned, `move` with each row's old and new value after every write
    that changed it has committed."""

    def reset(self, rows: Mapping[str, HostRow]) -> None: ...

    def move(self, old: HostRow, new: HostRow) -> None: ...


class Journal:
    def __init__(self, path: Path | None = None):
        self.path = path or default_path()
        self._lock = threading.RLock()
        # Called after each committed event written through this handle (metrics file,
        # webhooks): listeners see only what is already durable.
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        self._pending: list[dict[str, Any]] = []
        # Rollout id -> its host rows, for a rollout this process owns (own()).
        self._owned: dict[str, dict[str, HostRow]] = {}
        self._watchers: dict[str, Watcher] = {}
        # Rollout id -> (wave, state, phase, reason, resumable) of its row, likewise.
        self._owned_rollout: dict[str, tuple[int, str, str, str, bool]] = {}
        self._db = _connect(self.path)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                self._pending.clear()
                raise
            self._db.execute("COMMIT")
            done, self._pending = self._pending, []
        for event in done:
            for listener in list(self.listeners):
                try:
                    listener(event)
                except Exception as exc:  # a metrics/webhook failure must not stop a rollout
                    self._listener_error(event, exc)

    def _listener_error(self, event: dict[str, Any], exc: Exception) -> None:
        error = redact.text(f"{type(exc).__name__}: {exc}")[:500]
        with self._lock:
            self._db.execute("INSERT INTO events(rollout_id, ts, kind, host, wave, data)"
                             " VALUES (?,?,?,?,?,?)",
                             (event["rollout_id"], time.time(), "listener_error", None, None,
                              json.dumps({"error": error,
                                          "on": event["kind"]})))

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._db.execute(sql, args).fetchall())

    # ---------------------------------------------------------------------------- rollouts

    def create_rollout(self, rid: str, name: str, inventory: str, artifact: dict[str, Any],
                       waves: list[list[str]]) -> None:
        now = time.time()
        with self.tx() as db:
            db.execute("INSERT INTO rollouts(id, name, inventory, artifact, state, created_at,"
                       " updated_at) VALUES (?,?,?,?,?,?,?)",
                       (rid, name, inventory, json.dumps(artifact), "planned", now, now))
            for k, members in enumerate(waves, start=1):
                for h in members:
                    db.execute("INSERT INTO hosts(rollout_id, host, wave, state, updated_at)"
                               " VALUES (?,?,?,?,?)", (rid, h, k, "pending", now))
            self._event(db, rid, "rollout", None, 0, {"state": "planned"})

    def rollout(self, rid: str) -> RolloutRow | None:
        rows = self.query("SELECT id, name, inventory, artifact, state, wave, phase, reason,"
                          " resumable, created_at, updated_at FROM rollouts WHERE id=?", (rid,))
        if not rows:
            return None
        r = rows[0]
        return RolloutRow(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6], r[7],
                          bool(r[8]), r[9], r[10])

    def rollouts(self) -> list[RolloutRow]:
        ids = [r[0] for r in self.query("SELECT id FROM rollouts ORDER BY created_at")]
        return [r for r in (self.rollout(i) for i in ids) if r is not None]

    def set_rollout(self, rid: str, state: str, *, wave: int | None = None, phase: str = "",
                    reason: str = "", resumable: bool = False, **data: Any) -> None:
        assert state in ROLLOUT_STATES, state
        with self.tx() as db:
            # The row holds the plan artifact (megabytes at 100,000 hosts) before these
            # columns: reading them reads through it, so an owner reads its own copy.
            cur = self._owned_rollout.get(rid) or self._rollout_fields(db, rid)
            w = cur[0] if cur is not None and wave is None else (wave or 0)
            phase, reason = redact.text(phase), redact.text(reason)
            now = (w, state, phase, reason, resumable)
            # SQLite rewrites a whole row on UPDATE: a call that changes nothing in it (the
            # next batch of the same wave and phase) writes only its event, which says when
            # and which batch.
            if cur != now:
                db.execute("UPDATE rollouts SET state=?, wave=?, phase=?, reason=?,"
                           " resumable=?, updated_at=? WHERE id=?",
                           (state, w, phase, reason, int(resumable), time.time(), rid))
            self._event(db, rid, "rollout", None, w, {"state": state, "phase": phase,
                                                      "reason": reason, **data})
        if rid in self._owned_rollout:  # after COMMIT, as the host rows' copy
            with self._lock:
                self._owned_rollout[rid] = now

    @staticmethod
    def _rollout_fields(db: sqlite3.Connection, rid: str
                        ) -> tuple[int, str, str, str, bool] | None:
        r = db.execute("SELECT wave, state, phase, reason, resumable FROM rollouts WHERE id=?",
                       (rid,)).fetchone()
        return None if r is None else (r[0], r[1], r[2], r[3], bool(r[4]))

    # ------------------------------------------------------------------------------- hosts

    def hosts(self, rid: str) -> dict[str, HostRow]:
        with self._lock:
            owned = self._owned.get(rid)
            if owned is not None:
                return dict(owned)
        return self._read_hosts(rid)

    def _read_hosts(self, rid: str) -> dict[str, HostRow]:
        return {r[0]: HostRow(r[0], r[1], host_state(r[2]), *r[3:]) for r in self.query(
            "SELECT host, wave, state, reason, applies, updated_at FROM hosts"
            " WHERE rollout_id=? ORDER BY wave, host", (rid,))}

    def own(self, rid: str, watcher: Watcher | None = None) -> None:
        """This process holds the rollout's lease (rollout/lease.py), so only it writes the
        rollout's host rows from now on: keep them in memory, updated as each of its writes
        commits, and answer hosts() from there. The controller reads every row several times
        per batch (budgets, the next batch, safe points); from the database that is
        O(hosts x batches), for 10,000 hosts in batches of 100 about five million row reads.
        The database stays the record: every write still goes there first. `watcher` (the
        controller's budget counters) is reset from these rows and moved with every write."""
        with self._lock:
            rows = self._read_hosts(rid)
            self._owned[rid] = rows
            fields = self._rollout_fields(self._db, rid)
            if fields is not None:
                self._owned_rollout[rid] = fields
            self._watchers.pop(rid, None)
            if watcher is not None:
                watcher.reset(rows)
                self._watchers[rid] = watcher

    def disown(self, rid: str) -> None:
        """The lease is released (or lost): read from the database again."""
        with self._lock:
            self._owned.pop(rid, None)
            self._watchers.pop(rid, None)
            self._owned_rollout.pop(rid, None)

    def host(self, rid: str, host: str) -> HostRow | None:
        """One host's row: from the owned copy without copying it (hosts() copies every row),
        else from the database."""
        with self._lock:
            owned = self._owned.get(rid)
            if owned is not None:
                return owned.get(host)
        rows = self.query("SELECT host, wave, state, reason, applies, updated_at FROM hosts"
                          " WHERE rollout_id=? AND host=?", (rid, host))
        return HostRow(rows[0][0], rows[0][1], host_state(rows[0][2]), *rows[0][3:]) if rows \
            else None

    def set_host(self, rid: str, host: str, state: HostState, reason: str = "",
                 **data: Any) -> None:
        self.set_hosts(rid, [host], state, reason, **data)

    def set_hosts(self, rid: str, hosts: list[str], state: HostState,
                  reason: str | Mapping[str, str] = "", **data: Any) -> None:
        """One transition for several hosts, in one transaction (one fsync for a batch).
        `reason`: one for all, or each host's own (host -> reason)."""
        assert state in HOST_STATES, state
        if not hosts:
            return
        now = time.time()
        reasons = ({h: redact.text(reason[h]) for h in hosts} if not isinstance(reason, str)
                   else dict.fromkeys(hosts, redact.text(reason)))
        with self.tx() as db:
            owned = self._owned.get(rid)
            events: list[tuple[str | None, int | None, dict[str, Any]]] = []
            for host in hosts:
                mine = owned.get(host) if owned is not None else None
                row = ((mine.state, mine.wave) if mine is not None else db.execute(
                    "SELECT state, wave FROM hosts WHERE rollout_id=? AND host=?",
                    (rid, host)).fetchone())
                events.append((host, row[1] if row else None,
                               {"from": row[0] if row else None, "to": state,
                                "reason": reasons[host], **data}))
            # One statement for the batch's rows and one for its events (executemany):
            # the same rows and events, in the same order, as one execute per host.
            db.executemany("UPDATE hosts SET state=?, reason=?, updated_at=?"
                           " WHERE rollout_id=? AND host=?",
                           [(state, reasons[h], now, rid, h) for h in hosts])
            self._events(db, rid, "host", events)
        # After COMMIT: a transaction that fails raises above and leaves the copy as the
        # database is.
        self._mirror(rid, hosts, state=state, reasons=reasons, updated_at=now)

    def _mirror(self, rid: str, hosts: list[str], *, applies: int = 0,
                reasons: Mapping[str, str] | None = None, **fields: Any) -> None:
        """The owned copy of these rows, as a write that has just committed left them, and
        the rollout's watcher moved with each."""
        with self._lock:
            owned = self._owned.get(rid)
            if owned is None:
                return
            watcher = self._watchers.get(rid)
            state, when = fields.pop("state", None), fields.pop("updated_at", None)
            assert not fields, fields
            for h in hosts:
                r = owned.get(h)
                if r is not None:
                    new = HostRow(r.host, r.wave, r.state if state is None else state,
                                  r.reason if reasons is None else reasons[h],
                                  r.applies + applies, r.updated_at if when is None else when)
                    owned[h] = new
                    if watcher is not None:
                        watcher.move(r, new)

    # ------------------------------------------------------------------------------ events

    def _event(self, db: sqlite3.Connection, rid: str, kind: str, host: str | None,
               wave: int | None, data: dict[str, Any]) -> None:
        ts = time.time()
        data = redact.data(data)
        cur = db.execute("INSERT INTO events(rollout_id, ts, kind, host, wave, data)"
                         " VALUES (?,?,?,?,?,?)",
                         (rid, ts, kind, host, wave, json.dumps(data, default=str)))
        if self.listeners:
            self._pending.append({"seq": cur.lastrowid, "rollout_id": rid, "ts": ts,
                                  "kind": kind, "host": host, "wave": wave, "data": data})

    def _events(self, db: sqlite3.Connection, rid: str, kind: str,
                items: list[tuple[str | None, int | None, dict[str, Any]]]) -> None:
        """Several events of one kind, (host, wave, data) each, as one INSERT statement run
        for all of them: each is what _event writes, in the same order."""
        if not items:
            return
        ts = time.time()
        rows = [(h, w, redact.data(d)) for h, w, d in items]
        db.executemany("INSERT INTO events(rollout_id, ts, kind, host, wave, data)"
                       " VALUES (?,?,?,?,?,?)",
                       [(rid, ts, kind, h, w, json.dumps(d, default=str)) for h, w, d in rows])
        if self.listeners:
            # Inside this transaction nobody else writes events, so the statement's rows
            # took consecutive seqs ending at the last one inserted.
            last = db.execute("SELECT last_insert_rowid()").fetchone()[0]
            first = last - len(rows) + 1
            self._pending.extend({"seq": first + i, "rollout_id": rid, "ts": ts, "kind": kind,
                                  "host": h, "wave": w, "data": d}
                                 for i, (h, w, d) in enumerate(rows))

    def event(self, rid: str, kind: str, data: dict[str, Any], *, host: str | None = None,
              wave: int | None = None) -> None:
        with self.tx() as db:
            self._event(db, rid, kind, host, wave, data)

    def events_at_once(self, rid: str, kind: str,
                       items: list[tuple[str | None, dict[str, Any]]], *,
                       wave: int | None = None) -> None:
        """Several events of one kind, (host, data) each, in one transaction: one fsync for
        a batch's smoke results or host readings instead of one per host."""
        if not items:
            return
        with self.tx() as db:
            self._events(db, rid, kind, [(host, wave, data) for host, data in items])

    def events(self, rid: str, *, kinds: tuple[str, ...] | None = None,
               after: int = 0, hosts: list[str] | None = None) -> list[dict[str, Any]]:
        """Events in order; `hosts`: only those about these hosts (indexed), so a batch asks
        about its own hosts without reading every host's events."""
        sql = "SELECT seq, ts, kind, host, wave, data FROM events WHERE rollout_id=? AND seq>?"
        args: tuple[Any, ...] = (rid, after)
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            args += kinds
        if hosts is not None:
            if not hosts:
                return []
            # By host: a batch's hosts, not every event of the kind (the planner otherwise
            # takes events_by_kind and reads the whole rollout's events for each batch).
            sql = sql.replace("FROM events", "FROM events INDEXED BY events_by_host")
            sql += f" AND host IN ({','.join('?' * len(hosts))})"
            args += tuple(hosts)
        return [{"seq": r[0], "ts": r[1], "kind": r[2], "host": r[3], "wave": r[4],
                 "data": json.loads(r[5])} for r in self.query(sql + " ORDER BY seq", args)]

    # ----------------------------------------------------------------------------- batches

    def start_batch(self, bid: str, rid: str, wave: int, kind: str, hosts: list[str],
                    bdir: Path, *, node: str | None = None) -> None:
        """`node`: the execution node that runs it (none: this machine)."""
        extra = {"execution_node": node} if node else {}
        with self.tx() as db:
            db.execute("INSERT INTO batches(id, rollout_id, wave, kind, hosts, dir, state,"
                       " started_at) VALUES (?,?,?,?,?,?,?,?)",
                       (bid, rid, wave, kind, json.dumps(hosts), str(bdir), "started",
                        time.time()))
            self._event(db, rid, "batch", None, wave, {"batch": bid, "kind": kind,
                                                       "hosts": hosts, "state": "started",
                                                       **extra})

    def batch_spawned(self, bid: str, rid: str, pid: int, *, ahead: bool = False) -> None:
        """The worker exists: from here on its hosts count one more application. `ahead`:
        its run was started ahead of its turn and released now (rollout/ahead.py)."""
        with self.tx() as db:
            row = db.execute("SELECT kind, hosts, wave, pid FROM batches WHERE id=?",
                             (bid,)).fetchone()
            if row is None or row[3] is not None:
                return
            db.execute("UPDATE batches SET pid=? WHERE id=?", (pid, bid))
            applied = json.loads(row[1]) if row[0] == "apply" else []
            for h in applied:
                db.execute("UPDATE hosts SET applies=applies+1 WHERE rollout_id=? AND host=?",
                           (rid, h))
            self._event(db, rid, "batch", None, row[2], {"batch": bid, "state": "spawned",
                                                         "pid": pid,
                                                         **({"ahead": True} if ahead else {})})
        self._mirror(rid, applied, applies=1)

    def finish_batch(self, bid: str, rid: str, wave: int, summary: dict[str, Any]) -> None:
        with self.tx() as db:
            db.execute("UPDATE batches SET state='done', finished_at=? WHERE id=?",
                       (time.time(), bid))
            self._event(db, rid, "batch", None, wave, {"batch": bid, "state": "done", **summary})

    def open_batches(self, rid: str) -> list[dict[str, Any]]:
        return [{"id": r[0], "wave": r[1], "kind": r[2], "hosts": json.loads(r[3]),
                 "dir": Path(r[4]), "pid": r[5]} for r in self.query(
            "SELECT id, wave, kind, hosts, dir, pid FROM batches WHERE rollout_id=? AND"
            " state='started' ORDER BY started_at", (rid,))]

    # ---------------------------------------------------------------------------- requests

    def request(self, rid: str, kind: str, reason: str, *, wave: int | None = None,
                by: str | None = None, proof: dict[str, Any] | None = None) -> str:
        """Record an operator's request; returns who it is recorded as. `by` is a verified
        signer (`principal (SHA256:…)`, with the signature in `proof`); without one, the
        local account, marked unverified: $USER is whatever the caller's shell says, and even
        the uid only says which account typed the command."""
        by = by or f"{_account()}@{os.uname().nodename} (unverified)"
        with self.tx() as db:
            db.execute("INSERT INTO requests(rollout_id, kind, wave, reason, by, ts)"
                       " VALUES (?,?,?,?,?,?)", (rid, kind, wave, reason, by, time.time()))
            self._event(db, rid, kind, None, wave,
                        {"reason": reason, "by": by, **({"proof": proof} if proof else {})})
        return by

    def requests(self, rid: str, kind: str) -> list[dict[str, Any]]:
        return [{"wave": r[0], "reason": r[1], "by": r[2], "ts": r[3]} for r in self.query(
            "SELECT wave, reason, by, ts FROM requests WHERE rollout_id=? AND kind=?"
            " ORDER BY id", (rid, kind))]
