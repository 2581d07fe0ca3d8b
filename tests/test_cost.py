"""Cost model: FLOPs against torch's counter, memory, profiles, network, per-round accounting."""

import math

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import BertConfig, BertForMaskedLM

from fedml_fes.config import AdapterConfig, config_from_dict
from fedml_fes.cost.accounting import TaskRecord, cumulative_hours, first_round_reaching, round_costs, totals_up_to
from fedml_fes.cost.calibrate import Timing, fit
from fedml_fes.cost.flops import (
    FFN_OUT,
    QKV,
    EncoderShape,
    LoraShape,
    encoder_parameters,
    lora_backward_flops,
    lora_forward_flops,
    training_batch_flops,
)
from fedml_fes.cost.meter import TaskMeter
from fedml_fes.cost.network import Network
from fedml_fes.cost.profiles import DeviceProfile, load_profile, profile_from_dict
from fedml_fes.cost.settings import network_of
from fedml_fes.errors import FesError
from fedml_fes.models import load_tokenizer
from fedml_fes.prompt.classifier import PromptAdapter, train_examples
from fedml_fes.prompt.model import PromptEncoder, PromptMLM
from fedml_fes.tuning.adapters import adapter_plan, add_adapters
from fedml_fes.tuning.plan import LayerPlan, apply_tuning
from fedml_fes.tuning.split import ActivationCache, FrozenBottom

TEXTS = [
    "a short text",
    "a somewhat longer text with more words in it to pad the batch",
    "x y z",
    "hello there world",
    "markets fell sharply today",
    "the team won the final",
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("offline:all-MiniLM-L6-v2")


def _model(tok, mode, plan=None, seed=0):
    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=128,
    )
    m = PromptMLM(BertForMaskedLM(cfg), [tok.convert_tokens_to_ids(w) for w in ("good", "bad", "fine")])
    apply_tuning(m, mode, plan)
    m.freeze_vocab_bias()
    if plan is not None and plan.frozen_bottom:
        m.split = FrozenBottom(m.mlm.base_model, plan.frozen_bottom)
        m.split.cache = ActivationCache()
    return m


def _adapter_model(tok, kind, depth):
    """The tiny model of `_model` with PEFT modules (width 8) in layers depth..3, built as the
    adapter methods build it: the frozen bottom below them split off, its activations cached."""
    model = _model(tok, "full")
    add_adapters(model.mlm, adapter_plan(AdapterConfig(depth=depth, width=8), kind, 4), seed=0)
    model.freeze_vocab_bias()
    if depth:
        model.split = FrozenBottom(model.mlm.base_model, depth)
        model.split.cache = ActivationCache()
    return model


def _check_against_counter(tok, model):
    batch = PromptEncoder(tok, "{text_a} It was {mask}.", 64).batch(TEXTS[:4])
    if model.split is not None:  # a warm cache: the bottom is not recomputed, nor counted
        with torch.no_grad():
            model(**batch)
    with TaskMeter(model) as meter, FlopCounterMode(display=False) as counter:
        model(**batch).logsumexp(-1).mean().backward()
    m = meter.metrics()
    assert m["cost_bwd_flops"] > 0
    assert (m["cost_fwd_flops"] + m["cost_bwd_flops"]) == pytest.approx(counter.get_total_flops(), rel=0.03)


@pytest.mark.parametrize(
    "mode,plan", [("full", None), ("bias", None), ("plan", LayerPlan(4, 1, 1)), ("plan", LayerPlan(4, 0, 2))]
)
def test_recorded_flops_match_torch_flop_counter(tok, mode, plan):
    _check_against_counter(tok, _model(tok, mode, plan))


@pytest.mark.parametrize("kind", ["lora", "adapter"])
@pytest.mark.parametrize("depth", [0, 1, 3])
def test_recorded_flops_with_peft_modules_match_torch_flop_counter(tok, kind, depth):
    """Only the LoRA matrices pay weight gradients; in the lowest adapted layer autograd stops
    at the adapted projection (the adapter: the FFN output, so almost nothing below it runs)."""
    model = _adapter_model(tok, kind, depth)
    if depth == 3:  # a single adapted layer: the attention's backward (counted flash-style) would
        model.split = None  # dominate, so the whole model runs, the bottom forward without gradients
    _check_against_counter(tok, model)


