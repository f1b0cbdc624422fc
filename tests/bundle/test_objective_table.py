"""The objectives table (:mod:`bundle.objectives`): the one list of objective names."""

from __future__ import annotations

from bundle.objectives import (
    ABLATION_OBJECTIVES,
    FINETUNE_OBJECTIVES,
    HEAD_OBJECTIVES,
    OBJECTIVE_TABLE,
    OBJECTIVES,
)


def test_every_objective_is_named_once() -> None:
    assert len(set(OBJECTIVES)) == len(OBJECTIVES) == len(OBJECTIVE_TABLE)


def test_the_trainers_lists_come_from_the_table() -> None:
    assert HEAD_OBJECTIVES == ("v5", "mrl", "inverted", "no-prefix", "uhmt")
    assert FINETUNE_OBJECTIVES == ("mrl", "mic", "mipic", "sfs")
    assert ABLATION_OBJECTIVES == ("inverted", "no-prefix", "uhmt")
    assert set(ABLATION_OBJECTIVES) <= set(HEAD_OBJECTIVES)
    made_otherwise = {objective.name for objective in OBJECTIVE_TABLE}
    made_otherwise -= {*HEAD_OBJECTIVES, *FINETUNE_OBJECTIVES}
    assert made_otherwise == {"mshc", "identity"}
