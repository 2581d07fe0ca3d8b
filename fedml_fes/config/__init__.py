"""Typed run configuration parsed from a FedML-style YAML file.

The YAML has FedML's section layout (`common_args`, `data_args`, `model_args`,
`train_args`, ...). FedML flattens all sections into one `args` namespace; we keep them as
dataclasses so that every key is declared once, with its type and default, and a typo is
an error that names the key instead of a silently ignored attribute.

Each section's dataclass and its checks sit together, by topic: `common` (common_args),
`data` (data_args), `training` (model, train, tuning and adapter args), `fedbert` (mlm and
split args), `labeling` (prompt, pseudo, filter and pacing args), `system` (comm, device,
tracking and cost args). `schema` assembles them into `FesConfig` and `validate`; `load`
reads a YAML file, `--set` overrides and a run folder's config.yaml; `paths` makes input
paths absolute.
Import everything from `fedml_fes.config`.
"""

from .common import OFFLINE_MINILM, CommonConfig
from .data import DATASET_ALIASES, DATASETS, DELIMITER_NAMES, PARTITIONS, DataConfig
from .fedbert import LR_SCHEDULES, SPLIT_SCHEDULES, SPLIT_TASKS, MlmConfig, SplitConfig, validate_mlm, validate_split
from .labeling import FilterConfig, PacingConfig, PromptConfig, PseudoConfig
from .load import (
    RUN_CONFIG_FILE,
    add_set_argument,
    apply_overrides,
    config_from_dict,
    load_config,
    load_run_config,
    parse_overrides,
    read_run_sections,
    read_sections,
)
from .paths import (
    INPUT_PATH_KEYS,
    NAME_OR_PATH_KEYS,
    PROFILE_LIST_KEYS,
    resolve_override_paths,
    resolve_path_value,
    resolve_paths,
)
from .schema import FEDML_SECTIONS, FesConfig, validate
from .system import LOG_LEVELS, CommConfig, CostConfig, DeviceConfig, TrackingConfig
from .training import ADAPTER_METHODS, METHODS, AdapterConfig, ModelConfig, TrainConfig, TuningConfig, validate_adapter

__all__ = [
    "ADAPTER_METHODS",
    "DATASETS",
    "DATASET_ALIASES",
    "DELIMITER_NAMES",
    "FEDML_SECTIONS",
    "INPUT_PATH_KEYS",
    "LOG_LEVELS",
    "LR_SCHEDULES",
    "METHODS",
    "NAME_OR_PATH_KEYS",
    "OFFLINE_MINILM",
    "PARTITIONS",
    "PROFILE_LIST_KEYS",
    "RUN_CONFIG_FILE",
    "SPLIT_SCHEDULES",
    "SPLIT_TASKS",
    "AdapterConfig",
    "CommConfig",
    "CommonConfig",
    "CostConfig",
    "DataConfig",
    "DeviceConfig",
    "FesConfig",
    "FilterConfig",
    "MlmConfig",
    "ModelConfig",
    "PacingConfig",
    "PromptConfig",
    "PseudoConfig",
    "SplitConfig",
    "TrackingConfig",
    "TrainConfig",
    "TuningConfig",
    "add_set_argument",
    "apply_overrides",
    "config_from_dict",
    "load_config",
    "load_run_config",
    "parse_overrides",
    "read_run_sections",
    "read_sections",
    "resolve_override_paths",
    "resolve_path_value",
    "resolve_paths",
    "validate",
    "validate_adapter",
    "validate_mlm",
    "validate_split",
]