def test_frozen_base_matrices_pay_no_weight_gradients(tok):
    """Adapted layers cost what bias-only layers cost plus the small LoRA matrices' share, not the
    weight gradients of full layers (rank 8 beside q and v of a 64-wide layer: 1/8 of them)."""
    enc = PromptEncoder(tok, "{text_a} It was {mask}.", 64)
    out = {}
    for name, model in (
        ("lora", _adapter_model(tok, "lora", 1)),
        ("bias", _model(tok, "plan", LayerPlan(4, 0, 3))),
        ("full", _model(tok, "plan", LayerPlan(4, 3, 0))),
    ):
        model.split = None
        with TaskMeter(model) as meter:
            model(**enc.batch(TEXTS[:4])).sum().backward()
        out[name] = meter.metrics()["cost_bwd_flops"]
    assert 0 < out["lora"] - out["bias"] < 0.13 * (out["full"] - out["bias"])


def test_lora_formulas():
    """Rank r beside a linear in -> out, T tokens: forward 2Tr(in+out); backward 2Tr(in+out) for
    the weight gradients and as much for the activation gradient, less A's input gradient
    (2T in r) where that input needs none: in the lowest layer, at or below its lowest trainable stage."""
    q = LoraShape(64, 8, 64, QKV, True, True)
    ffn = LoraShape(128, 8, 64, FFN_OUT, True, True)
    assert lora_forward_flops([q, ffn], 10) == 2 * 10 * 8 * (128 + 192)
    upper = 4 * 10 * 8 * (64 + 64)
    assert lora_backward_flops(10, [(q,), (q,)], -1) == 2 * upper
    assert lora_backward_flops(10, [(q,), (q,)], QKV) == 2 * upper - 2 * 10 * 64 * 8
    assert lora_backward_flops(10, [(q, ffn)], QKV) == upper - 2 * 10 * 64 * 8 + 4 * 10 * 8 * (128 + 64)
    assert lora_backward_flops(10, [(ffn,)], FFN_OUT) == 4 * 10 * 8 * (128 + 64) - 2 * 10 * 128 * 8
    frozen = LoraShape(64, 8, 64, QKV, False, False)
    assert lora_backward_flops(10, [(frozen,)], QKV) == 0 and lora_backward_flops(10, [(), (frozen,)], QKV) == upper / 2


# FLOPs one training task (2 epochs of 3 batches) recorded before the meter counted PEFT modules:
# the methods without them must keep these numbers exactly
RECORDED = {
    ("full", None): (43303424.0, 87759872.0),
    ("bias", None): (43303424.0, 46865408.0),
    ("plan", LayerPlan(4, 1, 1)): (30907392.0, 29925376.0),
    ("plan", LayerPlan(4, 0, 2)): (30907392.0, 19701760.0),
}


@pytest.mark.parametrize("mode,plan", list(RECORDED))
def test_methods_without_peft_modules_cost_what_they_did(tok, mode, plan):
    model = _model(tok, mode, plan)
    m = _train_metered(tok, model)
    assert (m["cost_fwd_flops"], m["cost_bwd_flops"]) == RECORDED[(mode, plan)]
    # training leaves no gradients behind (a full-size copy of the model, for full tuning)
    assert all(p.grad is None for p in model.parameters())


def test_cold_cache_counts_the_bottom_forward_only(tok):
    model = _model(tok, "plan", LayerPlan(4, 0, 1))
    batch = PromptEncoder(tok, "{text_a} It was {mask}.", 64).batch(TEXTS[:2])
    with TaskMeter(model) as cold:
        model(**batch).sum().backward()
    with TaskMeter(model) as warm:
        model(**batch).sum().backward()
    c, w = cold.metrics(), warm.metrics()
    assert c["cost_bottom_tokens"] > 0 and w["cost_bottom_tokens"] == 0
    assert c["cost_fwd_flops"] > w["cost_fwd_flops"] and c["cost_bwd_flops"] == w["cost_bwd_flops"]
    assert c["cost_encoder_calls"] == 1 + 2  # the top pass + one bottom pass per example


