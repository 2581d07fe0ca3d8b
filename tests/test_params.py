from collections import OrderedDict

import pytest
import torch

from fedml_fes.errors import FesError
from fedml_fes.tuning.params import fedavg, load_trainable, payload_bytes, trainable_state, validate_update


def _state(v):
    return OrderedDict(w=torch.full((2, 2), float(v)), b=torch.full((2,), float(v)))


def test_fedavg_weighted_by_counts():
    out = fedavg([(1.0, _state(0)), (3.0, _state(4))])
    assert torch.allclose(out["w"], torch.full((2, 2), 3.0))
    assert out["w"].dtype == torch.float32


def test_fedavg_rejects_empty_and_zero_weights():
    with pytest.raises(FesError):
        fedavg([])
    with pytest.raises(FesError, match="positive"):
        fedavg([(0.0, _state(1))])


def test_validate_update_catches_keys_shapes_dtypes_nans():
    ref = _state(0)
    validate_update(_state(1), ref, "c1")
    bad_keys = OrderedDict(w=ref["w"])
    with pytest.raises(FesError, match="wrong tensors"):
        validate_update(bad_keys, ref, "c1")
    bad_shape = OrderedDict(w=torch.zeros(3), b=ref["b"])
    with pytest.raises(FesError, match="tensor 'w'"):
        validate_update(bad_shape, ref, "c1")
    nan = _state(1)
    nan["b"][0] = float("nan")
    with pytest.raises(FesError, match="non-finite"):
        validate_update(nan, ref, "c1")


def test_trainable_state_only_requires_grad_and_copies():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[0].weight.requires_grad_(False)
    state = trainable_state(model)
    assert list(state) == ["0.bias", "1.weight", "1.bias"]
    assert payload_bytes(state) == 4 * (2 + 2 + 1)
    state["1.bias"] += 5
    load_trainable(model, state)
    assert torch.equal(model[1].bias, state["1.bias"])
    with pytest.raises(FesError, match="does not exist"):
        load_trainable(model, OrderedDict(nope=torch.zeros(1)))
