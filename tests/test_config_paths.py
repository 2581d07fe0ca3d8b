"""Relative paths in a config file resolve against the file's folder; `--set` values against
the current directory; names (HF ids, device profiles) stay names; output_dir stays put."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from fedml_fes.config import (
    INPUT_PATH_KEYS,
    NAME_OR_PATH_KEYS,
    OFFLINE_MINILM,
    config_from_dict,
    load_config,
    read_sections,
)

REPO = Path(__file__).resolve().parents[1]


def _write(path: Path, raw: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw))
    return path


def _elsewhere(tmp_path: Path, monkeypatch) -> Path:
    other = tmp_path / "somewhere" / "else"
    other.mkdir(parents=True)
    monkeypatch.chdir(other)
    return other


def test_file_paths_resolve_against_the_config_folder(tmp_path, monkeypatch):
    conf = tmp_path / "confs"
    cf = _write(
        conf / "run.yaml",
        {
            "common_args": {"output_dir": "runs", "cache_dir": "cache"},
            "data_args": {
                "dataset": "custom",
                "train_file": "data/train.csv",
                "test_file": "./data/test.csv",
                "text_columns": ["text"],
                "label_column": "label",
                "data_dir": "../shared_data",
            },
            "model_args": {"mlm_from": "mlm.yaml"},
            "comm_args": {"mpi_host_file": "../mpi/hosts", "grpc_ipconfig_path": "ip.csv"},
            "cost_args": {"device_dir": "devices", "devices": ["jetson_tx2", "devices/my_board.yaml"]},
        },
    )
    _elsewhere(tmp_path, monkeypatch)
    cfg = load_config(Path("../..") / "confs" / "run.yaml")  # a relative --cf from another directory
    d = cfg.data
    assert d.train_file == str(conf / "data" / "train.csv") and d.test_file == str(conf / "data" / "test.csv")
    assert d.data_dir == str(tmp_path / "shared_data")
    assert cfg.model.mlm_from == str(conf / "mlm.yaml")
    assert cfg.comm.mpi_host_file == str(tmp_path / "mpi" / "hosts")
    assert cfg.comm.grpc_ipconfig_path == str(conf / "ip.csv")
    assert cfg.cost.device_dir == str(conf / "devices")
    assert cfg.cost.devices == ["jetson_tx2", str(conf / "devices" / "my_board.yaml")]  # names stay names
    # where a run writes stays relative to the current directory
    assert cfg.common.output_dir == "runs" and cfg.common.cache_dir == "cache"
    assert load_config(cf).to_dict() == cfg.to_dict()  # same config whatever the path spelling


def test_fednlp_files_resolve_and_absolute_paths_stay(tmp_path, monkeypatch):
    cf = _write(
        tmp_path / "c" / "h5.yaml",
        {
            "data_args": {
                "dataset": "fednlp_h5",
                "fednlp_data_file": "agnews_data.h5",
                "partition_method": "fednlp_h5",
                "fednlp_partition_file": str(tmp_path / "abs" / "part.h5"),
                "fednlp_partition_name": "uniform",
            }
        },
    )
    _elsewhere(tmp_path, monkeypatch)
    d = load_config(cf).data
    assert d.fednlp_data_file == str(tmp_path / "c" / "agnews_data.h5")
    assert d.fednlp_partition_file == str(tmp_path / "abs" / "part.h5")


def test_home_relative_paths_expand(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cf = _write(tmp_path / "c.yaml", {"data_args": {"data_dir": "~/agnews"}})
    assert load_config(cf).data.data_dir == str(tmp_path / "home" / "agnews")


def test_set_overrides_stay_relative_to_the_current_directory(tmp_path, monkeypatch):
    cf = _write(
        tmp_path / "confs" / "run.yaml", {"data_args": {"data_dir": "agnews"}, "model_args": {"mlm_from": "mlm.yaml"}}
    )
    here = _elsewhere(tmp_path, monkeypatch)
    cfg = load_config(
        cf,
        {
            "data_args.data_dir": "my/agnews",
            "model_args.mlm_from": "../m.yaml",
            "model_args.model": "./tiny",
            "comm_args.mpi_host_file": "hosts",
        },
    )
    assert cfg.data.data_dir == str(here / "my" / "agnews")
    assert cfg.model.mlm_from == str(here.parent / "m.yaml")
    assert cfg.model.model == str(here / "tiny")
    assert cfg.comm.mpi_host_file == str(here / "hosts")
    # an empty override clears the path (fidelity's per-dataset data_dir: "")
    assert load_config(cf, {"data_args.data_dir": ""}).data.data_dir == ""
    # the raw reader does the same (the bench and cross-silo harnesses read through it)
    raw = read_sections(cf, {"data_args.train_file": "t.csv"})
    assert raw["data_args"] == {"data_dir": str(tmp_path / "confs" / "agnews"), "train_file": str(here / "t.csv")}


@pytest.mark.parametrize(
    "model", ["roberta-large", OFFLINE_MINILM, "sentence-transformers/all-MiniLM-L6-v2", "FacebookAI/roberta-large"]
)
def test_model_ids_are_untouched(tmp_path, monkeypatch, model):
    cf = _write(tmp_path / "c.yaml", {"model_args": {"model": model}, "filter_args": {"proxy_model": model}})
    _elsewhere(tmp_path, monkeypatch)
    cfg = load_config(cf, {})
    assert cfg.model.model == model and cfg.filter.proxy_model == model
    assert load_config(cf, {"model_args.model": model}).model.model == model


def test_local_model_paths_resolve(tmp_path, monkeypatch):
    (tmp_path / "c" / "models" / "tiny").mkdir(parents=True)
    _elsewhere(tmp_path, monkeypatch)
    for value, expected in (
        ("./models/tiny", tmp_path / "c" / "models" / "tiny"),
        ("../elsewhere/model", tmp_path / "elsewhere" / "model"),
        ("models/tiny", tmp_path / "c" / "models" / "tiny"),
    ):  # exists next to the config
        cf = _write(
            tmp_path / "c" / "run.yaml", {"model_args": {"model": value}, "filter_args": {"proxy_model": value}}
        )
        cfg = load_config(cf)
        assert cfg.model.model == str(expected) and cfg.filter.proxy_model == str(expected), value


def test_nested_mlm_config_resolves_its_own_paths(tmp_path, monkeypatch):
    from fedml_fes.pretrain.source import mlm_build_config

    _write(
        tmp_path / "builds" / "mlm.yaml",
        {
            "data_args": {"dataset": "custom", "train_file": "texts.jsonl", "text_columns": ["t"], "label_column": "y"},
            "model_args": {"model": "./base"},
            "train_args": {"method": "fedbert_mlm"},
        },
    )
    (tmp_path / "builds" / "base").mkdir()
    cf = _write(
        tmp_path / "runs_cf" / "fes.yaml",
        {"model_args": {"model": "../builds/base", "mlm_from": "../builds/mlm.yaml"}, "train_args": {"method": "fes"}},
    )
    _elsewhere(tmp_path, monkeypatch)
    cfg = load_config(cf)
    assert cfg.model.mlm_from == str(tmp_path / "builds" / "mlm.yaml")
    mlm = mlm_build_config(cfg)  # the build's config, read from its own folder
    assert mlm.data.train_file == str(tmp_path / "builds" / "texts.jsonl")
    assert mlm.model.model == cfg.model.model == str(tmp_path / "builds" / "base")


def test_mlm_on_job_data_builds_the_recipe_on_the_jobs_own_data(tmp_path):
    """One build per dataset: the recipe's training settings, the job's data section, its own cache key."""
    from fedml_fes.errors import FesError
    from fedml_fes.pretrain.cache import mlm_cache_key
    from fedml_fes.pretrain.source import mlm_build_config

    recipe = REPO / "run_configs" / "mlm_fedbert_bbc.yaml"
    job = {
        "model_args.mlm_from": str(recipe),
        "train_args.method": "fes",
        "common_args.random_seed": 3,
        "data_args.dataset": "trec",
        "data_args.client_num_in_total": 100,
    }
    as_recipe = mlm_build_config(
        load_config(REPO / "run_configs" / "fidelity_minilm.yaml", {**job, "model_args.mlm_on_job_data": False})
    )
    assert as_recipe.data.dataset == "bbc_news"  # unset: the recipe's own data
    own = mlm_build_config(
        load_config(REPO / "run_configs" / "fidelity_minilm.yaml", job)
    )  # the fidelity config sets it
    assert (own.data.dataset, own.data.client_num_in_total) == ("trec", 100)
    assert own.train == as_recipe.train and own.mlm == as_recipe.mlm and own.common.random_seed == 0
    assert mlm_cache_key(own) != mlm_cache_key(as_recipe)
    seed_5 = mlm_build_config(
        load_config(
            REPO / "run_configs" / "fidelity_minilm.yaml",
            {**job, "model_args.mlm_on_job_data": True, "common_args.random_seed": 5},
        )
    )
    assert mlm_cache_key(seed_5) == mlm_cache_key(own)  # every seed of the dataset shares the build
    with pytest.raises(FesError, match="model_args.mlm_on_job_data needs model_args.mlm_from"):
        load_config(
            REPO / "run_configs" / "fidelity_minilm.yaml",
            {"model_args.mlm_from": "", "model_args.mlm_on_job_data": True},
        )


def test_run_config_yaml_stores_absolute_paths(tmp_path, monkeypatch):
    from fedml_fes.runtime.rundir import make_run_dir

    cf = _write(
        tmp_path / "c" / "run.yaml",
        {
            "common_args": {"output_dir": "out", "run_name": "r"},
            "data_args": {"data_dir": "agnews"},
            "model_args": {"mlm_from": "mlm.yaml"},
        },
    )
    here = _elsewhere(tmp_path, monkeypatch)
    run_dir = make_run_dir(load_config(cf))
    assert run_dir == Path("out") / "r" and (here / "out" / "r" / "config.yaml").is_file()
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["data_args"]["data_dir"] == str(tmp_path / "c" / "agnews")
    assert saved["model_args"]["mlm_from"] == str(tmp_path / "c" / "mlm.yaml")
    assert saved["common_args"]["output_dir"] == "out"
    # defaults (not read from the file) meant the current directory: stored absolute too
    assert saved["comm_args"]["mpi_host_file"] == str(here / "mpi" / "mpi_host_file")
    assert saved["model_args"]["model"] == OFFLINE_MINILM
    # the saved config, read back from the run folder, names the same files
    assert load_config(run_dir / "config.yaml").to_dict() == config_from_dict(saved).to_dict()


def test_bench_method_overrides_resolve_against_the_bench_file(tmp_path, monkeypatch):
    from fedml_fes_plugins.bench.config import load_bench, run_config

    raw = {
        "data_args": {"client_num_in_total": 4, "gold_labels": 8},
        "bench_args": {
            "methods": ["fedcls"],
            "full_label": False,
            "calibrate_host": False,
            "method_overrides": {"fedcls": {"data_args.data_dir": "other_data"}},
        },
    }
    cf = _write(tmp_path / "b" / "bench.yaml", raw)
    _elsewhere(tmp_path, monkeypatch)
    plan = load_bench(cf)
    assert run_config(plan, "fedcls", 0).data.data_dir == str(tmp_path / "b" / "other_data")


# ---- the shipped configs: same config from any directory, and what the repo holds exists ----


def _shipped() -> list[Path]:
    configs = sorted((REPO / "run_configs").glob("*.yaml")) + sorted((REPO / "run_configs" / "bench").glob("*.yaml"))
    configs += sorted((REPO / "mpi").glob("*.yaml")) + [REPO / "deploy" / "mlops" / "config" / "fes_config.yaml"]
    return configs


def _load_shipped(path: Path):
    """A run config, or a bench config's base (its run config sections without bench_args)."""
    raw = read_sections(path)
    raw.pop("bench_args", None)
    return config_from_dict(copy.deepcopy(raw), source=str(path))


