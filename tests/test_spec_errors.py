"""Bad model specs and layer groups get a clear error naming the argument and the limit (issue 35 item 8).

Before: ModelSpec took 2.5 layers and a head_dim of 16.5 (float byte counts) and -5 parameters, None
parameters failed later with a TypeError; from_hf_config raised a bare KeyError or ZeroDivisionError;
group_layers took another model's groups; kv_cache_groups read a string letter by letter.
"""

from __future__ import annotations

import pytest

from paged_lab.kv_math import ModelSpec
from paged_lab.memory.errors import InvalidBlockConfig
from paged_lab.memory.layer_groups import group_layers, kv_cache_groups

GOOD = dict(name="m", num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, hidden_size=64, vocab_size=100,
            num_params=1000)
CONFIG = {"num_attention_heads": 4, "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}


def test_a_good_spec_is_accepted():
    assert ModelSpec(**GOOD).kv_bytes_per_token("float32") == 2 * 2 * 2 * 16 * 4
    assert ModelSpec(**{**GOOD, "num_params": 0}).weight_bytes() == 0  # 0: not known (KV math only)


@pytest.mark.parametrize("field, value, limit", [
    ("num_layers", 2.5, ">= 1"), ("head_dim", 16.5, ">= 1"), ("num_kv_heads", 2.0, ">= 1"),
    ("num_params", -5, ">= 0"), ("num_params", None, ">= 0"), ("num_params", 1.5e9, ">= 0"),
    ("hidden_size", True, ">= 1"), ("intermediate_size", 1.5, ">= 0"),
])
def test_a_count_that_is_not_a_whole_number_is_named(field, value, limit):
    with pytest.raises(ValueError, match=rf"{field} must be an integer {limit}, got {value!r}"):
        ModelSpec(**{**GOOD, field: value})


@pytest.mark.parametrize("key", sorted(CONFIG))
def test_from_hf_config_names_a_missing_key(key):
    config = {k: v for k, v in CONFIG.items() if k != key}
    with pytest.raises(ValueError, match=f"config: lacks '{key}'"):
        ModelSpec.from_hf_config(config)


def test_from_hf_config_names_zero_heads():
    assert ModelSpec.from_hf_config(CONFIG).head_dim == 16
    with pytest.raises(ValueError, match=r"config\['num_attention_heads'\] must be an integer >= 1, got 0"):
        ModelSpec.from_hf_config({**CONFIG, "num_attention_heads": 0})


def test_group_layers_refuses_another_models_groups():
    hybrid = ["sliding_attention", "full_attention"] * 2
    with pytest.raises(InvalidBlockConfig, match=r"no layer, or more than num_layers, for \["):
        group_layers(["full_attention"] * 4, kv_cache_groups(hybrid, 8))
    assert group_layers(hybrid, kv_cache_groups(hybrid, 8)) == {"full_attention": [1, 3],
                                                                "sliding_attention": [0, 2]}


def test_one_layer_type_instead_of_a_list_is_named():
    with pytest.raises(InvalidBlockConfig, match=r"layer_types: must be a list with one type per layer"):
        kv_cache_groups("full_attention", 4)
    with pytest.raises(InvalidBlockConfig, match=r"layer_types: must be a list"):
        group_layers("full_attention", kv_cache_groups(["full_attention"]))