def test_metering_changes_nothing_in_training(tok):
    enc = PromptEncoder(tok, "{text_a} It was {mask}.", 64)
    targets = np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1, 2]]
    params = []
    for metered in (False, True):
        model = _model(tok, "full", seed=1)
        gen = torch.Generator().manual_seed(3)
        torch.manual_seed(3)
        run = lambda: train_examples(
            model,
            PromptAdapter(enc),
            TEXTS,
            None,
            targets,
            epochs=1,  # noqa: E731
            batch_size=2,
            lr=1e-3,
            weight_decay=0.0,
            generator=gen,
            device=torch.device("cpu"),
        )
        if metered:
            with TaskMeter(model) as meter:
                run()
        else:
            run()
        params.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*params))
    m = meter.metrics()
    assert m["cost_steps"] == 3 and m["cost_examples"] == 6


def test_peak_memory_parts(tok):
    enc = PromptEncoder(tok, "{text_a} It was {mask}.", 64)
    full, bias = _model(tok, "full"), _model(tok, "bias")
    vocab_bias = full.mlm.cls.predictions.decoder.bias.nbytes
    out = {}
    for name, model in (("full", full), ("bias", bias)):
        with TaskMeter(model) as meter:
            model(**enc.batch(TEXTS[:4])).sum().backward()
        out[name] = meter.metrics()
    f, b = out["full"], out["bias"]
    for m in (f, b):
        assert m["cost_activation_peak_bytes"] > 0
        assert m["cost_peak_train_bytes"] == (
            m["cost_resident_param_bytes"]
            + m["cost_grad_bytes"]
            + m["cost_optimizer_bytes"]
            + m["cost_activation_peak_bytes"]
        )
        assert m["cost_optimizer_bytes"] == 2 * m["cost_trainable_bytes"]
        # no frozen bottom: the step reads the whole model but the vocabulary bias, of which only the
        # verbalizer rows (3 floats); the class bias (3 floats) is read in full
        assert m["cost_resident_param_bytes"] == m["cost_param_bytes"] - vocab_bias + 3 * 4
        assert m["cost_fill_peak_bytes"] == 0
    assert f["cost_param_bytes"] == b["cost_param_bytes"]
    assert f["cost_peak_train_bytes"] > 2.5 * b["cost_peak_train_bytes"]
    with TaskMeter(bias) as meter, torch.no_grad():  # inference holds no training memory
        bias(**enc.batch(TEXTS[:4]))
    assert meter.metrics()["cost_peak_train_bytes"] == 0 and meter.metrics()["cost_bwd_flops"] == 0


def _train_metered(tok, model):
    enc = PromptEncoder(tok, "{text_a} It was {mask}.", 64)
    targets = np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1, 2]]
    with TaskMeter(model) as meter:
        train_examples(
            model,
            PromptAdapter(enc),
            TEXTS,
            None,
            targets,
            epochs=2,
            batch_size=2,
            lr=1e-3,
            weight_decay=0.0,
            generator=torch.Generator().manual_seed(0),
            device=torch.device("cpu"),
        )
    return meter.metrics()


def _bytes(params) -> int:
    return sum(p.nbytes for p in params)


def test_filled_cache_keeps_the_frozen_bottom_out_of_the_training_step(tok):
    """Bottom filled before training: the step reads the top + head; the fill phase the embeddings + bottom."""
    model = _model(tok, "plan", LayerPlan(4, 0, 2))
    base = model.mlm.base_model
    m = _train_metered(tok, model)
    top = _bytes(p for layer in base.encoder.layer[2:] for p in layer.parameters())
    head = _bytes(model.mlm.cls.predictions.transform.parameters())
    verbalizer_rows = 3 * base.config.hidden_size * 4 + 3 * 4  # 3 rows of the tied decoder, 3 vocabulary biases
    assert m["cost_resident_param_bytes"] == top + head + verbalizer_rows + model.class_bias.nbytes
    assert m["cost_fill_peak_bytes"] == _bytes(base.embeddings.parameters()) + _bytes(
        p for layer in base.encoder.layer[:2] for p in layer.parameters()
    )
    step = (
        m["cost_resident_param_bytes"]
        + m["cost_grad_bytes"]
        + m["cost_optimizer_bytes"]
        + m["cost_activation_peak_bytes"]
    )
    assert m["cost_peak_train_bytes"] == max(step, m["cost_fill_peak_bytes"])
    assert model.split.cache.misses == len(TEXTS) and model.split.cache.hits == 2 * len(TEXTS)