def _path_values(cfg, path: Path) -> dict[str, str]:
    """The path keys the file `path` sets (defaults are not read from a file), as loaded."""
    written = yaml.safe_load(path.read_text()) or {}
    out = {}
    for sec, keys in INPUT_PATH_KEYS.items():
        for key in keys:
            value = getattr(getattr(cfg, sec), key, "")
            if value and key in (written.get(sec) or {}):
                out[f"{sec}.{key}"] = value
    for sec, keys in NAME_OR_PATH_KEYS.items():
        for key in keys:
            value = getattr(getattr(cfg, sec), key)
            if Path(value).is_absolute():
                out[f"{sec}.{key}"] = value
    out.update({f"cost_args.devices[{i}]": d for i, d in enumerate(cfg.cost.devices) if Path(d).is_absolute()})
    return out


def _read_shipped_key(path: Path, dotted: str):
    sec, _, key = dotted.partition(".")
    return ((yaml.safe_load(path.read_text()) or {}).get(sec) or {}).get(key)


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_config_loads_the_same_from_any_directory(path, tmp_path, monkeypatch):
    from fedml_fes.cost.profiles import profile_path

    monkeypatch.chdir(REPO)
    at_root = _load_shipped(path)
    _elsewhere(tmp_path, monkeypatch)
    cfg = _load_shipped(path)
    assert cfg.to_dict() == at_root.to_dict()
    for dotted, value in _path_values(cfg, path).items():
        assert Path(value).is_absolute(), (dotted, value)
        if not dotted.startswith("data_args."):
            # files the repository ships (the MLM build config, MPI host file, gRPC ipconfig, ...)
            assert Path(value).exists(), f"{path.name}: {dotted} = {value} does not exist"
        else:
            # data is downloaded by the user, not shipped: it stays where it was meant to be from the
            # repository root (inside the checkout), whatever the current directory
            assert Path(value).is_relative_to(REPO), (dotted, value)
    for device in cfg.cost.devices:  # profile names and paths are found from anywhere
        profile_path(device, cfg.cost.device_dir or None)
    if cfg.model.mlm_from:  # the nested build config loads from here too, with its own paths
        from fedml_fes.pretrain.source import mlm_build_config

        mlm = mlm_build_config(cfg)
        assert mlm.train.method == "fedbert_mlm"
        for dotted, value in _path_values(mlm, Path(cfg.model.mlm_from)).items():
            assert Path(value).is_absolute(), (dotted, value)


