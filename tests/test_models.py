"""Model loading: the embedded GGUF cache (assembly, verification, repair), conversion, tiny-random, clear errors."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
import torch

from gapo import models
from gapo.repro import offline


@pytest.fixture()
def private_cache(tmp_path, monkeypatch):  # noqa: ANN001, ANN201
    monkeypatch.setenv("GAPO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_gguf_is_assembled_verified_and_repaired(private_cache):  # noqa: ANN001
    path = offline.embedded_gguf_path()
    assert path.stat().st_size == offline.EMBEDDED_GGUF_SIZE
    assert offline.sha256_file(path) == offline.EMBEDDED_GGUF_SHA256
    # Truncate it (an interrupted copy): the next call re-assembles a good file.
    with open(path, "r+b") as f:
        f.truncate(1000)
    assert offline.embedded_gguf_path() == path and path.stat().st_size == offline.EMBEDDED_GGUF_SIZE
    # Corrupt it in place with the same size, after it was verified: every use re-checks the hash, so it is
    # re-assembled instead of being converted (an old `.verified` marker is not trusted).
    path.with_suffix(".verified").touch()
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(b"\x00" * 64)
    offline.embedded_gguf_path()
    assert offline.sha256_file(path) == offline.EMBEDDED_GGUF_SHA256
    assert not list(path.parent.glob("*.partial")) and not path.with_suffix(".verified").exists()


def test_gguf_that_cannot_be_fixed_is_refused(private_cache, monkeypatch):  # noqa: ANN001
    monkeypatch.setattr(offline, "EMBEDDED_GGUF_SHA256", "0" * 64)  # as if the installed parts were wrong
    with pytest.raises(models.ModelLoadError, match="does not match sha256.*force-reinstall"):
        offline.embedded_gguf_path()
    assert not list(private_cache.rglob("*.gguf"))  # nothing half-written left behind


def test_bad_source_parts_are_refused_in_one_line_by_the_cli(private_cache, tmp_path, monkeypatch, capsys):  # noqa: ANN001
    """Damaged packaged parts (small stand-ins with their own checksum): `gapo train` says so in one line."""
    import hashlib

    from gapo.cli import main

    parts = [tmp_path / f"part{i}.bin" for i in range(3)]
    for i, part in enumerate(parts):
        part.write_bytes(bytes([i]) * 1000)
    whole = b"".join(p.read_bytes() for p in parts)
    monkeypatch.setattr(offline, "_part_paths", lambda: parts)
    monkeypatch.setattr(offline, "EMBEDDED_GGUF_SIZE", len(whole))
    monkeypatch.setattr(offline, "EMBEDDED_GGUF_SHA256", hashlib.sha256(whole).hexdigest())
    assert offline.sha256_file(offline.embedded_gguf_path()) == hashlib.sha256(whole).hexdigest()
    parts[1].write_bytes(b"\xff" * 1000)  # one part damaged in the installed package
    offline.embedded_gguf_path().write_bytes(b"\x00" * len(whole))  # and the cached GGUF too
    out = tmp_path / "run"
    assert main(["train", "--no-params", "--model", "embedded", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not match sha256" in err[0] and "force-reinstall" in err[0], err
    assert not out.exists() and not list(private_cache.rglob("*.gguf")) and not list(private_cache.rglob("*partial*"))


# --------------------------------------------------------------------------------------------------------------------
# Built caches: the manifest, its check, and rebuilds (on a tiny-random directory; the embedded one works the same)
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def tiny_build(tokenizer):  # noqa: ANN001, ANN201
    """A build function like the embedded conversion's, writing tiny-random's weights and tokenizer; counts calls."""
    calls = []

    def build(path: str) -> None:
        calls.append(path)
        offline.tiny_random_model(tokenizer).save_pretrained(path)
        tokenizer.save_pretrained(path)

    build.calls = calls
    return build


def _logits(directory) -> torch.Tensor:  # noqa: ANN001
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([[1, 2, 3, 4]])).logits


def _new_process(monkeypatch) -> None:  # noqa: ANN001
    """What a fresh process knows: no file verified yet."""
    monkeypatch.setattr(offline, "_VERIFIED", set())


def test_cache_is_hashed_at_build_and_verified_once_per_process(tmp_path, tiny_build, monkeypatch):  # noqa: ANN001
    target = tmp_path / "model"
    assert offline.cached_build(target, tiny_build, "test model") == target and len(tiny_build.calls) == 1
    manifest = json.loads((target / offline.MANIFEST).read_text())
    assert manifest["model.safetensors"]["sha256"] == offline.sha256_file(target / "model.safetensors")
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= set(manifest)
    reference = _logits(target)
    _new_process(monkeypatch)
    hashed = []
    real_sha = offline.sha256_file
    monkeypatch.setattr(offline, "sha256_file", lambda p: hashed.append(p.name) or real_sha(p))
    offline.cached_build(target, tiny_build, "test model")
    offline.cached_build(target, tiny_build, "test model")
    assert len(tiny_build.calls) == 1 and hashed.count("model.safetensors") == 1  # once per process
    assert torch.equal(_logits(target), reference)


@pytest.mark.parametrize("damage", ["nan_block", "nan_block_same_mtime", "header", "truncated", "manifest", "missing"])
def test_damaged_cache_is_rebuilt_not_used(tmp_path, tiny_build, monkeypatch, caplog, damage):  # noqa: ANN001
    target = tmp_path / "model"
    offline.cached_build(target, tiny_build, "test model")
    reference = _logits(target)
    weights = target / "model.safetensors"
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    if damage.startswith("nan_block"):  # NaN bytes over the middle of the weights, same size
        middle = len(data) // 2
        data[middle : middle + 4096] = b"\xff\xff\xc0\x7f" * 1024
        weights.write_bytes(bytes(data))
        if damage == "nan_block_same_mtime":
            os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
            _new_process(monkeypatch)  # the next process catches it by its hash
    elif damage == "header":
        data[8:40] = b"{" * 32
        weights.write_bytes(bytes(data))
    elif damage == "truncated":
        weights.write_bytes(bytes(data[: len(data) - 1000]))
    elif damage == "manifest":
        (target / offline.MANIFEST).write_text('{"model.safetensors": 12')
    else:
        (target / "tokenizer.json").unlink()
    assert offline.manifest_problem(target) is not None
    with caplog.at_level(logging.WARNING, logger="gapo.models"):
        offline.cached_build(target, tiny_build, "test model")
    assert len(tiny_build.calls) == 2 and any("rebuilding it" in r.getMessage() for r in caplog.records)
    assert offline.manifest_problem(target) is None and torch.equal(_logits(target), reference)
    assert not list(tmp_path.glob("*partial*"))


def test_an_interrupted_build_leaves_no_cache(tmp_path, tokenizer):  # noqa: ANN001
    def dies(path: str) -> None:
        offline.tiny_random_model(tokenizer).save_pretrained(path)
        raise KeyboardInterrupt

    target = tmp_path / "model"
    with pytest.raises(KeyboardInterrupt):
        offline.cached_build(target, dies, "test model")
    assert not target.exists() and not list(tmp_path.glob("*partial*"))


def test_lora_targets_are_checked_against_the_architecture():
    models.check_lora_targets("tiny-random", ["q_proj", "down_proj", "model.layers.0.self_attn.v_proj"])
    models.check_lora_targets("tiny-random", "all-linear")
    with pytest.raises(ValueError, match=r"\['qkv'\] are not modules of tiny-random; choose from: .*gate_proj"):
        models.check_lora_targets("tiny-random", ["q_proj", "qkv"])


def test_tiny_random(tokenizer):  # noqa: ANN001
    model, tok = models.load_model_and_tokenizer("tiny-random", device="cpu")
    n_params = sum(p.numel() for p in model.parameters())
    assert 0.5e6 < n_params < 2e6
    assert len(tok) == model.config.vocab_size and tok.pad_token is not None
    assert "<|im_start|>assistant" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    again, _ = models.load_model_and_tokenizer("tiny-random", device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))


def test_unknown_model_offline_lists_what_works(monkeypatch):  # noqa: ANN001
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelLoadError, match="offline models: embedded, tiny-random"):
        models.check_model_name("Qwen/Qwen2.5-7B-Instruct")
    models.check_model_name("embedded")


def test_adapter_errors(tmp_path):  # noqa: ANN001
    from peft import LoraConfig, get_peft_model

    model, _ = models.load_model_and_tokenizer("tiny-random", device="cpu")
    with pytest.raises(models.ModelLoadError, match="no LoRA adapter"):
        models.attach_adapter(model, str(tmp_path / "missing"))
    # An adapter trained on a differently shaped base does not fit.
    other = offline.tiny_random_model(
        models.load_tokenizer("tiny-random"), offline.TinyRandomSpec(hidden_size=16, intermediate_size=32)
    )
    peft = get_peft_model(other, LoraConfig(r=2, target_modules=["q_proj"]))
    peft.save_pretrained(str(tmp_path / "adapter"))
    model, _ = models.load_model_and_tokenizer("tiny-random", device="cpu")
    with pytest.raises(models.ModelLoadError, match="does not match the base model"):
        models.attach_adapter(model, str(tmp_path / "adapter"))


@pytest.mark.embedded
@pytest.mark.timeout(900)
def test_embedded_conversion_is_exact():
    """The converted float32 safetensors model gives exactly the GGUF model's logits, and is trainable."""
    from transformers import AutoModelForCausalLM

    model, tok = models.load_model_and_tokenizer("embedded", device="cpu")
    gguf = offline.embedded_gguf_path()
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Name a planet."}], tokenize=False, add_generation_prompt=True
    )
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        diff = (model(ids).logits - reference(ids).logits).abs().max().item()
    assert diff == 0.0
    assert not getattr(model, "is_quantized", False) and getattr(model, "hf_quantizer", None) is None
    assert model.dtype == torch.float32


