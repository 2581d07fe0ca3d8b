import pytest

from fedml_fes.config import config_from_dict, load_config, parse_overrides, read_sections
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


@pytest.mark.parametrize(
    "raw, match",
    [
        ({"train_args": {"comm_round": "ten"}}, "train_args.comm_round' must be an integer"),
        ({"data_args": {"partition_alpha": 0}}, "partition_alpha must be > 0"),
        ({"data_args": {"dataset": "imdb"}}, "data_args.dataset 'imdb'"),
        ({"train_args": {"method": "fes_v2"}}, "train_args.method 'fes_v2'"),
        ({"tracking_args": {"enable_wandb": True}}, "enable_wandb must be false"),
    ],
)
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


def test_set_items_parse_once_as_yaml_scalars():
    assert parse_overrides(
        ["train_args.comm_round=3", "tuning_args.bias_learning_rate=1e-2", "model_args.model=a=b"]
    ) == {"train_args.comm_round": 3, "tuning_args.bias_learning_rate": "1e-2", "model_args.model": "a=b"}
    for bad in ("comm_round=3", "train_args.comm_round"):
        with pytest.raises(FesError, match="section.key=value"):
            parse_overrides([bad])


def test_one_reader_for_files_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(
        "train_args:\n  comm_round: 2\ncomm_args:\n  customized_training_mqtt_config:\n    BROKER_PORT: 1883\n"
    )
    raw = read_sections(p, {"train_args.epochs": 2, "data_args.dataset": "bbc_news"})
    assert raw["train_args"] == {"comm_round": 2, "epochs": 2} and raw["data_args"] == {"dataset": "bbc_news"}
    cfg = load_config(p, {"train_args.epochs": 2})
    assert cfg.train.epochs == 2
    # a mapping key keeps its values' YAML types (a port stays an int), nested values are refused
    assert cfg.comm.customized_training_mqtt_config == {"BROKER_PORT": 1883}
    with pytest.raises(FesError, match="prompt_args.verbalizer.a' must be a single value"):
        config_from_dict({"prompt_args": {"verbalizer": {"a": ["x"]}}})
    own = {"pattern": "{mask}: {text_a}", "verbalizer": {"a": 1}}
    assert config_from_dict({"prompt_args": own}).prompt.verbalizer == {"a": "1"}


@pytest.mark.parametrize(
    "data, label",
    [
        ({"dataset": "bbc_news"}, "bbc_news"),
        ({"dataset": "agnews", "data_dir": "/data/agnews_full"}, "agnews"),  # built-in: its own name
        ({"dataset": "custom", "train_file": "/d/reviews.csv"}, "reviews"),
        ({"dataset": "custom", "train_file": "/d/amazon reviews (2023)_train.jsonl"}, "amazon_reviews_2023"),
        ({"dataset": "custom", "train_file": "/home/u/support_tickets/train.csv"}, "support_tickets"),
        ({"dataset": "custom", "train_file": "/home/u/legal/data/data.tsv.gz"}, "legal"),
        ({"dataset": "custom", "train_file": "train.csv"}, "custom"),  # nothing better to go by
        ({"dataset": "fednlp_h5", "fednlp_data_file": "/x/data_files/agnews_data.h5"}, "agnews"),
        ({"dataset": "fednlp_h5", "fednlp_data_file": "/x/20news.h5"}, "20news"),
        ({"dataset": "hf", "hf_dataset": "SetFit/sst2"}, "SetFit_sst2"),
        ({"dataset": "hf", "hf_dataset": "glue", "hf_config": "sst2"}, "glue-sst2"),
    ],
)
def test_run_folders_are_named_after_the_data(data, label):
    import re

    from fedml_fes.runtime.rundir import dataset_label, default_run_name

    extra = {"text_columns": ["t"], "label_column": "y"} if data["dataset"] == "custom" else {}
    cfg = config_from_dict(
        {"data_args": {**data, **extra}, "train_args": {"method": "fes"}, "common_args": {"random_seed": 3}}
    )
    assert dataset_label(cfg) == label
    name = default_run_name(cfg)
    assert name.startswith(f"fes-{label}-s3-") and re.fullmatch(r"[A-Za-z0-9_.-]+", name)


def test_run_folder_of_a_custom_dataset_uses_its_file(tmp_path, monkeypatch):
    from fedml_fes.runtime.rundir import make_run_dir

    cf = tmp_path / "c.yaml"
    cf.write_text(
        "data_args:\n  dataset: custom\n  train_file: mail/spam_train.csv\n  text_columns: [t]\n"
        "  label_column: y\ncommon_args:\n  output_dir: out\n"
    )
    monkeypatch.chdir(tmp_path)
    assert make_run_dir(load_config(cf)).name.startswith("fedcls-spam-s0-")


@pytest.mark.parametrize(
    "typed, dataset",
    [
        ("ag_news", "agnews"),
        ("agnews", "agnews"),
        ("yelp_full", "yelp_review_full"),
        ("yahoo", "yahoo_answers"),
        ("yahoo_answers", "yahoo_answers"),
    ],
)
def test_dataset_names_users_type(typed, dataset):
    assert config_from_dict({"data_args": {"dataset": typed, "data_dir": "/data"}}).data.dataset == dataset
