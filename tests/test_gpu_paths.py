"""The CUDA code paths, checked on a CPU: notebooks 06/07 with CUDA reported present, the dtype and
model choices for a T4 / A100 / CPU, the token comparison with a near-tie margin, the benchmark
scripts' arguments. Nothing here measures a GPU."""

import ast
from pathlib import Path

import nbformat
import pytest
import torch
from scriptkit import load_script

import paged_lab
from paged_lab.tools import gpu

ROOT = Path(__file__).resolve().parents[1]
NB06 = ROOT / "notebooks" / "06_triton_paged_attention.ipynb"
NB07 = ROOT / "notebooks" / "07_paged_engine_real_model.ipynb"
CONSTRUCTORS = {"randn", "zeros", "ones", "full", "arange", "tensor", "empty", "rand", "randint",
                "random_paged_kv"}


def _load_script(path: Path):
    return load_script(path)


def _code_cells(path):
    return [c for c in nbformat.read(path, 4).cells if c.cell_type == "code"]


def _fake_gpu(monkeypatch, cc=(8, 0), name="NVIDIA A100-SXM4-80GB"):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cc)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)


# ------------------------------------------------------------------------------------- notebook 06
def _tensors_off_device(source: str) -> list[str]:
    """Tensor constructors that neither pass ``device=`` nor are moved with ``.to(DEVICE)``."""
    tree = ast.parse(source)
    moved = {id(n.func.value) for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute)
             and n.func.attr == "to" and any(isinstance(a, ast.Name) and a.id == "DEVICE"
                                             for a in n.args)}  # fmt: skip
    bad = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        # tl.arange: device code
        in_kernel = isinstance(n.func, ast.Attribute) and getattr(n.func.value, "id", "") == "tl"
        if (name in CONSTRUCTORS and not in_kernel and id(n) not in moved
                and not any(k.arg == "device" for k in n.keywords)):
            bad.append(ast.unparse(n)[:80])
    return bad


def test_notebook_06_builds_every_tensor_on_device():
    """Tensors left on the CPU meet CUDA-compiled kernels on a GPU machine ("needs Triton's interpreter")."""
    bad = [b for c in _code_cells(NB06) for b in _tensors_off_device(c.source)]
    assert not bad, f"tensors not on DEVICE in notebook 06: {bad}"
    assert _tensors_off_device("x = torch.zeros(3)") == ["torch.zeros(3)"]  # the check itself can fail


@pytest.mark.slow
def test_notebook_06_takes_its_gpu_path_when_cuda_is_present(monkeypatch, capsys):
    """Run notebook 06's cells in this process with CUDA reported present (an A100). Tensors stay on the
    CPU (DEVICE is patched to "cpu": there is no GPU to put them on) and the GPU benchmark is replaced
    by a recorder; what is checked is the control flow: which cells take the GPU branch, which skip."""
    import plotly.graph_objects as go

    from paged_lab.tools import kernel_bench as bench

    _fake_gpu(monkeypatch)
    monkeypatch.setattr(paged_lab, "device", lambda: "cpu")
    monkeypatch.setattr(go.Figure, "show", lambda self, *a, **k: None)
    sweeps = []

    def fake_sweep(**kw):
        sweeps.append(kw)
        return [dict(context_len=1024, batch=1, block_size=16, paged_ms=1.0, sdpa_ms=1.0, gbs=1.0,
                     pct_peak=None,
                     max_abs_err=0.0)]  # fmt: skip

    monkeypatch.setattr(bench, "sweep", fake_sweep)
    monkeypatch.setattr("paged_lab.viz.kernels.fig_kernel_bench", lambda rows, metric: go.Figure())
    ns = {"__name__": "__main__"}
    printed = []
    for i, cell in enumerate(_code_cells(NB06)):
        exec(compile(cell.source, f"<notebook 06 cell {i} ({cell.get('id')})>", "exec"), ns)
        printed.append(capsys.readouterr().out)
    out = "\n".join(printed)
    assert "skipped" not in out, "with CUDA present no cell of notebook 06 may skip"
    # the benchmark ran (GPU branch) on DEVICE
    assert len(sweeps) == 1 and sweeps[0]["device"] == ns["DEVICE"]
    assert sweeps[0]["dtype"] == getattr(torch, gpu.model_dtype(ns["DEVICE"]))  # bf16 / fp16 on a real GPU
    assert "NVIDIA A100-SXM4-80GB: " in out
    # DEVICE is the CPU here; on a real GPU: "compiled for sm_80"
    assert "Triton, Triton's interpreter" in out


