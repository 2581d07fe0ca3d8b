"""Shared fixtures: a tiny randomly initialised BERT saved as an HF folder, small configs."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_AGNEWS = REPO.parent / "shared" / "datasets" / "agnews"
VENV_BIN = Path(sys.executable).parent


def load_benchmark_script(name: str):
    """benchmarks/<name>.py as a module (the scripts are not a package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"{name}_script", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def save_tiny_bert(path: Path, hidden: int) -> str:
    """A randomly initialised 2-layer BertForMaskedLM with the MiniLM tokenizer, saved as an
    HF folder: seconds to build, no download."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from fedml_fes.models import resolve_model_path
    from fedml_fes.config import OFFLINE_MINILM

    tok = AutoTokenizer.from_pretrained(resolve_model_path(OFFLINE_MINILM))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=2 * hidden, max_position_embeddings=128)
    BertForMaskedLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """2 layers, hidden 32."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), hidden=32)


def small_config(tmp_path: Path, model_dir: str, **sections) -> dict:
    """A FedCLS job on BBC News small enough for seconds on 2 cores."""
    raw = {
        "common_args": {"output_dir": str(tmp_path / "runs"), "torch_threads": 1, "random_seed": 0},
        "data_args": {"dataset": "bbc_news", "client_num_in_total": 8, "gold_labels": 32,
                      "gold_sparsity": 100, "max_test_examples": 60, "max_train_examples": 400},
        "model_args": {"model": model_dir, "max_seq_length": 32},
        "train_args": {"method": "fedcls", "comm_round": 3, "client_num_per_round": 3, "batch_size": 4,
                       "learning_rate": 0.001},
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
    """A HOME that must stay empty: runs write only into their run directory."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home
