"""A second Journal in the same process must not cost the first one its SQLite locks.

POSIX drops every fcntl lock a process holds on a file when any descriptor of that process on
the file is closed. The journal used to open and close its database file (to create it 0600)
on every open: a controller that opened a second Journal (its progress follower does) lost its
locks, another process then took itself for the last connection, checkpointed and removed the
WAL, and every transition the controller wrote afterwards went into a deleted file. Seen in the
lab as a rollout whose controller ran its batch and gates while its journal showed none of it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fleetgate.rollout.journal import Journal

OTHER_WRITER = """
import sys
from fleetgate.rollout.journal import Journal
j = Journal(__import__("pathlib").Path(sys.argv[1]))
j.event("r1", "note", {"by": "other process"})
j.close()
"""


def test_a_second_journal_in_one_process_keeps_the_first_ones_writes_visible(
        tmp_path: Path) -> None:
    path = tmp_path / "state" / "journal.db"
    first = Journal(path)
    first.event("r1", "note", {"n": 1})
    second = Journal(path)  # what the controller's progress follower does
    subprocess.run([sys.executable, "-c", OTHER_WRITER, str(path)], check=True,
                   stdin=subprocess.DEVNULL)
    first.event("r1", "note", {"n": 2})
    # A fresh process reads what the first handle wrote after all that.
    seen = subprocess.run(
        [sys.executable, "-c", "import sys, sqlite3; print(sqlite3.connect(sys.argv[1])"
         ".execute(\"SELECT count(*) FROM events WHERE kind='note'\").fetchone()[0])",
         str(path)], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
    assert seen.stdout.strip() == "3"
    second.close()
    first.close()