# ----------------------------------------------------------------------------- dtype, model, Triton
def test_dtype_is_fp16_on_a_t4_bf16_from_sm80_fp32_on_cpu(monkeypatch):
    assert gpu.model_dtype("cpu") == "float32"
    _fake_gpu(monkeypatch, cc=(7, 5), name="Tesla T4")
    assert gpu.model_dtype("cuda") == "float16" and "no bf16" in gpu.dtype_reason("cuda")
    assert gpu.triton_mode("cuda") == "compiled for sm_75 (Tesla T4)"
    _fake_gpu(monkeypatch, cc=(9, 0), name="NVIDIA H100 80GB HBM3")
    assert gpu.model_dtype("cuda") == "bfloat16"


def test_llama_name_needs_a_token_for_the_real_weights():
    assert gpu.llama_model_name({}) == "random:llama-3.2-1b"
    assert gpu.llama_model_name({"HF_TOKEN": "hf_x"}) == "meta-llama/Llama-3.2-1B"
    assert gpu.llama_model_name({"HUGGING_FACE_HUB_TOKEN": "hf_x"}) == "meta-llama/Llama-3.2-1B"
    assert gpu.llama_model_name({"HF_TOKEN": ""}) == "random:llama-3.2-1b"


# ------------------------------------------------------------------------- greedy tokens, near-ties
def test_compare_greedy_is_exact_without_a_margin():
    assert gpu.compare_greedy([1, 2, 3], [1, 2, 3]).equal
    m = gpu.compare_greedy([1, 2, 4], [1, 2, 3])
    assert not m.equal and m.first_difference == 2 and m.compared == 3
    assert not gpu.compare_greedy([1, 2], [1, 2, 3]).equal  # a shorter answer is a difference


def test_compare_greedy_stops_at_the_first_near_tie():
    gaps = [2.0, 1.5, 0.05, 3.0]
    m = gpu.compare_greedy([5, 6, 9, 9], [5, 6, 7, 8], gaps, margin=0.25)
    assert m.equal and m.near_tie_at == 2 and m.compared == 2 and m.first_difference == 2
    m = gpu.compare_greedy([5, 0, 7, 8], [5, 6, 7, 8], gaps, margin=0.25)
    assert not m.equal and m.first_difference == 1  # a difference before the tie is a real one
    with pytest.raises(ValueError, match="ref_top2_gaps"):
        gpu.compare_greedy([1], [1], None, margin=0.1)


def test_hf_greedy_moves_input_ids_to_the_model_and_reports_gaps():
    from paged_lab.kv_math import ModelSpec
    from paged_lab.models import random_model

    spec = ModelSpec("t", 1, 2, 1, 64, 128, 300, 0, 128, 128, True)
    model, tok, _ = random_model(spec)
    ids = tok("hello").input_ids
    tokens, gaps = gpu.hf_greedy(model, ids, 5, pad_token_id=tok.eos_token_id)
    assert len(tokens) == len(gaps) == 5 and all(g >= 0 for g in gaps)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1]
    top = logits.topk(2).values
    assert tokens[0] == int(logits.argmax()) and gaps[0] == pytest.approx(float(top[0] - top[1]), abs=1e-4)