FAULTS_SCRIPT = """
import resource, sys, torch
from gapo.models import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
counts = []
for _ in range(20):  # the heap settles within a few pairs (seen: by the 8th), then every pair reuses it
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x, y = torch.ones(10 * 2**20), torch.ones(10 * 2**20)  # 40 MiB each, every page written
    del x, y
    counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(min(counts))
"""


@pytest.mark.parametrize("mode", ["default", "kept"])
def test_keep_freed_memory_reuses_freed_pages(mode: str) -> None:
    """With glibc's defaults every pair of 40 MiB tensors is mapped afresh (20,480 page faults each time); after
    `keep_freed_memory` the freed pages serve the next pair. A fresh process each: the setting cannot be undone."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    out = subprocess.run([sys.executable, "-c", FAULTS_SCRIPT, mode], check=True, capture_output=True, text=True)
    fewest = int(out.stdout.split()[-1])
    assert fewest < 1_000 if mode == "kept" else fewest > 10_000


def test_allocator_benchmark_times_both_allocators_on_a_tiny_model(tmp_path):  # noqa: ANN001
    """perf/allocator.py end to end on tiny-random: one line per allocator, the speedup, and the JSON it names."""
    out = tmp_path / "allocator.json"
    flags = ["--model", "tiny-random", "--num-generations", "4", "--max-new-tokens", "4", "--repeats", "1"]
    proc = subprocess.run(
        [sys.executable, "perf/allocator.py", *flags, "--out", str(out)], capture_output=True, text=True, check=True
    )
    lines = proc.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["default", "kept"]
    assert lines[-1].startswith("speedup=") and float(lines[-1].split("=")[1]) > 0
    result = json.loads(out.read_text())
    assert result["kept"]["tokens"] == result["default"]["tokens"] > 0  # same draws: the same work for both
    assert len(result["kept"]["repeats"]) == 1  # the timed repeats (the warm-up is not kept)
