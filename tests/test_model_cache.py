"""The default model's cached fp32 copy: converted fast and exactly, written atomically, checked on load,
rebuilt when damaged (issue 35 item 4, issue 38 section 2).

tests/data/smollm2_reference.json was recorded (scripts/record_smollm2_reference.py) from the copy that
commit c85d23a's load_model made with transformers' own GGUF loading: the fast converter must write the
same bytes, and the model it returns must give the same tokens and logits.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch

from paged_lab import _cache
from paged_lab._cache import DamagedCacheError, cached_model_dir, model_dir_problem, safetensors_problem
from paged_lab.models import SMOLLM2_CACHE_NAME, load_model

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data" / "smollm2_reference.json"
REFERENCE = json.loads(DATA.read_text(encoding="utf-8"))


def _record_module():
    """scripts/record_smollm2_reference.py: the facts recorded are computed by the same functions here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "record_smollm2_reference", Path(__file__).parents[1] / "scripts" / "record_smollm2_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORD = _record_module()


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """A cold load into an empty cache: (cache root, model, tokenizer)."""
    root = tmp_path_factory.mktemp("paged_lab_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PAGED_LAB_CACHE", str(root))
        model, tokenizer, _ = load_model(progress=False, device="cpu")
    return root, model, tokenizer


def test_the_fast_conversion_writes_the_slow_paths_bytes(cold):
    root, _, _ = cold
    folder = root / SMOLLM2_CACHE_NAME
    written = {p.name: {"sha256": RECORD.sha256(p), "bytes": p.stat().st_size}
               for p in sorted(folder.iterdir())}
    assert written == REFERENCE["files"]
    assert [p.name for p in root.iterdir()] == [SMOLLM2_CACHE_NAME]  # no temporary folder left behind


def test_the_cold_and_warm_loads_give_the_recorded_tokens_and_logits(cold, monkeypatch):
    root, cold_model, cold_tok = cold
    monkeypatch.setenv("PAGED_LAB_CACHE", str(root))
    warm_model, warm_tok, _ = load_model(progress=False, device="cpu")
    cold_facts = RECORD.model_facts(cold_model, cold_tok)
    warm_facts = RECORD.model_facts(warm_model, warm_tok)
    for facts in (cold_facts, warm_facts):
        assert facts["token_ids"] == REFERENCE["token_ids"] and facts["chat_ids"] == REFERENCE["chat_ids"]
        assert facts["greedy"] == REFERENCE["greedy"] and facts["top10_ids"] == REFERENCE["top10_ids"]
        # recorded on another machine: fp32 sums may round differently (AVX2 / AVX-512)
        assert facts["top10_logits"] == pytest.approx(REFERENCE["top10_logits"], abs=2e-4)
    # on one machine, the model the conversion returns and the one read back from the cache agree exactly
    assert cold_facts["top10_logits"] == warm_facts["top10_logits"]
    ids = cold_tok(REFERENCE["prompt"] * 3, return_tensors="pt").input_ids
    with torch.inference_mode():
        assert torch.equal(cold_model(ids).logits, warm_model(ids).logits)
    assert cold_model.config.to_dict() == warm_model.config.to_dict()
    assert cold_tok.name_or_path == warm_tok.name_or_path == str(root / SMOLLM2_CACHE_NAME)


@pytest.fixture
def damaged(cold, tmp_path, monkeypatch):
    """A copy of the cold load's cache in a fresh cache root (files hard-linked: a test replaces a file,
    never writes into one), set as PAGED_LAB_CACHE."""
    src = cold[0] / SMOLLM2_CACHE_NAME
    folder = tmp_path / SMOLLM2_CACHE_NAME
    shutil.copytree(src, folder, copy_function=lambda a, b: Path(b).hardlink_to(a))
    monkeypatch.setenv("PAGED_LAB_CACHE", str(tmp_path))
    return folder


def _loads_like_the_reference(folder):
    model, tokenizer, _ = load_model(progress=False, device="cpu")
    facts = RECORD.model_facts(model, tokenizer)
    assert facts["greedy"] == REFERENCE["greedy"]
    assert model_dir_problem(folder) is None
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # nothing half-built or damaged left


def test_a_deleted_config_json_is_rebuilt(damaged):
    (damaged / "config.json").unlink()
    assert model_dir_problem(damaged) == "config.json is missing"
    _loads_like_the_reference(damaged)


def test_weights_cut_in_half_are_rebuilt(damaged):
    weights = damaged / "model.safetensors"
    data = weights.read_bytes()
    weights.unlink()  # (a hard link: replace it, do not write into the cold fixture's file)
    weights.write_bytes(data[:len(data) // 2])
    says = "model.safetensors is 269,045,204 bytes, its header describes 538,090,408"
    assert model_dir_problem(damaged) == says
    _loads_like_the_reference(damaged)


def test_a_damaged_copy_that_cannot_be_rebuilt_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGED_LAB_CACHE", str(tmp_path))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{")

    def build(folder):
        raise PermissionError(13, "Permission denied", str(folder))

    with pytest.raises(DamagedCacheError, match="is damaged .* rebuilding it failed") as e:
        cached_model_dir("m", build)
    assert f"delete the folder {tmp_path / 'm'}" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # the temporary folder is gone


def test_an_interrupted_build_leaves_nothing_under_the_real_name(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGED_LAB_CACHE", str(tmp_path))

    def build(folder):
        (folder / "config.json").write_text("{}")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cached_model_dir("m", build)
    assert list(tmp_path.iterdir()) == []


def test_a_build_that_writes_an_incomplete_folder_is_not_renamed_into_place(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGED_LAB_CACHE", str(tmp_path))
    with pytest.raises(DamagedCacheError, match="tokenizer.json is missing"):
        cached_model_dir("m", lambda folder: (folder / "config.json").write_text("{}"))
    assert list(tmp_path.iterdir()) == []


def test_safetensors_problems_are_named(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({"a": torch.ones(100), "b": torch.zeros(3, 4)}, path)
    assert safetensors_problem(path) is None
    whole = path.read_bytes()
    cuts = [(4, "shorter than a safetensors header"), (20, "header of"), (len(whole) - 1, "describes")]
    for cut, says in cuts:
        path.write_bytes(whole[:cut])
        assert says in safetensors_problem(path)
    path.write_bytes(whole + b"\0")
    assert "describes" in safetensors_problem(path)
    assert _cache.MODEL_FILES[-1] == "model.safetensors"


def test_binder_builds_the_model_and_the_kernels_into_the_image():
    """binder/postBuild runs paged_lab.tools.prebuild: the model's cached copy and each C library."""
    from paged_lab.tools.prebuild import prebuild

    post_build = (Path(__file__).parents[1] / "binder" / "postBuild").read_text()
    assert "\npython -m paged_lab.tools.prebuild\n" in post_build
    done = prebuild(progress=False)
    assert list(done.values())[0] == "ready"
    assert model_dir_problem(_cache.cache_root() / SMOLLM2_CACHE_NAME) is None
    assert [k for k in done if k.startswith("C kernels")] == [
        "C kernels paged_attention.c", "C kernels panel_gemm.c", "C kernels layer_ops.c"]
    from paged_lab.kernels.cpu import attention as cpu_attention

    assert all(v == "ready" for v in done.values()) == (cpu_attention.why_unavailable() is None)
