"""Every use the TensorBoard tracker makes of tensorboardX's private names, in one module.

A resumed run marks where it restarts (a `SessionLog.START` event at its first new step,
so TensorBoard drops what a crash left past it); `SummaryWriter` writes raw events only
through the file writer it makes in `_get_file_writer`. The name is in `PRIVATE_NAMES`; the
suite checks an installed tensorboardX still has it (tests/test_private_names.py; skipped
without the `tensorboard` extra) and that no other module reaches into its privates.
"""

from __future__ import annotations

from typing import Any

#: (owner, name): the private names used below.
PRIVATE_NAMES = (("tensorboardX.SummaryWriter", "_get_file_writer"),)


def file_writer(writer: Any) -> Any:
    """The event file writer of a `tensorboardX.SummaryWriter` (made if it has none yet)."""
    return writer._get_file_writer()
