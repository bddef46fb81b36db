"""Models -> samplers for the evaluation stages, with at most one model in memory.

Why a module of its own: only the stages that sample import it, so a change to the sampling code reruns those
stages and not the ones that write data or train (dvc.yaml's code deps follow the imports; tools/dvc_deps.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from gapo.models import ModelLoadError, check_adapter
from gapo.repro.sampling import make_sampler


class Samplers(Mapping):
    """`name -> Sampler` for the named `models` entries, loading lazily and keeping one model loaded.

    Entries that share a base model and adapter (the min-p rows) reuse the loaded model. Experiments that take a
    mapping of samplers (`haiku_map`, `figure7_data`) walk it model by model, so only one model is ever resident.
    With the vllm backend the engine outlives `release`: one engine per base model serves every adapter on it as a
    LoRA request (`gapo.repro.sampling.vllm_engine`), since vLLM does not give an engine's GPU memory back.
    """

    def __init__(
        self,
        names: Sequence[str],
        models: Mapping[str, Mapping[str, Any]],
        sampling: Mapping[str, Any],
        **defaults: Any,
    ) -> None:
        self.names = list(names)
        self.models = models
        self.sampling = dict(sampling)
        self.defaults = defaults
        self._key: tuple[Any, ...] | None = None
        self._sampler: Any = None

    def __getitem__(self, name: str) -> Any:
        if name not in self.names:
            raise KeyError(name)
        spec = self.models[name]
        key = (spec["model"], spec.get("adapter"), self.sampling.get("backend", "transformers"))
        if key != self._key:
            self.release()
            self._sampler = load_sampler(spec, self.sampling, **self.defaults)
            self._key = key
        return self._sampler.with_params(min_p=float(spec.get("min_p") or 0.0))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def label(self, name: str) -> str:
        return str(self.models[name].get("label") or name)

    def release(self) -> None:
        """Drop the loaded model (and free accelerator memory)."""
        self._sampler, self._key = None, None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def load_sampler(spec: Mapping[str, Any], sampling: Mapping[str, Any], **defaults: Any) -> Any:
    """A `Sampler` for one `models` entry; `defaults` are SamplingParams fields (seed, max_new_tokens)."""
    adapter = spec.get("adapter")
    if adapter is not None:  # before any model loads; the adapter is a training stage's output
        try:
            check_adapter(adapter)
        except ModelLoadError as err:
            raise FileNotFoundError(f"{err}: run its training stage") from None
    params = {k: sampling[k] for k in ("temperature", "top_p", "batch_size", "response_prefix") if k in sampling}
    params.update(defaults)
    params["min_p"] = float(spec.get("min_p") or 0.0)
    return make_sampler(spec["model"], adapter=adapter, backend=sampling.get("backend", "transformers"), **params)


def evaluate_models(
    samplers: Samplers,
    evaluate: Callable[[Any, Path | None], Any],
    raw_dir: str | Path | None,
    headline: Callable[[str, Any], str] | None = None,
) -> dict[str, Any]:
    """``{name: evaluate(sampler, raw_file)}`` model by model (one model in memory), then release the last one.

    ``raw_file`` is ``raw_dir/<name>.json`` (None when `raw_dir` is None); `headline(name, result)` is printed.
    """
    results = {}
    for name in samplers:
        out = Path(raw_dir) / f"{name}.json" if raw_dir is not None else None
        results[name] = evaluate(samplers[name], out)
        if headline is not None:
            print(headline(name, results[name]))
    samplers.release()
    return results


def require_adapter(spec: Mapping[str, Any], name: str, stage: str = "train_gapo") -> None:
    """Stop before anything runs when a model's LoRA adapter (a training stage's output) is missing or incomplete."""
    adapter = spec.get("adapter")
    try:
        check_adapter(adapter or "")
    except ModelLoadError:
        raise FileNotFoundError(f"models.{name} has no LoRA adapter at {adapter}: run stage {stage} first") from None