def test_shipped_repo_relative_values_kept_their_meaning():
    """The configs' paths name what they named when run from the repository root."""
    root = {
        "run_configs/agnews_fes.yaml": {
            "model_args.mlm_from": "run_configs/mlm_fedbert_bbc.yaml",
            "data_args.data_dir": "data/agnews",
        },
        "run_configs/bench/cpu.yaml": {
            "model_args.mlm_from": "run_configs/mlm_fedbert_bbc.yaml",
            "data_args.data_dir": "data/agnews",
        },
        "run_configs/demo_bbc_fedcls.yaml": {"comm_args.mpi_host_file": "mpi/mpi_host_file"},
        "run_configs/overhead.yaml": {"comm_args.mpi_host_file": "mpi/mpi_host_file"},
        "run_configs/cross_silo_grpc.yaml": {"comm_args.grpc_ipconfig_path": "deploy/grpc_ipconfig.csv"},
        "run_configs/data_fednlp_h5.yaml": {"data_args.fednlp_data_file": "data/data_files/agnews_data.h5"},
        "mpi/fedml_fes_main.yaml": {"model_args.mlm_from": "run_configs/mlm_fedbert_bbc.yaml"},
    }
    for rel, keys in root.items():
        cfg = _load_shipped(REPO / rel)
        for dotted, from_root in keys.items():
            sec, _, key = dotted.partition(".")
            assert getattr(getattr(cfg, sec), key) == str(REPO / from_root), (rel, dotted)
            assert _read_shipped_key(REPO / rel, dotted) != from_root  # written relative to its own folder


