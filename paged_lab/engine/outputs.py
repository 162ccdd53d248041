"""Output processing: the stops the Scheduler does not know, and each request's ``RequestOutput``.

The Scheduler stops a completion at max_tokens and at the model's first EOS id; here the engine finds
the other stops: the model's extra EOS ids and ``SamplingParams.stop`` strings, which need the text.
vLLM V1 does the same outside its scheduler: its output processor detokenizes, finds the stop strings and
returns the requests they stopped (``reqs_to_abort``), which ``LLMEngine.step`` then aborts in the
scheduler (``vllm/v1/engine/llm_engine.py``:352).
"""

from __future__ import annotations

from paged_lab.engine.params import CompletionOutput, RequestMetrics, RequestOutput
from paged_lab.engine.request import EngineRequest, RequestTable
from paged_lab.sched import Sequence


class OutputProcessor:
    """Finds stops and makes outputs for the requests of ``requests`` (``RequestTable``), decoding with
    ``tokenizer``; ``eos_token_ids``: the model's (the first is the one the Scheduler stops on)."""

    def __init__(self, tokenizer, eos_token_ids: list[int], requests: RequestTable):
        self.tokenizer, self.eos_token_ids, self.requests = tokenizer, eos_token_ids, requests

    def stopped(self, seqs: list[Sequence]) -> list[Sequence]:
        """The running ``seqs`` whose last token is an extra EOS id of the model, or whose text now holds
        a stop string: the engine finishes them ("stop")."""
        out = []
        for seq in seqs:
            if seq.is_finished or not seq.num_output_tokens:
                continue
            params = self.requests[seq.seq_id].params
            if not params.ignore_eos and seq.token_ids[-1] in self.eos_token_ids[1:]:
                out.append(seq)
            elif params.stop and cut_at_stop(self.decode(seq.output_token_ids), params.stop) is not None:
                out.append(seq)
        return out

    def output(self, req: EngineRequest, metrics: RequestMetrics) -> RequestOutput:
        """``req``'s RequestOutput: each completion's text (cut before a stop string), token ids and
        finish reason, with the prompt tokens found in the prefix cache and its ``metrics``."""
        outs = []
        for i, seq in enumerate(req.seqs):
            ids = list(seq.output_token_ids)
            text, reason = self.decode(ids), seq.finish_reason
            cut = cut_at_stop(text, req.params.stop)
            if cut is not None:  # the stop string is not part of the returned text
                text, reason = cut, "stop"
            outs.append(CompletionOutput(i, text, ids, reason))
        return RequestOutput(req.request_id, req.prompt, req.prompt_token_ids, outs,
                             req.num_cached_tokens or 0, metrics)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def cut_at_stop(text: str, stops: list[str]) -> str | None:
    """``text`` up to the first stop string, or None when none occurs."""
    hits = [text.find(s) for s in stops if s in text]
    return text[: min(hits)] if hits else None
