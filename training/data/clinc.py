"""CLINC-150 (Larson et al., 2019) as a 2-level (10 domains → 150 intents) or 3-level hierarchy.

Files: ``$FRACTAL_DATA_DIR/clinc150/data_full.json`` and ``domains.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from training.data.dataset import DatasetSplits, build_hierarchy
from training.errors import FractalError

# The 3-level hierarchy of the Fractal Embeddings paper (§7): 5 super-domains over the 10 domains.
# The paper does not list its grouping; this one pairs domains by what a user is doing.
CLINC_SUPER_DOMAINS: dict[str, tuple[str, str]] = {
    "finance": ("banking", "credit_cards"),
    "household": ("kitchen_and_dining", "home"),
    "mobility": ("auto_and_commute", "travel"),
    "productivity": ("utility", "work"),
    "conversation": ("small_talk", "meta"),
}

OUT_OF_SCOPE = "oos"


def _read_json(path: Path) -> object:
    if not path.is_file():
        raise FractalError(
            f"CLINC-150 file not found: {path}. Set FRACTAL_DATA_DIR to the folder holding "
            "clinc150/data_full.json and clinc150/domains.json"
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FractalError(f"{path} is not valid JSON: {exc}") from exc


def load_clinc150(
    data_dir: Path, *, levels: int = 2, include_out_of_scope: bool = False
) -> DatasetSplits:
    """CLINC-150's official train and test splits (validation rows join neither).

    ``levels=2``: domain → intent. ``levels=3``: super-domain → domain → intent.
    Out-of-scope rows (``oos``) are excluded unless ``include_out_of_scope``; they then form
    their own domain (and super-domain) ``oos``.
    """
    if levels not in (2, 3):
        raise FractalError(f"CLINC-150 has 2 or 3 levels, not {levels}")
    folder = data_dir / "clinc150"
    data = _read_json(folder / "data_full.json")
    domains = _read_json(folder / "domains.json")
    if not isinstance(data, dict) or not isinstance(domains, dict):
        raise FractalError(f"{folder}: unexpected CLINC-150 file layout")
    domain_of = {intent: domain for domain, intents in domains.items() for intent in intents}
    super_of = {d: s for s, members in CLINC_SUPER_DOMAINS.items() for d in members}
    domain_of[OUT_OF_SCOPE] = OUT_OF_SCOPE
    super_of[OUT_OF_SCOPE] = OUT_OF_SCOPE

    rows: list[tuple[str, tuple[str, ...]]] = []
    splits: list[str] = []
    for split in ("train", "test"):
        parts = [split] + ([f"oos_{split}"] if include_out_of_scope else [])
        for part in parts:
            for text, intent in data.get(part, []):
                if intent not in domain_of:
                    raise FractalError(
                        f"CLINC-150 intent {intent!r} is in no domain of domains.json"
                    )
                domain = domain_of[intent]
                path = (domain, intent) if levels == 2 else (super_of[domain], domain, intent)
                rows.append((text, path))
                splits.append(split)
    level_names = ("domain", "intent") if levels == 2 else ("super_domain", "domain", "intent")
    name = "clinc150" if levels == 2 else "clinc150-3level"
    built = build_hierarchy(name, level_names, rows, splits)
    return DatasetSplits(train=built["train"], test=built["test"])
