"""Write files so that readers never see half of one: write a temp file, then rename.

An interrupted export (Ctrl-C, a full disk, a bad row found late) leaves the previous file
or no file at all, never a truncated h5/CSV/PNG that a later run would trust.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(target: str | Path, copy_existing: bool = False) -> Iterator[Path]:
    """Yield a temp path next to `target`; on success it replaces `target` in one rename.

    `copy_existing` starts the temp file as a copy of `target` (to add to an h5 file that
    holds other partitions). On any exception the temp file is removed.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, target.stat().st_mode & 0o777 if target.is_file() else 0o666 & ~_umask())
    try:
        if copy_existing and target.is_file():
            shutil.copyfile(target, tmp)
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
