"""Acting as another local user in tests (the kernel store's trust checks, for real): uid and gid
65534 (``nobody``), which a test running as root can become in a forked child."""

from __future__ import annotations

import os
from collections.abc import Callable

#: The uid and gid of the other user.
NOBODY = 65534


def as_nobody(act: Callable[[], object]) -> None:
    """Run ``act()`` in a forked child that has become uid and gid :data:`NOBODY`; fail if it fails."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            act()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the other user's planting failed"
