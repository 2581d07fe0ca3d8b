"""Run `fedml.init()` offline: no cloud calls, nothing written outside the run directory.

FedML 0.9.6's init fetches MLOps configs from open.fedml.ai (5 tries, 0.5 s apart, each
waiting on DNS), reads an NTP offset when logs are set up, and writes `~/.fedml/...`
(an `.env` file, a device id). We skip the config fetch and log setup, and point the home
directory FedML derives its paths from at `<run_dir>/fedml_home` for the duration of init.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def _home(path: Path) -> Iterator[None]:
    """FedML builds its paths from expanduser('~'): redirect it, then restore."""
    path.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("HOME")
    os.environ["HOME"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = old


@contextlib.contextmanager
def _swapped(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Replace one attribute of a FedML module for the duration of a call, then restore it."""
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def contain_s3_cache(home: Path) -> None:
    """FedML 0.9.6 `core/distributed/communication/s3/remote_storage.py:220` (read_model)
    caches every downloaded model under `expanduser("~")/.fedml/fedml_cache`: point that
    module's `expanduser` (imported by name at its line 10) at `home`, so a cross-silo run
    writes inside its run directory without touching the process's HOME."""
    from fedml.core.distributed.communication.s3 import remote_storage

    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)

    def expanduser(path: str) -> str:
        return str(home) + path[1:] if path == "~" or path.startswith("~/") else os.path.expanduser(path)

    remote_storage.expanduser = expanduser


def _offline_fetch_config(args: Any, version: str = "release") -> bool:
    """Stand-in for fedml.core.mlops.fetch_config: sets the same fields, contacts nobody."""
    args.config_version = version
    args.version = version
    args.cloud_region = ""
    return False


def import_fedml():
    """Import fedml quietly (it warns about pkg_resources and urllib3 at import)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import fedml  # noqa: F401
    return fedml


def offline_fedml_init(args: Any, run_dir: Path) -> Any:
    """`fedml.init(args)` with the cloud and home-directory side effects contained."""
    fedml = import_fedml()
    from fedml.core import mlops

    args.using_mlops = False
    args.enable_wandb = False
    with (
        _home(Path(run_dir) / "fedml_home"),
        _swapped(mlops, "fetch_config", _offline_fetch_config),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        return fedml.init(args, check_env=False, should_init_logs=False)