def test_bottom_run_during_training_counts_both_phases_together(tok):
    """No cache: every step runs the bottom, so embeddings, bottom and top are all resident at once."""
    model = _model(tok, "plan", LayerPlan(4, 0, 2))
    model.split.cache = None
    m = _train_metered(tok, model)
    whole_but_vocab_bias = m["cost_param_bytes"] - model.mlm.cls.predictions.decoder.bias.nbytes + 3 * 4
    assert m["cost_resident_param_bytes"] == whole_but_vocab_bias and m["cost_fill_peak_bytes"] == 0
    assert m["cost_peak_train_bytes"] == (
        m["cost_resident_param_bytes"]
        + m["cost_grad_bytes"]
        + m["cost_optimizer_bytes"]
        + m["cost_activation_peak_bytes"]
    )


def test_prefilled_training_matches_lazy_bottom_bit_for_bit(tok):
    """Filling the cache first changes when the bottom runs, not what training computes."""
    out = []
    for cached in (True, False):
        model = _model(tok, "plan", LayerPlan(4, 0, 2), seed=5)
        if not cached:
            model.split.cache = None
        torch.manual_seed(1)
        _train_metered(tok, model)
        out.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*out))


# ---- device profiles ------------------------------------------------------------------------


def test_builtin_profiles_and_their_derivation():
    tx2, rpi, host = (load_profile(n) for n in ("jetson_tx2", "rpi_4b", "host"))
    shape = EncoderShape(1024, 4096, 24)
    everything, _ = encoder_parameters(shape, 50265)
    assert 3.4e8 < everything < 3.7e8  # RoBERTa-large has ~355M parameters
    batch = training_batch_flops(shape, 4, 256, "full").total
    update = 8 * 4 * everything / tx2.memory_bandwidth_Bps
    assert tx2.compute_seconds(batch, 1, 8 * 4 * everything) == pytest.approx(2.0)  # the artifact's constant
    assert rpi.flops_per_s == pytest.approx(tx2.flops_per_s / 15)
    assert 0 < update < 0.5 and tx2.compute_power_w == 15 and rpi.compute_power_w == 6.4
    assert host.flops_per_s > 0 and all(p.sources for p in (tx2, rpi, host))


def test_unknown_or_bad_profiles_are_one_line_errors(tmp_path):
    with pytest.raises(FesError, match="unknown device profile 'jetson_nano'.*known: .*jetson_tx2"):
        load_profile("jetson_nano")
    with pytest.raises(FesError, match="device profile file not found"):
        load_profile(str(tmp_path / "x.yaml"))
    with pytest.raises(FesError, match="unknown device profile key 'flops'"):
        profile_from_dict({"name": "a", "flops": 1, "compute_power_w": 1, "radio_power_w": 1}, "a.yaml")
    with pytest.raises(FesError, match="'compute_power_w' must be > 0"):
        profile_from_dict({"throughput": {"flops_per_s": 1e9}, "compute_power_w": 0, "radio_power_w": 1}, "a.yaml")
    (tmp_path / "a.yaml").write_text(
        "throughput: {relative_to: b, slowdown: 2}\ncompute_power_w: 1\nradio_power_w: 1\n"
    )
    (tmp_path / "b.yaml").write_text(
        "throughput: {relative_to: a, slowdown: 2}\ncompute_power_w: 1\nradio_power_w: 1\n"
    )
    with pytest.raises(FesError, match="loop"):
        load_profile("a", tmp_path)


def test_bandwidth_must_be_positive():
    with pytest.raises(FesError, match="downlink bandwidth must be > 0"):
        Network(0.0, 1.0)
    with pytest.raises(FesError, match="cost_args.bandwidth_MBps must be > 0"):
        config_from_dict({"cost_args": {"bandwidth_MBps": 0}})
    with pytest.raises(FesError, match="bandwidth_sweep entries must be > 0"):
        config_from_dict({"cost_args": {"bandwidth_sweep": [1, -0.5]}})
    cfg = config_from_dict({"cost_args": {"bandwidth_sweep": "10, 0.1, 1"}})
    assert cfg.cost.bandwidth_sweep == [0.1, 1.0, 10.0]


