"""Record what the default model's converted copy is, for tests/test_model_cache.py.

    PAGED_LAB_CACHE=/tmp/empty python scripts/record_smollm2_reference.py FOLDER

FOLDER: a converted copy (``<cache>/smollm2-135m-instruct-fp32``). Writes tests/data/smollm2_reference.json:
each file's SHA-256 and size, the token ids of a few texts, and a fixed prompt's greedy tokens and
last-position top-10 logits (fp32, CPU). Recorded once from the copy made by commit c85d23a's
``load_model`` (transformers' own ``from_pretrained(..., gguf_file=...)`` conversion); the fast
converter must reproduce it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "smollm2_reference.json"
TEXTS = ["The capital of France is", "Paged attention hands out KV memory one block at a time.",
         "def fibonacci(n):\n    return n", "Café – naïve 東京 🙂 <|im_start|>", "  two  spaces\tand a tab"]
PROMPT = "The capital of France is"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_facts(model, tokenizer) -> dict:
    """Token ids of TEXTS and of the chat template, PROMPT's greedy tokens and top-10 logits."""
    import torch

    chat = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.inference_mode():
        logits = model(ids).logits[0, -1]
        greedy = model.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1]:]
    top = torch.topk(logits, 10)
    return {"token_ids": {t: tokenizer(t).input_ids for t in TEXTS},
            "chat_ids": list(chat["input_ids"] if hasattr(chat, "keys") else chat),
            "greedy": greedy.tolist(), "top10_ids": top.indices.tolist(), "top10_logits": top.values.tolist()}


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(sys.argv[1])
    files = {p.name: {"sha256": sha256(p), "bytes": p.stat().st_size} for p in sorted(folder.iterdir())}
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    facts = model_facts(model, AutoTokenizer.from_pretrained(folder))
    record = {"files": files, "prompt": PROMPT, **facts}
    OUT.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
