"""Shell scripts in a private mount namespace, where a test may mount a small tmpfs (a disk
that fills up, or one mounted read-only) that no other process sees and that vanishes with
the script: `unshare --map-root-user --mount`. Where the system allows no such namespace
(no `unshare`, user namespaces turned off), `available()` is False and the tests that need
one fall back or skip, saying why.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys


@functools.cache
def available() -> bool:
    """Whether a script here can mount a tmpfs of its own."""
    if shutil.which("unshare") is None or not sys.platform.startswith("linux"):
        return False
    probe = run(
        'D=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$D" && umount "$D" && rmdir "$D"',
        timeout=30,
    )
    return probe.returncode == 0


def run(
    script: str, *, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`script` (bash, `set -u`) in a new user and mount namespace, as its root."""
    return subprocess.run(
        ["unshare", "--map-root-user", "--mount", "bash", "-uc", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else dict(os.environ),
    )