def test_the_per_message_overhead_is_paid_by_each_message_that_carries_bytes():
    """cost_args.message_overhead_s (measured over a shaped link, docs/COST_MODEL.md): each
    direction that carries bytes is one message and pays it once; none for an empty one."""
    net = Network(1.0, 0.5, message_s=0.25)
    assert net.transfer_seconds(1e6, 1e6) == pytest.approx(1 + 2 + 2 * 0.25)
    assert net.transfer_seconds(1e6, 0) == pytest.approx(1.25)
    assert net.transfer_seconds(0, 0) == 0
    assert Network(1.0, 1.0).transfer_seconds(1e6, 1e6) == pytest.approx(2.0)  # the paper's model
    assert "0.25 s per message" in net.describe()
    cfg = config_from_dict({"cost_args": {"message_overhead_s": 1.22, "bandwidth_MBps": 2}})
    assert network_of(cfg.cost).message_s == 1.22 and network_of(cfg.cost, 10.0).message_s == 1.22
    with pytest.raises(FesError, match="cost_args.message_overhead_s must be >= 0 s"):
        config_from_dict({"cost_args": {"message_overhead_s": -0.1}})
    with pytest.raises(FesError, match="per-message overhead must be >= 0 s"):
        Network(1.0, 1.0, message_s=-1.0)


# ---- accounting ------------------------------------------------------------------------------

DEV = DeviceProfile(
    "d", "d", flops_per_s=1e9, compute_power_w=10.0, radio_power_w=2.0, call_overhead_s=0.5, memory_bandwidth_Bps=1e9
)


def test_round_time_is_label_phase_then_slowest_trainer():
    net = Network(1.0, 0.5)  # MB/s
    tasks = [
        TaskRecord(0, "label", 1, flops=2e9, calls=2, bytes_down=1e6, bytes_up=0, measured_s=1),
        TaskRecord(0, "label", 2, flops=1e9, calls=0, bytes_down=1e6, bytes_up=0, measured_s=1),
        TaskRecord(0, "train", 1, flops=3e9, calls=0, bytes_down=1e6, bytes_up=1e6, measured_s=1, update_bytes=1e9),
        TaskRecord(1, "train", 3, flops=1e9, calls=0, bytes_down=0, bytes_up=0, measured_s=1),
    ]
    r0, r1 = round_costs(tasks, DEV, net)
    # label: client 1 = 2 s + 1 s overhead + 1 s download = 4 s; train: 3 + 1 (update) + 1 down + 2 up = 7 s
    assert r0.label_s == pytest.approx(4.0) and r0.train_s == pytest.approx(7.0) and r0.time_s == pytest.approx(11)
    compute = 3 + 1 + 4
    transfer = 1 + 1 + 3
    assert r0.energy_j == pytest.approx(10 * compute + 2 * transfer)
    assert r0.bytes == 4e6 and r1.time_s == pytest.approx(1.0)
    assert cumulative_hours([r0, r1]) == pytest.approx([11 / 3600, 12 / 3600])
    assert totals_up_to([r0, r1], 0).bytes == 4e6 and totals_up_to([r0, r1], None) is None


def test_target_never_reached_is_none():
    acc = {0: 0.3, 1: 0.5, 2: float("nan"), 3: 0.49}
    assert first_round_reaching(acc, 0.5) == 1
    assert first_round_reaching(acc, 0.51) is None


def test_calibration_fit_recovers_known_rates():
    r, o, m = 5e10, 0.01, 4e9
    rng = np.random.default_rng(0)
    timings = []
    for kind, flops, calls, upd in [
        ("train", 4e9, 1, 7e8),
        ("train", 1.6e10, 1, 7e8),
        ("train_bias", 5e9, 1, 1e6),
        ("infer", 1e10, 1, 0),
        ("infer", 1e9, 1, 0),
        ("infer", 4e10, 17, 0),
    ]:
        t = flops / r + calls * o + upd / m
        timings.append(Timing(kind, 4, 32, flops, calls, upd, t * (1 + 0.01 * rng.standard_normal())))
    result = fit(timings)
    assert result.flops_per_s == pytest.approx(r, rel=0.05)
    assert result.memory_bandwidth_Bps == pytest.approx(m, rel=0.1)
    assert result.median_abs_pct_error < 3 and math.isfinite(result.max_abs_pct_error)
