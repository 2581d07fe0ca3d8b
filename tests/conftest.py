"""Shared fixtures: a tiny randomly initialised BERT saved as an HF folder, small configs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_AGNEWS = REPO.parent / "shared" / "datasets" / "agnews"
VENV_BIN = Path(sys.executable).parent

# One compute thread per process, this one and every process a test starts (they inherit it):
# tests run processes side by side (three workers, a server beside its silos), and OpenMP threads
# spin while they wait for a core another process holds. The demo test on a 2-core float32 CPU
# beside one busy process: 175 s of CPU with torch's default two threads, 76 s with one.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)

# One temporary directory for every process the tests start, removed when the test session ends.
# Tests stop and kill silos, ranks and runs on purpose, and a process ended by a signal keeps the
# folders wandb (imported by FedML) makes at import (plugins/adapters/hard_exit.py): about 90 of
# them were left in /tmp by each full run of the suite. The first process to load this file
# (pytest's main process) makes the directory, keeps its own temporary directory (read before
# TMPDIR changes) and removes it at the end; its xdist workers and every process a test starts
# inherit TMPDIR. pytest's tmp_path folders stay where they were (the workers get their base from
# the main process).
_ORIGINAL_TMP = tempfile.gettempdir()
_SUITE_TMP_VAR = "FEDML_FES_TEST_TMPDIR"
_OWN_SUITE_TMP = _SUITE_TMP_VAR not in os.environ
if _OWN_SUITE_TMP:
    os.environ[_SUITE_TMP_VAR] = tempfile.mkdtemp(prefix="fes-", dir=_ORIGINAL_TMP)
os.environ["TMPDIR"] = os.environ[_SUITE_TMP_VAR]


def pytest_unconfigure(config) -> None:
    if _OWN_SUITE_TMP:
        shutil.rmtree(os.environ[_SUITE_TMP_VAR], ignore_errors=True)


def pytest_collection_modifyitems(config, items) -> None:
    """Slow tests first (each 10-130 s, most of the suite's time): with `--maxschedchunk 1`
    (setup.cfg) the workers take them one at a time, longest work first, and the fast tests fill
    in at the end, so no worker sits idle while another finishes a long test."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def load_benchmark_script(name: str):
    """benchmarks/<name>.py as a module (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_script", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def save_tiny_bert(path: Path, hidden: int) -> str:
    """A randomly initialised 2-layer BertForMaskedLM with the MiniLM tokenizer, saved as an
    HF folder: seconds to build, no download."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from fedml_fes.config import OFFLINE_MINILM
    from fedml_fes.model_files import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path(OFFLINE_MINILM))
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=128,
    )
    BertForMaskedLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def save_tiny_llama(path: Path, layers: int = 3, hidden: int = 32) -> str:
    """A randomly initialised Llama-architecture causal LM (no biases, tied head) with the MiniLM
    tokenizer, saved as an HF folder: the causal prompt path without a download."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from fedml_fes.config import OFFLINE_MINILM
    from fedml_fes.model_files import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path(OFFLINE_MINILM))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def save_tiny_gguf(path: Path):
    """A randomly initialised 2-layer Llama written as a float32 GGUF file (byte-level BPE
    tokenizer, q/k rows permuted as llama.cpp's converter does); returns (path, the model)."""
    import gguf
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    def permute(w, heads):
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    tokens = list(bytes_to_unicode().values()) + ["he", "<|endoftext|>"]
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tokens),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
    )
    model = LlamaForCausalLM(cfg).eval()
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges(["h e"])
    for add in (w.add_eos_token_id, w.add_bos_token_id, w.add_pad_token_id):
        add(len(tokens) - 1)
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    names = {
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
    }
    for i in range(2):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], 4))
        w.add_tensor(f"blk.{i}.attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], 2))
        for ours, theirs in names.items():
            w.add_tensor(f"blk.{i}.{ours}.weight", sd[p + theirs + ".weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, model


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> str:
    """3 Llama layers, hidden 32."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """2 layers, hidden 32."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), hidden=32)


def small_config(tmp_path: Path, model_dir: str, **sections) -> dict:
    """A FedCLS job on BBC News small enough for seconds on 2 cores."""
    raw = {
        "common_args": {"output_dir": str(tmp_path / "runs"), "torch_threads": 1, "random_seed": 0},
        "data_args": {
            "dataset": "bbc_news",
            "client_num_in_total": 8,
            "gold_labels": 32,
            "gold_sparsity": 100,
            "max_test_examples": 60,
            "max_train_examples": 400,
        },
        "model_args": {"model": model_dir, "max_seq_length": 32},
        # the tiny model as FeS's filtering proxy (mean pooling): 0.2 s for a run's pools instead
        # of 5 s with the packaged MiniLM, which test_fes.py's own proxy test loads
        "filter_args": {"proxy_model": model_dir},
        "train_args": {
            "method": "fedcls",
            "comm_round": 3,
            "client_num_per_round": 3,
            "batch_size": 4,
            "learning_rate": 0.001,
        },
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return raw


def write_config(path: Path, raw: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(raw))
    return path


FAULTS_DIR = Path(__file__).resolve().parent / "faults"


@pytest.fixture
def faults(monkeypatch):
    """Inject a test fault (tests/faults: raise_in_round, raise_on_client, stall_in_round,
    stall_on_rank, stall_s) into this process and every Python process the test starts; the
    product has no fault switch."""
    monkeypatch.syspath_prepend(str(FAULTS_DIR))

    def inject(**spec) -> None:
        import json

        from tests_faults_install import install, uninstall

        monkeypatch.setenv("FES_TEST_FAULTS", json.dumps(spec))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAULTS_DIR), os.environ.get("PYTHONPATH")])))
        install(spec)
        inject.undo = uninstall

    yield inject
    if hasattr(inject, "undo"):
        inject.undo()


