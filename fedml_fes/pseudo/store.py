"""Per-client state on the client's own "disk": `<run_dir>/clients/<id>/`.

Whichever process plays client c reads and writes c's state, as a phone reads its own
storage; nothing of it travels to the server. Writes are atomic (temp file + rename).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class PseudoLabels:
    """Pseudo labels a client holds: example ids of its pool, argmax labels, probabilities."""

    example_ids: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    probs: list[list[float]] = field(default_factory=list)
    passes: int = 0  # labeling passes this client has run

    def __len__(self) -> int:
        return len(self.example_ids)


class ClientStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def client_dir(self, client_id: int) -> Path:
        return self.root / str(client_id)

    def _path(self, client_id: int, name: str) -> Path:
        return self.client_dir(client_id) / name

    def _pseudo_path(self, client_id: int, trial: bool) -> Path:
        """A pacing trial's labels live beside the client's own and never replace them."""
        return self._path(client_id, "pseudo_labels.trial.json" if trial else "pseudo_labels.json")

    def load_pseudo(self, client_id: int, trial: bool = False) -> PseudoLabels:
        p = self._pseudo_path(client_id, trial)
        return PseudoLabels(**json.loads(p.read_text())) if p.is_file() else PseudoLabels()

    def save_pseudo(self, client_id: int, labels: PseudoLabels, trial: bool = False) -> None:
        p = self._pseudo_path(client_id, trial)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(asdict(labels)))
        tmp.replace(p)
