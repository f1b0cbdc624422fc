"""Mixed coarse/fine query workloads built from real labelled utterances, for ``granularity=auto``.

The automatic router must tell a *coarse* query (about a coarse label, CLINC: a domain, but no one
fine label in it) from a *fine* one (one intent). Two constructions make such workloads from a
:class:`~training.data.dataset.HierarchicalDataset` split; each query is a :class:`MixedQuery`
``(text, level, coarse label id, fine label id)`` where ``level`` is the right resolution. Coarse
is hierarchy level 0, fine the finest level.

- :func:`join_queries`: a fine query is one utterance; a coarse query joins two utterances of two
  different fine labels under the same coarse label with " and " (the first stripped of its final
  punctuation), e.g. "what is my checking balance and how do i report fraud". The export fits the
  router's policy on this construction, built on the trainer's validation rows
  (:mod:`training.router_fit`).
- :func:`named_need_queries`: a fine query is one utterance; a coarse query names a coarse-level
  need and no fine one: one of :data:`NAMED_NEED_TEMPLATES` filled with the coarse label's name,
  underscores read as spaces ("credit_cards" → "i have a question about my credit cards"). Its
  coarse queries carry no word of any utterance and no fine label name. It is the **held-out**
  construction: nothing is fitted, tuned or chosen on it — not the router's weights, not its
  features, not its threshold; it only measures whether a policy fitted on joins generalises to
  a kind of coarse query it never saw.

Both are seeded and balanced: ``round(size · coarse_fraction)`` coarse queries and the rest fine,
shuffled together. Fine queries are distinct utterances while the split has enough of them.
No torch: the trainer (fitting) and the benchmarks (evaluation) both import this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bundle import COARSE, FINE
from training.data.dataset import HierarchicalDataset
from training.errors import FractalError

JOIN_WORD = " and "
TRAILING_PUNCTUATION = "?.! "
NAMED_NEED_TEMPLATES: tuple[str, ...] = (
    "i have a question about my {need}",
    "help with {need}",
    "{need} stuff",
    "i need help with {need}",
    "can you help me with something about {need}",
    "i want to ask about {need}",
    "tell me about {need}",
    "something related to {need}",
    "questions about {need}",
    "{need}",
)
"""The coarse templates of the held-out construction; ``{need}`` is the coarse label's name."""


@dataclass(frozen=True)
class MixedQuery:
    """One query of a mixed workload and the resolution that answers it.

    ``level`` is ``"coarse"`` or ``"fine"``; ``coarse_label`` the query's level-0 label id;
    ``fine_label`` its finest-level label id for a fine query, None for a coarse one (it is about
    no single fine label). ``rows`` are the split's rows whose utterances the text is made of
    (none for a named need).
    """

    text: str
    level: str
    coarse_label: int
    fine_label: int | None
    rows: tuple[int, ...]


def need_name(label_name: str) -> str:
    """A coarse label's name as words: ``"credit_cards"`` → ``"credit cards"``."""
    return " ".join(label_name.replace("_", " ").split())


def _counts(size: int, coarse_fraction: float) -> tuple[int, int]:
    if size < 2:
        raise FractalError(f"a mixed workload needs at least 2 queries, not {size}")
    if not 0 <= coarse_fraction <= 1:
        raise FractalError(f"coarse_fraction must be in [0, 1], not {coarse_fraction}")
    coarse = int(round(size * coarse_fraction))
    return coarse, size - coarse


def _fine_queries(data: HierarchicalDataset, count: int, rng: np.random.Generator) -> list:
    rows = rng.choice(len(data), count, replace=count > len(data))
    return [
        MixedQuery(data.texts[row], FINE, int(data.labels[row, 0]), int(data.labels[row, -1]),
                   (int(row),))
        for row in rows
    ]  # fmt: skip


def _shuffled(queries: list[MixedQuery], rng: np.random.Generator) -> list[MixedQuery]:
    return [queries[i] for i in rng.permutation(len(queries))]


def join_queries(
    data: HierarchicalDataset, size: int, *, coarse_fraction: float = 0.5, seed: int = 0
) -> list[MixedQuery]:
    """``size`` queries: coarse ones join two utterances of different fine labels under one coarse
    label with " and "; fine ones are single utterances (see the module docstring).

    Raises :class:`FractalError` when no coarse label has two fine labels among ``data``'s rows.
    """
    coarse_count, fine_count = _counts(size, coarse_fraction)
    rng = np.random.default_rng(seed)
    coarse_of, fine_of = data.labels[:, 0], data.labels[:, -1]
    joinable = np.flatnonzero(
        [len(np.unique(fine_of[coarse_of == label])) > 1 for label in coarse_of]
    )
    if coarse_count and not len(joinable):
        raise FractalError(
            f"{data.name}: no coarse label has two different fine labels among these "
            f"{len(data)} rows, so no two utterances can be joined into a coarse query"
        )
    coarse = []
    for _ in range(coarse_count):
        first = int(rng.choice(joinable))
        partners = np.flatnonzero((coarse_of == coarse_of[first]) & (fine_of != fine_of[first]))
        second = int(rng.choice(partners))
        text = data.texts[first].rstrip(TRAILING_PUNCTUATION) + JOIN_WORD + data.texts[second]
        coarse.append(MixedQuery(text, COARSE, int(coarse_of[first]), None, (first, second)))
    return _shuffled(coarse + _fine_queries(data, fine_count, rng), rng)


def named_need_queries(
    data: HierarchicalDataset,
    size: int,
    *,
    coarse_fraction: float = 0.5,
    seed: int = 0,
    templates: tuple[str, ...] = NAMED_NEED_TEMPLATES,
) -> list[MixedQuery]:
    """``size`` queries: coarse ones fill a template with a coarse label's name, fine ones are
    single utterances. Held out: never used to fit or tune anything (see the module docstring).

    Coarse queries walk the (coarse label × template) grid in a seeded order, so every label and
    template appears equally often (up to one) before any query repeats.
    """
    coarse_count, fine_count = _counts(size, coarse_fraction)
    rng = np.random.default_rng(seed)
    names = data.hierarchy.label_names[0]
    grid = [(label, template) for label in range(len(names)) for template in templates]
    order = rng.permutation(len(grid))
    coarse = []
    for position in range(coarse_count):
        label, template = grid[order[position % len(grid)]]
        text = template.format(need=need_name(names[label]))
        coarse.append(MixedQuery(text, COARSE, label, None, ()))
    return _shuffled(coarse + _fine_queries(data, fine_count, rng), rng)


CONSTRUCTIONS = {"join": join_queries, "named_need": named_need_queries}
"""Every construction by name; ``named_need`` is the held-out one."""