@pytest.fixture
def clean_home(tmp_path, monkeypatch) -> Path:
    """A HOME that must stay empty: runs write only into their run directory (and fedml-fes's
    own cache folder, the prepared models and the figures' font list, which its variable
    puts outside this HOME)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("FEDML_FES_CACHE", str(tmp_path / "fedml_fes_cache"))
    return home


def start_cross_silo_node(cf: Path, role: str, rank: int, run_dir: Path, log: Path, *extra: str):
    """One `fedml_fes_plugins.cross_silo.main` process (server or silo), output appended to `log`,
    one torch thread: what the cross-silo integration and link tests start."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-W", "ignore", "-m", "fedml_fes_plugins.cross_silo.main", "--cf", str(cf)]
    cmd += ["--role", role, "--rank", str(rank), "--run-dir", str(run_dir), *extra]
    with log.open("a") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )


LOCK_HOLDER = """
import sys, time
from fedml_fes.runtime.rundir import lock_run_dir
lock_run_dir(sys.argv[1])
print("locked", flush=True)
time.sleep(300)
"""


def start_lock_holder(run_dir, env: dict | None = None) -> subprocess.Popen:
    """Another process that locks `run_dir` as a live run does (prints "locked" once it holds
    it) and sleeps; kill it to end the 'run'."""
    return subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def hold_lock(run_dir) -> subprocess.Popen:
    """start_lock_holder, returned once it holds the lock."""
    proc = start_lock_holder(run_dir)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def cli_here(capsys, *args: str) -> subprocess.CompletedProcess:
    """The fedml-fes command's `main` in this process, for cases where the process itself is not
    under test: a process start imports torch and FedML again (~10 s). The program's own exits,
    one-line errors and signals are tested through real processes. A run directory the call
    locked is released, so a later call in this process may use it again."""
    from fedml_fes.runtime.rundir import release_run_dir
    from fedml_fes_plugins.cli.main import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse: --help, usage errors
        code = e.code
    out = capsys.readouterr()
    if "--run-dir" in args:
        release_run_dir(args[args.index("--run-dir") + 1])
    return subprocess.CompletedProcess(list(args), code, out.out, out.err)
