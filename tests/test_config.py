import pytest

from fedml_fes.config import config_from_dict, load_config
from fedml_fes.errors import FesError


def test_defaults_are_the_demo_setting():
    cfg = config_from_dict({})
    assert cfg.data.dataset == "bbc_news" and cfg.train.method == "fedcls"
    assert cfg.model.model == "offline:all-MiniLM-L6-v2"


def test_unknown_key_names_key_and_suggests(tmp_path):
    with pytest.raises(FesError, match=r"unknown config key 'lerning_rate'.*did you mean 'learning_rate'"):
        config_from_dict({"train_args": {"lerning_rate": 0.1}})


def test_unknown_section():
    with pytest.raises(FesError, match="unknown config section 'trian_args'"):
        config_from_dict({"trian_args": {}})


@pytest.mark.parametrize("raw, match", [
    ({"train_args": {"comm_round": "ten"}}, "train_args.comm_round' must be an integer"),
    ({"data_args": {"partition_alpha": 0}}, "partition_alpha must be > 0"),
    ({"data_args": {"dataset": "imdb"}}, "data_args.dataset 'imdb'"),
    ({"train_args": {"method": "fes_v2"}}, "train_args.method 'fes_v2'"),
    ({"tracking_args": {"enable_wandb": True}}, "enable_wandb must be false"),
])
def test_bad_values_are_one_line(raw, match):
    with pytest.raises(FesError, match=match) as e:
        config_from_dict(raw)
    assert "\n" not in str(e.value)


def test_yaml_numbers_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train_args:\n  learning_rate: 1e-3\n  comm_round: 4\n")
    cfg = load_config(p, {"train_args.comm_round": 7})
    assert cfg.train.learning_rate == pytest.approx(1e-3) and cfg.train.comm_round == 7


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(FesError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train_args: [unclosed\n")
    with pytest.raises(FesError, match="not valid YAML"):
        load_config(bad)


def test_flat_args_are_fedml_style():
    args = config_from_dict({"train_args": {"comm_round": 3}}).flat_args()
    assert args.comm_round == 3 and args.random_seed == 0 and args.using_mlops is False


def test_a_fes_section_key_never_shadows_a_fedml_key():
    args = config_from_dict({"train_args": {"method": "fes"}, "filter_args": {"method": "random"}}).flat_args()
    assert args.method == "fes" and args.knn == 150  # FeS-only keys stay readable


def test_shipped_run_configs_parse():
    from pathlib import Path
    for p in sorted((Path(__file__).resolve().parents[1] / "run_configs").glob("*.yaml")):
        load_config(p)
