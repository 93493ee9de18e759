"""SSH signatures for plan artifacts and approvals, made and checked by `ssh-keygen -Y`.

A signature says which key vouched for a file, and the site's allowed_signers (the format
git and OpenSSH use) says which keys count and under which principal. Each use has its own
namespace, so an approval's signature can never pass for an artifact's or the other way
round. Everything goes through files and argv lists, never a shell; ssh-keygen gets no
inherited stdin (it would block on a prompt, and ssh tools leave an inherited stdin
non-blocking), except for the exact bytes it verifies.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput, ToolError
from fleetgate.system.procs import require_tool

ARTIFACT_NAMESPACE = "fleetgate-plan"
APPROVAL_NAMESPACE = "fleetgate-approve"
# Long enough for an operator to type a key's passphrase (ssh-keygen asks on the terminal).
TIMEOUT_S = 120
_FINGERPRINT_RE = re.compile(r" key (SHA256:[A-Za-z0-9+/=]+)")


@dataclass(frozen=True)
class Signer:
    """Who signed: the allowed_signers principal and the key's fingerprint."""

    principal: str
    fingerprint: str

    def __str__(self) -> str:
        return f"{self.principal} ({self.fingerprint})"


def signature_path(path: Path) -> Path:
    return path.with_name(path.name + ".sig")


def approval_message(rid: str, wave: int, reason: str, signed_at: str) -> bytes:
    """What an approval's signature covers: every field, one per line, so none can change."""
    if any(c in reason for c in "\r\n"):
        raise BadInput("an approval's reason is one line", source="--reason")
    return f"fleetgate-approve\n{rid}\n{wave}\n{reason}\n{signed_at}\n".encode()


def _keygen(args: list[str], *, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    argv = [require_tool("ssh-keygen", "openssh-client"), *args]
    try:
        raw = subprocess.run(argv, input=stdin,
                             stdin=subprocess.DEVNULL if stdin is None else None,
                             capture_output=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ToolError(f"timed out after {TIMEOUT_S}s", source="ssh-keygen",
                        field=" ".join(args[:2])) from None
    except OSError as exc:
        raise ToolError(f"cannot run: {exc.strerror}", source="ssh-keygen") from None
    return subprocess.CompletedProcess(argv, raw.returncode, raw.stdout.decode(errors="replace"),
                                       raw.stderr.decode(errors="replace"))


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}"


def sign(data: bytes, key: Path, namespace: str, *, source: str = "--key") -> str:
    """The armored signature of `data` by `key` (a private key, or a public one whose private
    half is in ssh-agent)."""
    if not key.is_file():
        raise BadInput("no such key file", source=source, field=str(key))
    with tempfile.TemporaryDirectory(prefix="fleetgate-sign-") as tmp:
        message = Path(tmp) / "message"
        message.write_bytes(data)
        proc = _keygen(["-Y", "sign", "-n", namespace, "-f", str(key), str(message)])
        sig = signature_path(message)
        if proc.returncode != 0 or not sig.is_file():
            raise BadInput(f"ssh-keygen cannot sign with it: {_last_line(proc)}", source=source,
                           field=str(key))
        return sig.read_text()


def verify(data: bytes, signature: str, allowed_signers: Path, namespace: str, *,
           source: str | Path) -> Signer:
    """The principal and key that signed `data`, if allowed_signers lets that key sign in
    `namespace`; anything else is BadInput (nothing runs on an unproven signature)."""
    if not allowed_signers.is_file():
        raise BadInput("no such allowed_signers file", source=allowed_signers,
                       field="security.allowed_signers")
    with tempfile.TemporaryDirectory(prefix="fleetgate-verify-") as tmp:
        sig = Path(tmp) / "message.sig"
        sig.write_text(signature)
        found = _keygen(["-Y", "find-principals", "-s", str(sig), "-f", str(allowed_signers)])
        principals = found.stdout.split() if found.returncode == 0 else []
        if not principals:
            # ssh-keygen says "No principal matched" for garbage too, after why it is garbage.
            garbled = "Couldn't parse signature" in found.stderr
            raise BadInput("not an SSH signature" if garbled
                           else f"signed by a key that is not in {allowed_signers}",
                           source=source, field="signature")
        why = ""
        for principal in principals:
            proc = _keygen(["-Y", "verify", "-f", str(allowed_signers), "-I", principal,
                            "-n", namespace, "-s", str(sig)], stdin=data)
            m = _FINGERPRINT_RE.search(proc.stdout)
            if proc.returncode == 0 and m:
                return Signer(principal, m.group(1))
            why = _last_line(proc)
    raise BadInput(f"the signature does not verify ({why}): the file changed after signing, "
                   f"or the key may not sign {namespace}", source=source, field="signature")


def recorded_approval(rid: str, wave: int, data: dict[str, Any], allowed_signers: Path
                      ) -> Signer:
    """Re-verify an approval as the journal recorded it (its reason and proof). The controller
    calls this where signed approvals are required, so a row written into journal.db by hand,
    or one whose reason was edited afterwards, opens no wave."""
    proof = data.get("proof")
    if not isinstance(proof, dict) or not all(
            isinstance(proof.get(k), str) for k in ("signature", "signed_at")):
        raise BadInput("the approval carries no signature", source=f"journal ({rid})",
                       field=f"wave {wave}")
    message = approval_message(rid, wave, str(data.get("reason", "")), proof["signed_at"])
    return verify(message, proof["signature"], allowed_signers, APPROVAL_NAMESPACE,
                  source=f"journal ({rid})")
