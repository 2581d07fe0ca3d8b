import subprocess
import sys

import pytest

from fedml_fes.errors import FesError
from fedml_fes.model_files import resolve_model_path
from fedml_fes.models import build_classifier, build_masked_lm, load_tokenizer


def test_offline_alias_resolves_to_packaged_weights():
    path = resolve_model_path("offline:all-MiniLM-L6-v2")
    assert path.endswith("model")


def test_path_without_weights_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FesError, match="has no weights"):
        resolve_model_path(str(tmp_path))
    with pytest.raises(FesError, match="model path not found"):
        resolve_model_path(str(tmp_path / "missing"))


def test_tiny_models_build_from_path(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    assert tok.mask_token == "[MASK]"
    clf = build_classifier(tiny_model_dir, 5, seed=0)
    assert clf.config.num_labels == 5
    a, b = build_masked_lm(tiny_model_dir, 1), build_masked_lm(tiny_model_dir, 1)
    assert all((x == y).all() for x, y in zip(a.parameters(), b.parameters()))


@pytest.mark.slow
def test_core_does_not_import_fedml():
    code = (
        "import sys, importlib, pkgutil, fedml_fes\n"
        "for m in pkgutil.walk_packages(fedml_fes.__path__, 'fedml_fes.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = [m for m in sys.modules if m == 'fedml' or m.startswith('fedml.')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
