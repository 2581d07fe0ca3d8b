"""FesConfig: the whole run config, one typed section per YAML section, and `validate`, which
runs every section's checks and the one check across sections."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import FesError
from .common import CommonConfig, validate_common
from .data import DataConfig, validate_data
from .fedbert import MlmConfig, SplitConfig, validate_mlm, validate_split
from .labeling import (
    FilterConfig,
    PacingConfig,
    PromptConfig,
    PseudoConfig,
    validate_filter,
    validate_pacing,
    validate_prompt,
    validate_pseudo,
)
from .system import (
    CommConfig,
    CostConfig,
    DeviceConfig,
    TrackingConfig,
    validate_comm,
    validate_device,
    validate_tracking,
)
from .training import (
    ADAPTER_METHODS,
    AdapterConfig,
    ModelConfig,
    TrainConfig,
    TuningConfig,
    validate_adapter,
    validate_model,
    validate_train,
    validate_tuning,
)


@dataclass
class FesConfig:
    common_args: CommonConfig = field(default_factory=CommonConfig)
    data_args: DataConfig = field(default_factory=DataConfig)
    model_args: ModelConfig = field(default_factory=ModelConfig)
    train_args: TrainConfig = field(default_factory=TrainConfig)
    mlm_args: MlmConfig = field(default_factory=MlmConfig)
    prompt_args: PromptConfig = field(default_factory=PromptConfig)
    pseudo_args: PseudoConfig = field(default_factory=PseudoConfig)
    tuning_args: TuningConfig = field(default_factory=TuningConfig)
    adapter_args: AdapterConfig = field(default_factory=AdapterConfig)
    split_args: SplitConfig = field(default_factory=SplitConfig)
    filter_args: FilterConfig = field(default_factory=FilterConfig)
    pacing_args: PacingConfig = field(default_factory=PacingConfig)
    cost_args: CostConfig = field(default_factory=CostConfig)
    comm_args: CommConfig = field(default_factory=CommConfig)
    device_args: DeviceConfig = field(default_factory=DeviceConfig)
    tracking_args: TrackingConfig = field(default_factory=TrackingConfig)
    source: str = ""  # the YAML file this came from

    # Short aliases keep call sites readable: cfg.data.dataset rather than cfg.data_args...
    @property
    def common(self) -> CommonConfig:
        return self.common_args

    @property
    def data(self) -> DataConfig:
        return self.data_args

    @property
    def model(self) -> ModelConfig:
        return self.model_args

    @property
    def train(self) -> TrainConfig:
        return self.train_args

    @property
    def mlm(self) -> MlmConfig:
        return self.mlm_args

    @property
    def prompt(self) -> PromptConfig:
        return self.prompt_args

    @property
    def pseudo(self) -> PseudoConfig:
        return self.pseudo_args

    def for_round(
        self, round_idx: int, uses_pseudo: bool, bias_only: bool = False, every_layer: bool = False
    ) -> "FesConfig":
        """The config a client trains with in `round_idx`: tuning_args.bias_learning_rate when
        only biases train (all_bias_learning_rate, if set, when they are every layer's), and the
        warm-up's own lr and epochs before pseudo_args.start_round (methods with pseudo labels);
        else this one. tuning_args.bias_epochs likewise, and adapter_args.learning_rate for the
        adapter methods (adapter, lora)."""
        p, tu = self.pseudo, self.tuning
        lr = tu.bias_learning_rate if bias_only and tu.bias_learning_rate else self.train.learning_rate
        if bias_only and every_layer and tu.all_bias_learning_rate:
            lr = tu.all_bias_learning_rate
        if self.train.method in ADAPTER_METHODS and self.adapter.learning_rate:
            lr = self.adapter.learning_rate
        epochs = tu.bias_epochs if bias_only and tu.bias_epochs else self.train.epochs
        if uses_pseudo and round_idx < p.start_round:
            lr, epochs = p.warmup_learning_rate or lr, p.warmup_epochs or epochs
        if (lr, epochs) == (self.train.learning_rate, self.train.epochs):
            return self
        return dataclasses.replace(self, train_args=dataclasses.replace(self.train, learning_rate=lr, epochs=epochs))

    @property
    def tuning(self) -> TuningConfig:
        return self.tuning_args

    @property
    def adapter(self) -> AdapterConfig:
        return self.adapter_args

    @property
    def filter(self) -> FilterConfig:
        return self.filter_args

    @property
    def pacing(self) -> PacingConfig:
        return self.pacing_args

    @property
    def cost(self) -> CostConfig:
        return self.cost_args

    @property
    def comm(self) -> CommConfig:
        return self.comm_args

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {f.name: dataclasses.asdict(getattr(self, f.name)) for f in section_fields()}

    def fingerprint(self, *section_names: str) -> str:
        """Stable hash of the named sections (all when none): keys caches and run names."""
        d = self.to_dict()
        chosen = {k: d[k] for k in (section_names or d.keys())}
        return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:12]

    def flat_args(self) -> SimpleNamespace:
        """The flattened namespace FedML expects (`args.comm_round`, `args.backend`, ...).

        FedML's own sections come first and win: a FeS section's key of the same name
        (`filter_args.method`) never shadows theirs (`train_args.method`). FeS code reads
        the typed config, never these flat keys."""
        flat: dict[str, Any] = {}
        sections = self.to_dict()
        for name in FEDML_SECTIONS:
            flat.update(sections[name])
        for name, section in sections.items():
            if name not in FEDML_SECTIONS:
                flat.update({k: v for k, v in section.items() if k not in flat})
        flat["random_seed"] = self.common.random_seed
        flat["using_mlops"] = False
        return SimpleNamespace(**flat)

    def resolved_cache_dir(self) -> Path:
        return Path(self.common.cache_dir or os.path.join(self.common.output_dir, "cache"))


# the sections whose keys FedML itself reads from its flat args
FEDML_SECTIONS = ("common_args", "data_args", "model_args", "train_args", "comm_args", "device_args", "tracking_args")


def section_fields() -> list[dataclasses.Field]:
    """FesConfig's section fields (common_args, data_args, ...), in the YAML's order."""
    return [f for f in fields(FesConfig) if f.name != "source"]


def _validate_numbers(cfg: FesConfig) -> None:
    """Every float key finite (`.inf`, `.nan` or "1e999" fail here, naming the key, not at the
    first aggregation): a non-finite rate, timeout or bound has no meaning anywhere."""
    for sec in section_fields():
        section = getattr(cfg, sec.name)
        for f in fields(section):
            value = getattr(section, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise FesError(f"config key '{sec.name}.{f.name}' must be a finite number, got {value}")


def validate(cfg: FesConfig, given: "set[str] | frozenset[str] | None" = None) -> None:
    """Value checks that the type coercion cannot express, section by section. `given`: the
    'section.key's the config set itself (None: all); a default that does not fit is
    adjusted, not an error."""
    _validate_numbers(cfg)
    validate_common(cfg.common)
    validate_data(cfg.data)
    validate_train(cfg.train, cfg.data.client_num_in_total, given)
    validate_model(cfg.model)
    validate_mlm(cfg.mlm)
    validate_adapter(cfg.adapter)
    validate_split(cfg.split_args)
    validate_tracking(cfg.tracking_args)
    validate_device(cfg.device_args)
    validate_tuning(cfg.tuning)
    validate_filter(cfg.filter)
    validate_pacing(cfg.pacing)
    validate_pseudo(cfg.pseudo)
    validate_prompt(cfg.prompt)
    validate_comm(cfg.comm)
    from ..cost.settings import validate_cost  # one error line naming the key or the profile

    validate_cost(cfg.cost)
