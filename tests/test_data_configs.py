"""run_configs/data_*.yaml: every one validates, and they carry the paper's settings."""

import pytest

from fedml_fes.config import DataConfig, load_config
from fedml_fes.data.federated import build_federated_data

from .conftest import REPO, SHARED_AGNEWS

DATA_CONFIGS = sorted((REPO / "run_configs").glob("data_*.yaml"))


@pytest.mark.parametrize("path", DATA_CONFIGS, ids=lambda p: p.name)
def test_data_config_validates(path):
    cfg = load_config(path)
    assert cfg.data.gold_labels == 64


def test_paper_settings():
    ag = load_config(REPO / "run_configs" / "data_agnews_paper.yaml").data
    assert (ag.client_num_in_total, ag.partition_method, ag.partition_alpha, ag.gold_sparsity) == (
        100,
        "niid_label",
        1.0,
        0.001,
    )
    for name in ("mnli_paper", "yahoo_paper", "yelp_full_paper", "snli_offline"):
        assert load_config(REPO / "run_configs" / f"data_{name}.yaml").data.client_num_in_total == 1000
    assert load_config(REPO / "run_configs" / "data_mnli_paper.yaml").data.gold_sparsity == 100


def test_dataclass_defaults_are_still_the_bbc_demo():
    d = DataConfig()
    assert (
        d.dataset,
        d.client_num_in_total,
        d.partition_method,
        d.partition_alpha,
        d.gold_labels,
        d.gold_clients,
        d.gold_sparsity,
        d.test_fraction,
    ) == ("bbc_news", 20, "niid_label", 1.0, 64, 0, 0.001, 0.2)


@pytest.mark.skipif(not SHARED_AGNEWS.is_dir(), reason="../shared/datasets/agnews is absent (not a dev checkout)")
def test_agnews_paper_config_builds():
    cfg = load_config(REPO / "run_configs" / "data_agnews_paper.yaml", {"data_args.data_dir": str(SHARED_AGNEWS)})
    data, _ = build_federated_data(cfg)
    assert data.num_clients == 100 and sum(c.num_gold for c in data.clients) == 64
