"""ansible-lint's production profile over every role and playbook, as part of the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_roles_and_playbooks_pass_ansible_lint_production() -> None:
    bindir = Path(sys.executable).parent
    proc = subprocess.run(
        [str(bindir / "ansible-lint"), "--profile", "production", "--offline",
         "roles", "playbooks"],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}", "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in proc.stdout + proc.stderr
