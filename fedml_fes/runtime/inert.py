"""Which config keys a method never reads, so that a change there cannot change its run: the
benchmarks' resume check and the fidelity suite's shared-config check ignore them."""

from __future__ import annotations

from ..tuning.adapters import KINDS as ADAPTER_KINDS
from .methods import PRESETS, AdapterTuning


def tuning_mode(method_name: str, model_tuning: str) -> str:
    """What a method's run trains: its own fixed mode (FeS "plan", FedFSL-BIAS "bias", an adapter
    kind), else model_args.tuning ("full", "bias" or "plan")."""
    method = PRESETS.get(method_name)
    return getattr(method() if method else None, "tuning", None) or model_tuning


def inert_keys(method_name: str, model_tuning: str) -> frozenset[str]:
    """Config sections ("tuning_args") and single keys ("pacing_args.train_sampling") a method
    never reads, so a change there cannot change its run (the benchmarks' resume check and
    shared-config check ignore them): `tuning_args` (layer plan, bias-only lr and epochs,
    activation cache) for a method that trains every weight, its every-layer bias lr for any
    method but fedfsl_bias; FeS's pacing-only keys for a
    method without curriculum pacing; `adapter_args` for a method without adapters;
    `pseudo_args` and `filter_args` for a method that never pseudo-labels (FedCLS, Prompt-only)."""
    method = PRESETS.get(method_name)
    made = method() if method else None
    mode = tuning_mode(method_name, model_tuning)
    inert = {"tuning_args"} if mode == "full" else set()
    if mode != "bias":  # only BitFit over every layer reads it
        inert.add("tuning_args.all_bias_learning_rate")
    if mode != "plan":  # only FeS's layer plan trains norm gains, LoRA beside its biases or (IA)^3
        inert |= {
            "tuning_args.norm_gains",
            "tuning_args.lora_rank",
            "tuning_args.lora_learning_rate",
            "tuning_args.capacity",
            "tuning_args.ia3_learning_rate",
        }
    if mode not in ("bias", "plan"):  # a class head trains only beside biases
        inert.add("tuning_args.verbalizer_head")
    if mode not in ADAPTER_KINDS:
        inert.add("adapter_args")
    else:  # adapters read only the activation cache's switch from tuning_args
        inert |= {
            f"tuning_args.{k}"
            for k in (
                "full_layers",
                "bias_layers",
                "bias_learning_rate",
                "all_bias_learning_rate",
                "bias_epochs",
                "bias_sites",
            )
        }
    if made is not None and getattr(made, "pacing", "count") == "count":
        inert |= {"pacing_args.train_sampling", "pacing_args.val_signal"}
        if not isinstance(made, AdapterTuning):  # its progressive configurator holds validation out too
            inert.add("pacing_args.val_holdout")
    if made is not None and not made.uses_pseudo:
        inert |= {"pseudo_args", "filter_args"}
    if made is not None and not getattr(made, "prompt", False):  # a head classifier or the MLM build itself
        inert |= {"model_args.mlm_from", "model_args.mlm_on_job_data", "tuning_args.verbalizer_head"}
    return frozenset(inert)


def is_inert(key: str, inert: frozenset[str]) -> bool:
    """`key` ("section.name") is covered by `inert_keys`' answer."""
    return key in inert or key.split(".")[0] in inert
