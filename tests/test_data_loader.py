"""The FedML data loader plugin: FedML's 8-element list, every local entry tagged with its client."""

import numpy as np
import pytest

from fedml_fes.config import config_from_dict
from fedml_fes.data.federated import ClientData, build_federated_data
from fedml_fes_plugins.adapters.data_loader import LocalTestData, config_from_args, dataset_list, load

RAW = {
    "common_args": {"random_seed": 3},
    "data_args": {
        "client_num_in_total": 8,
        "gold_labels": 16,
        "gold_sparsity": 100,
        "max_train_examples": 400,
        "max_test_examples": 80,
    },
}


def test_eight_element_list_in_fedml_order():
    cfg = config_from_dict(RAW)
    (train_num, test_num, train_global, test_global, local_num, train_local, test_local, class_num), n = load(cfg)
    data, _ = build_federated_data(cfg)
    assert n == class_num == 5 and test_num == len(test_global) == 80
    assert train_num == sum(local_num.values()) == 400
    assert sorted(train_local) == sorted(test_local) == sorted(local_num) == list(range(8))
    for cid in range(8):
        assert isinstance(train_local[cid], ClientData) and train_local[cid].client_id == cid
        assert isinstance(test_local[cid], LocalTestData) and test_local[cid].client_id == cid
        assert local_num[cid] == train_local[cid].num_gold + len(train_local[cid].unlabeled)
        assert train_local[cid] == data.clients[cid]
    assert sum(len(t) for t in test_local.values()) == 80
    assert len(train_global) == 16 and np.bincount(train_global.labels, minlength=5).sum() == 16


def test_flat_fedml_args_give_the_same_data():
    cfg = config_from_dict(RAW)
    again = config_from_args(cfg.flat_args())  # what FedML passes around: one flat namespace
    assert again.data == cfg.data and again.common.random_seed == 3
    a, b = dataset_list(build_federated_data(cfg)[0]), load(cfg.flat_args())[0]
    assert a[5] == b[5] and a[4] == b[4]


def test_fedml_trainer_picks_each_clients_data():
    """FedML's cross-silo FedMLTrainer indexes the dicts by client id and trains on that entry."""
    from fedml_fes_plugins.adapters.offline import import_fedml

    import_fedml()
    from fedml.core import ClientTrainer
    from fedml.cross_silo.client.fedml_trainer import FedMLTrainer

    class Recorder(ClientTrainer):
        def get_model_params(self):
            return {}

        def set_model_params(self, params):
            pass

        def train(self, train_data, device, args):
            self.seen = train_data.client_id

    cfg = config_from_dict(RAW)
    args = cfg.flat_args()
    args.scenario = "horizontal"
    dataset, _ = load(args)
    trainer = Recorder(None, args)
    fedml_trainer = FedMLTrainer(0, dataset[5], dataset[4], dataset[6], dataset[0], "cpu", args, trainer)
    for cid in (5, 2):
        fedml_trainer.update_dataset(cid)
        trainer.train(fedml_trainer.train_local, "cpu", args)
        assert trainer.seen == cid and trainer.local_test_dataset.client_id == cid
        assert trainer.local_sample_number == dataset[4][cid]


def test_pairs_reach_the_global_gold_pool(tmp_path):
    import json

    rows = [{"p": f"p{i}", "h": f"h{i}", "y": i % 2} for i in range(40)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = config_from_dict(
        {
            "data_args": {
                "dataset": "custom",
                "train_file": str(tmp_path / "d.jsonl"),
                "text_columns": ["p"],
                "text_b_columns": ["h"],
                "label_column": "y",
                "client_num_in_total": 4,
                "gold_labels": 6,
                "gold_sparsity": 100,
            }
        }
    )
    gold = load(cfg)[0][2]
    assert gold.is_pair and [b[1:] for b in gold.texts_b] == [a[1:] for a in gold.texts]


def test_bad_args_are_one_line():
    from types import SimpleNamespace

    from fedml_fes.errors import FesError

    with pytest.raises(FesError, match="data_args.partition_alpha must be > 0"):
        config_from_args(SimpleNamespace(partition_alpha=0, dataset="bbc_news"))
