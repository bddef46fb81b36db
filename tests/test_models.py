"""Model loading: the embedded GGUF cache (assembly, verification, repair), conversion, tiny-random, clear errors."""

from __future__ import annotations

import pytest
import torch

from gapo import models


@pytest.fixture()
def private_cache(tmp_path, monkeypatch):  # noqa: ANN001, ANN201
    monkeypatch.setenv("GAPO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_gguf_is_assembled_verified_and_repaired(private_cache):  # noqa: ANN001
    path = models.embedded_gguf_path()
    assert path.stat().st_size == models.EMBEDDED_GGUF_SIZE
    assert models._sha256(path) == models.EMBEDDED_GGUF_SHA256
    # Truncate it (an interrupted copy): the next call re-assembles a good file.
    with open(path, "r+b") as f:
        f.truncate(1000)
    assert models.embedded_gguf_path() == path and path.stat().st_size == models.EMBEDDED_GGUF_SIZE
    # Corrupt it in place with the same size and no marker: detected by the hash, re-assembled.
    path.with_suffix(".verified").unlink()
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(b"\x00" * 64)
    models.embedded_gguf_path()
    assert models._sha256(path) == models.EMBEDDED_GGUF_SHA256
    assert not list(path.parent.glob("*.partial"))


def test_gguf_that_cannot_be_fixed_is_refused(private_cache, monkeypatch):  # noqa: ANN001
    monkeypatch.setattr(models, "EMBEDDED_GGUF_SHA256", "0" * 64)  # as if the installed parts were wrong
    with pytest.raises(models.ModelLoadError, match="does not match sha256.*force-reinstall"):
        models.embedded_gguf_path()
    assert not list(private_cache.rglob("*.gguf"))  # nothing half-written left behind


def test_damaged_model_cache_is_detected(tmp_path):  # noqa: ANN001
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    (tmp_path / ".complete").write_text('{"model.safetensors": 10}')
    assert models._model_dir_complete(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"x" * 5)  # truncated
    assert not models._model_dir_complete(tmp_path)
    (tmp_path / ".complete").write_text("not json")
    assert not models._model_dir_complete(tmp_path)


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
    other, _ = models.load_model_and_tokenizer(
        "tiny-random", device="cpu", tiny_spec=models.TinyRandomSpec(hidden_size=16, intermediate_size=32)
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
    gguf = models.embedded_gguf_path()
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
