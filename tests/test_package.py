import importlib

import paged_lab


def test_public_names_import():
    for name in paged_lab.__all__:
        assert getattr(paged_lab, name) is not None, name


def test_subpackages_import():
    for mod in ["kv_math", "models", "memory", "sched", "kernels", "viz", "viz.widgets"]:
        importlib.import_module(f"paged_lab.{mod}")
