"""The mixed coarse/fine workloads of ``granularity=auto``: deterministic, balanced, labelled
right, and the held-out named-need construction made of coarse label names alone."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from training.data.clinc import load_clinc150
from training.data.dataset import DatasetSplits
from training.data.registry import data_dir
from training.errors import FractalError
from training.evaluation.mixed_queries import (
    JOIN_WORD,
    NAMED_NEED_TEMPLATES,
    join_queries,
    named_need_queries,
    need_name,
)


@pytest.fixture(scope="module")
def clinc() -> DatasetSplits:
    return load_clinc150(data_dir(), levels=2)


@pytest.mark.parametrize("build", [join_queries, named_need_queries])
def test_seeded_and_balanced(clinc: DatasetSplits, build) -> None:
    queries = build(clinc.test, 400, seed=3)
    assert queries == build(clinc.test, 400, seed=3)
    assert queries != build(clinc.test, 400, seed=4)
    assert Counter(q.level for q in queries) == {"coarse": 200, "fine": 200}
    skewed = build(clinc.test, 400, coarse_fraction=0.25, seed=3)
    assert Counter(q.level for q in skewed) == {"coarse": 100, "fine": 300}
    levels = [q.level for q in queries]
    assert levels != sorted(levels)  # shuffled together


@pytest.mark.parametrize("build", [join_queries, named_need_queries])
def test_fine_queries_are_distinct_single_utterances(clinc: DatasetSplits, build) -> None:
    test = clinc.test
    fine = [q for q in build(test, 600, seed=1) if q.level == "fine"]
    assert len({q.rows for q in fine}) == len(fine) == 300
    for query in fine:
        (row,) = query.rows
        assert query.text == test.texts[row]
        assert (query.coarse_label, query.fine_label) == tuple(test.labels[row, [0, -1]])


def test_join_coarse_queries_join_two_intents_of_one_domain(clinc: DatasetSplits) -> None:
    test = clinc.test
    coarse = [q for q in join_queries(test, 600, seed=1) if q.level == "coarse"]
    for query in coarse:
        first, second = query.rows
        assert test.labels[first, 0] == test.labels[second, 0] == query.coarse_label
        assert test.labels[first, 1] != test.labels[second, 1]
        assert query.fine_label is None
        assert query.text == test.texts[first].rstrip("?.! ") + JOIN_WORD + test.texts[second]


def test_named_need_coarse_queries_name_a_domain_and_nothing_else(clinc: DatasetSplits) -> None:
    test, hierarchy = clinc.test, clinc.hierarchy
    domains = hierarchy.label_names[0]
    coarse = [q for q in named_need_queries(test, 400, seed=1) if q.level == "coarse"]
    expected = {t.format(need=need_name(d)) for d in domains for t in NAMED_NEED_TEMPLATES}
    assert len(coarse) == len(expected) * 2 and Counter(q.text for q in coarse) == dict.fromkeys(
        expected, 2
    )
    utterances = set(clinc.train.texts) | set(test.texts)
    intents = [need_name(name) for name in hierarchy.label_names[-1]]
    for query in coarse:
        assert query.rows == () and query.fine_label is None
        need = need_name(domains[query.coarse_label])
        assert query.text in {template.format(need=need) for template in NAMED_NEED_TEMPLATES}
        assert query.text not in utterances
        words = f" {query.text} "
        assert not [i for i in intents if re.search(rf"\b{re.escape(i)}\b", words)], query.text


def test_need_name_reads_underscores_as_spaces() -> None:
    assert need_name("credit_cards") == "credit cards"
    assert need_name("kitchen_and_dining") == "kitchen and dining"


def test_bad_sizes_and_unjoinable_rows(clinc: DatasetSplits) -> None:
    with pytest.raises(FractalError, match="at least 2 queries"):
        join_queries(clinc.test, 1)
    with pytest.raises(FractalError, match=r"coarse_fraction must be in \[0, 1\]"):
        named_need_queries(clinc.test, 10, coarse_fraction=1.5)
    one_intent_per_domain = clinc.test.subset(
        [list(clinc.test.labels[:, 0]).index(domain) for domain in range(10)]
    )
    with pytest.raises(FractalError, match="no coarse label has two different fine labels"):
        join_queries(one_intent_per_domain, 10)
    assert all(q.level == "fine" for q in join_queries(one_intent_per_domain, 5, coarse_fraction=0))


def test_the_constructions_need_no_torch() -> None:
    code = (
        "import sys, training.evaluation.mixed_queries; "
        "sys.exit(bool({'torch', 'sklearn'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2])
    assert result.returncode == 0