def test_shipped_cross_silo_and_bench_presets_work_from_elsewhere(tmp_path, monkeypatch):
    from fedml_fes_plugins.bench.config import load_bench, preset_path
    from fedml_fes_plugins.cross_silo.config import load_cross_silo
    from fedml_fes_plugins.cross_silo.launch import _prepare
    from fedml_fes_plugins.cross_silo.services import LocalJob

    _elsewhere(tmp_path, monkeypatch)
    _, s = load_cross_silo(REPO / "run_configs" / "cross_silo_grpc.yaml")
    assert s.grpc_ipconfig_path == str(REPO / "deploy" / "grpc_ipconfig.csv") and s.silo_num >= 1
    # the launcher copies the config into the run folder: the copy's paths still hold
    job = LocalJob(
        str(REPO / "run_configs" / "cross_silo_grpc.yaml"), ["train_args.comm_round=1"], str(tmp_path / "rd")
    )
    _, effective, cfg, settings = _prepare(job, [])
    assert effective.parent == tmp_path / "rd" and settings.grpc_peers == s.grpc_peers
    plan = load_bench(preset_path("smoke"), bench_overrides={"full_label": False})
    assert plan.run_names() and Path(plan.source).resolve() == REPO / "run_configs" / "bench" / "smoke.yaml"