# ----------------------------------------------------------------------------- notebook 07 GPU cells
def test_notebook_07_gpu_cells_move_inputs_and_pick_dtype_and_model():
    src = "\n".join(c.source for c in _code_cells(NB07))
    assert "model_dtype(" in src and "llama_model_name(" in src
    assert "compare_greedy(" in src and "hf_greedy(" in src
    gpu_cells = [c.source for c in _code_cells(NB07) if "torch.cuda.is_available()" in c.source]
    assert gpu_cells and not any(".input_ids" in s and "hf_greedy" not in s and ".to(" not in s
                                 for s in gpu_cells)
    assert not any('"meta-llama/Llama-3.2-1B-Instruct"' in s for s in gpu_cells)  # chosen by llama_model_name


# ------------------------------------------------------------------------------ benchmark scripts
def test_decode_step_bench_loads_the_model_on_the_cpu(monkeypatch):
    mod = _load_script(ROOT / "benchmarks" / "decode_step_bench.py")
    seen = {}
    monkeypatch.setattr(mod, "load_model", lambda *a, **k: seen.update(k) or (None, None, None))
    _fake_gpu(monkeypatch)
    mod.load_cpu_model()
    assert seen["device"] == "cpu"


@pytest.fixture
def kernel_bench():
    return _load_script(ROOT / "benchmarks" / "kernel_bench.py")


def test_kernel_bench_rejects_bad_arguments(kernel_bench, capsys):
    for argv, msg in ((["--block-sizes", "16,24"], "not supported"), (["--iters", "0"], "must be >= 1"),
                      (["--batches", "0,8"], "positive"), (["--block-sizes", "x"], "integers"),
                      (["--heads", "30", "--kv-heads", "8"], "multiple"),
                      (["--peak-gbs", "0"], "> 0")):  # fmt: skip
        with pytest.raises(SystemExit):
            kernel_bench.parse_args(argv)
        assert msg in capsys.readouterr().err, argv


def test_kernel_bench_quick_keeps_explicit_grids(kernel_bench):
    args = kernel_bench.parse_args(["--quick", "--block-sizes", "64"])
    assert args.block_sizes == [64] and args.context_lens == kernel_bench.QUICK["context_lens"]
    full = kernel_bench.parse_args([])
    assert full.block_sizes == kernel_bench.FULL["block_sizes"] and full.iters == 50


def test_peak_bandwidth_matches_gpu_names_exactly():
    from paged_lab.tools import kernel_bench as bench

    assert bench.peak_gbs_for_name("NVIDIA A100-SXM4-80GB") == 2039
    assert bench.peak_gbs_for_name("NVIDIA A10") == 600
    assert bench.peak_gbs_for_name("NVIDIA A100-SXM4-64GB") is None  # unknown A100: no A10 fallback
    assert bench.peak_gbs_for_name("Tesla T4") == 320
    assert bench.peak_gbs_for_name("NVIDIA GeForce RTX 4090") == 1008
    assert (bench.peak_gbs_for_name("NVIDIA H100 PCIe") == 2000
            and bench.peak_gbs_for_name("NVIDIA H200") == 4800)
    assert bench.peak_gbs_for_name("NVIDIA L40S") == 864 and bench.peak_gbs_for_name("NVIDIA L4") == 300


def test_bytes_counted_exclude_what_l2_may_hold():
    from paged_lab.tools import kernel_bench as bench

    assert bench.hbm_bytes(100 << 20, 50 << 20, l2_flushed=True) == 100 << 20
    assert bench.hbm_bytes(100 << 20, 50 << 20, l2_flushed=False) == 50 << 20
    assert bench.hbm_bytes(10 << 20, 50 << 20, l2_flushed=False) == 0  # fits in L2: no HBM traffic to claim
    with pytest.raises(ValueError, match="iters"):
        bench.median_ms(lambda: None, device="cpu", iters=0)
