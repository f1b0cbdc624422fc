"""Dataset loading: the named datasets on disk, the generic loader's formats and errors, the hub
fallback's clear error and the registry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from training.data.banking77 import load_banking77
from training.data.clinc import load_clinc150
from training.data.dataset import (
    DatasetSplits,
    HierarchicalDataset,
    LabelHierarchy,
    build_hierarchy,
)
from training.data.generic import detect_label_delimiter, load_labelled_files
from training.data.hub import (
    ensure_banking77_files,
    ensure_clinc150_files,
    write_banking77_files,
    write_clinc150_files,
)
from training.data.registry import DATA_DIR_VARIABLE, DATASETS, data_dir, load_dataset
from training.data.unlabelled import unlabelled_corpus
from training.errors import FractalError

TREC_LINES = """\
LOC:city What is the capital of Peru?
LOC:city Which city hosts the Louvre?
LOC:city Where is the Golden Gate Bridge?
LOC:country Which country has the most lakes?
LOC:country What country borders Chile to the east?
LOC:country In which country is Timbuktu?
NUM:date When did the Berlin Wall fall?
NUM:date What year did Apollo 11 land?
NUM:date When was the printing press invented?
NUM:count How many moons does Mars have?
NUM:count How many keys are on a piano?
NUM:count How many bones are in a human hand?
"""


def _write(path: Path, content: str) -> Path:
    path.write_text(content, encoding="utf-8")
    return path


def _labels_of(dataset: HierarchicalDataset) -> list[tuple[str, ...]]:
    names = dataset.hierarchy.label_names
    return [tuple(names[level][i] for level, i in enumerate(row)) for row in dataset.labels]


def _all_rows(splits: DatasetSplits) -> list[tuple[str, tuple[str, ...]]]:
    return [
        (text, labels)
        for part in (splits.train, splits.test)
        for text, labels in zip(part.texts, _labels_of(part), strict=True)
    ]


def _one_parent_each(splits: DatasetSplits) -> bool:
    labels = np.concatenate([splits.train.labels, splits.test.labels])
    return all(
        len({tuple(row) for row in labels[labels[:, level] == label, :level]}) == 1
        for level in range(1, labels.shape[1])
        for label in np.unique(labels[:, level])
    )


# --- named datasets on disk ------------------------------------------------------------------


def test_clinc150_two_levels_has_paper_shape() -> None:
    splits = load_clinc150(data_dir(), levels=2)
    assert (len(splits.train), len(splits.test)) == (15000, 4500)
    assert splits.hierarchy.level_names == ("domain", "intent")
    assert (splits.hierarchy.num_classes(0), splits.hierarchy.num_classes(1)) == (10, 150)
    assert _one_parent_each(splits)
    assert len(np.unique(splits.train.labels[:, 1])) == 150


def test_clinc150_three_levels_adds_five_super_domains() -> None:
    splits = load_clinc150(data_dir(), levels=3)
    assert (len(splits.train), len(splits.test)) == (15000, 4500)
    assert splits.hierarchy.level_names == ("super_domain", "domain", "intent")
    assert [splits.hierarchy.num_classes(level) for level in range(3)] == [5, 10, 150]
    assert _one_parent_each(splits)


def test_registry_subsamples_to_paper_sizes_deterministically() -> None:
    first = load_dataset("clinc150", seed=7)
    again = load_dataset("clinc150", seed=7)
    other = load_dataset("clinc150", seed=8)
    assert (len(first.train), len(first.test)) == (10000, 2000)
    assert first.train.texts == again.train.texts and first.test.texts == again.test.texts
    assert np.array_equal(first.train.labels, again.train.labels)
    assert set(first.train.texts) != set(other.train.texts)
    assert set(first.test.texts) != set(other.test.texts)


def test_registry_three_level_name_and_no_cap() -> None:
    splits = load_dataset("clinc150-3level", max_train=None, max_test=300)
    assert (len(splits.train), len(splits.test)) == (15000, 300)
    assert splits.hierarchy.depth == 3


def test_banking77_is_flat_with_77_intents() -> None:
    splits = load_banking77(data_dir())
    assert (len(splits.train), len(splits.test)) == (10003, 3080)
    assert splits.hierarchy.level_names == ("intent",)
    assert splits.hierarchy.num_classes(0) == 77
    assert all(text.strip() for text in splits.train.texts)
    assert load_dataset("banking77", max_train=500).train.labels.shape == (500, 1)


def test_banking77_rejoins_a_text_broken_over_lines(tmp_path: Path) -> None:
    folder = tmp_path / "banking77"
    folder.mkdir()
    _write(folder / "train.csv", "text,category\nfirst,a\r\nbroken\r\n\r\n.,b\r\nlast,b\n")
    _write(folder / "test.csv", "text,category\nt,a\n")
    splits = load_banking77(tmp_path)
    assert _labels_of(splits.train) == [("a",), ("b",), ("b",)]
    assert splits.train.texts == ("first", "broken .", "last")


# --- generic loader: formats and label forms -------------------------------------------------


def test_trec_style_text_lines_split_on_colon(tmp_path: Path) -> None:
    splits = load_labelled_files(_write(tmp_path / "trec.txt", TREC_LINES), seed=1)
    assert splits.hierarchy.level_names == ("level0", "level1")
    assert splits.hierarchy.label_names == (("LOC", "NUM"), ("city", "count", "country", "date"))
    assert (len(splits.train), len(splits.test)) == (8, 4)
    rows = dict(_all_rows(splits))
    assert rows["What is the capital of Peru?"] == ("LOC", "city")
    assert splits.train.name == "trec"


def test_single_file_split_is_stratified_and_seeded(tmp_path: Path) -> None:
    path = _write(tmp_path / "trec.txt", TREC_LINES)
    first = load_labelled_files(path, seed=3)
    again = load_labelled_files(path, seed=3)
    assert first.test.texts == again.test.texts
    assert sorted(_labels_of(first.test)) == [
        ("LOC", "city"),
        ("LOC", "country"),
        ("NUM", "count"),
        ("NUM", "date"),
    ]
    other_seeds = {load_labelled_files(path, seed=s).test.texts for s in range(10)}
    assert len(other_seeds) > 1
    # 3 rows per label: 0.5 × 3 rounds up to 2 test rows, and one row always stays for training.
    half = load_labelled_files(path, seed=3, test_fraction=0.5)
    assert (len(half.train), len(half.test)) == (4, 8)
    assert set(_labels_of(half.train)) == set(_labels_of(half.test))


def test_csv_label_column_with_slash_and_given_level_names(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "intents.csv",
        "label,text\n"
        'banking/transfer,"send money, please"\n'
        "banking/transfer,move funds\n"
        "banking/balance,how much do I have\n"
        "banking/balance,my balance\n"
        "travel/flight,book a flight\n"
        "travel/flight,a plane ticket\n",
    )
    splits = load_labelled_files(path, level_names=("domain", "intent"), test_fraction=0.4)
    assert splits.hierarchy.level_names == ("domain", "intent")
    assert splits.hierarchy.label_names == (
        ("banking", "travel"),
        ("balance", "flight", "transfer"),
    )
    assert dict(_all_rows(splits))["send money, please"] == ("banking", "transfer")


def test_tsv_with_one_column_per_level_and_custom_text_column(tmp_path: Path) -> None:
    train = _write(
        tmp_path / "train.tsv",
        "utterance\tdomain\tintent\nsend money\tbank\ttransfer\nbook a flight\ttravel\tflight\n",
    )
    test = _write(tmp_path / "test.tsv", "utterance\tdomain\tintent\nwire cash\tbank\ttransfer\n")
    splits = load_labelled_files(
        train, test_path=test, text_column="utterance", level_columns=("domain", "intent")
    )
    assert splits.train.texts == ("send money", "book a flight")
    assert splits.test.texts == ("wire cash",)
    assert _labels_of(splits.test) == [("bank", "transfer")]
    assert splits.hierarchy.level_names == ("level0", "level1")


def test_jsonl_folder_with_train_and_test_files(tmp_path: Path) -> None:
    folder = tmp_path / "my_intents"
    folder.mkdir()
    train_rows = [
        {"text": "send money", "label": "bank>transfer"},
        {"text": "check balance", "label": "bank>balance"},
        {"text": "book a flight", "label": "travel>flight", "source": "chat"},
    ]
    _write(folder / "train.jsonl", "\n".join(json.dumps(row) for row in train_rows) + "\n\n")
    _write(folder / "test.jsonl", json.dumps({"text": "a hotel room", "label": "travel>hotel"}))
    splits = load_labelled_files(folder)
    assert splits.train.name == "my_intents"
    assert (len(splits.train), len(splits.test)) == (3, 1)
    assert _labels_of(splits.test) == [("travel", "hotel")]


def test_explicit_format_delimiter_and_flat_labels(tmp_path: Path) -> None:
    path = _write(tmp_path / "data.lines", "a|x one\na|x two\nb|y three\nb|y four\n")
    splits = load_labelled_files(path, file_format="txt", label_delimiter="|", test_fraction=0.5)
    assert splits.hierarchy.label_names == (("a", "b"), ("x", "y"))
    flat = load_labelled_files(path, file_format="txt", label_delimiter=None, test_fraction=0.5)
    assert flat.hierarchy.label_names == (("a|x", "b|y"),)


def test_delimiter_detection_rule() -> None:
    assert detect_label_delimiter(["LOC:city", "NUM:date"]) == ":"
    assert detect_label_delimiter(["a/b", "c/d", "e:f"]) == "/"
    assert detect_label_delimiter(["a/b", "c:d"]) == ":"  # a tie goes to the earlier candidate
    assert detect_label_delimiter(["a>b", "c>d|e"]) == ">"
    assert detect_label_delimiter(["transfer", "balance"]) is None


# --- generic loader: errors ------------------------------------------------------------------


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(FractalError, match=f"file not found: {missing}"):
        load_labelled_files(missing)
    with pytest.raises(FractalError, match="file not found: .*test.csv"):
        load_labelled_files(
            _write(tmp_path / "train.txt", TREC_LINES), test_path=tmp_path / "test.csv"
        )


def test_malformed_csv_row_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.csv", "text,label\nfine row,a:b\nthree,fields,here\n")
    with pytest.raises(FractalError, match=r"bad.csv:3: malformed row: 3 field\(s\), the header"):
        load_labelled_files(path)


def test_text_line_without_text_is_malformed(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.txt", "LOC:city What is the capital?\n\nNUM:date\n")
    with pytest.raises(FractalError, match="bad.txt:3: malformed line: expected 'LABEL text'"):
        load_labelled_files(path)


def test_missing_column_lists_the_columns_found(tmp_path: Path) -> None:
    path = _write(tmp_path / "cols.csv", "sentence,category\nhello,a\n")
    with pytest.raises(FractalError, match="no column 'text'; columns found: sentence, category"):
        load_labelled_files(path, level_columns=("category",))
    jsonl = _write(tmp_path / "cols.jsonl", '{"text": "hi", "intent": "a"}\n')
    with pytest.raises(FractalError, match="cols.jsonl:1: no field 'label'; fields found: text"):
        load_labelled_files(jsonl)


def test_inconsistent_number_of_levels(tmp_path: Path) -> None:
    path = _write(tmp_path / "mixed.txt", "LOC:city Paris?\nLOC:city Lima?\nNUM When?\n")
    with pytest.raises(FractalError, match=r"mixed.txt:3: label 'NUM' split on ':' has 1 level"):
        load_labelled_files(path)
    with pytest.raises(FractalError, match="expected 3 \\(one per level name: a, b, c\\)"):
        load_labelled_files(path, level_names=("a", "b", "c"))


def test_empty_text_and_empty_label_level(tmp_path: Path) -> None:
    path = _write(tmp_path / "empty.csv", "text,label\nhello,a:b\n  ,a:c\n")
    with pytest.raises(FractalError, match="empty.csv:3: empty text"):
        load_labelled_files(path)
    path = _write(tmp_path / "nolevel.csv", "text,label\nhello,a:b\nworld,a:\n")
    with pytest.raises(FractalError, match="nolevel.csv:3: label 'a:' has an empty level"):
        load_labelled_files(path)


def test_bad_json_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", '{"text": "a", "label": "x:y"}\n{"text": "b", label}\n')
    with pytest.raises(FractalError, match="bad.jsonl:2: not a valid JSON line"):
        load_labelled_files(path)
    path = _write(tmp_path / "list.jsonl", '["text", "label"]\n')
    with pytest.raises(FractalError, match="list.jsonl:1: expected a JSON object, got list"):
        load_labelled_files(path)


def test_unknown_extension_and_bad_options(tmp_path: Path) -> None:
    path = _write(tmp_path / "data.xlsx", "x")
    with pytest.raises(FractalError, match="cannot tell the format of .*data.xlsx"):
        load_labelled_files(path)
    with pytest.raises(FractalError, match="unknown file format 'xml'"):
        load_labelled_files(path, file_format="xml")
    trec = _write(tmp_path / "trec.txt", TREC_LINES)
    with pytest.raises(FractalError, match="test_fraction must lie strictly between 0 and 1"):
        load_labelled_files(trec, test_fraction=1.0)
    with pytest.raises(FractalError, match="level_columns applies to CSV, TSV and JSONL"):
        load_labelled_files(trec, level_columns=("a", "b"))


def test_too_few_rows_for_a_test_split(tmp_path: Path) -> None:
    path = _write(tmp_path / "tiny.txt", "a:x one\nb:y two\na:z three\n")
    with pytest.raises(FractalError, match="no label has enough rows to hold out"):
        load_labelled_files(path)


def test_folder_without_train_and_test_files(tmp_path: Path) -> None:
    _write(tmp_path / "train.csv", "text,label\n")
    with pytest.raises(FractalError, match="one train.<ext> and one test.<ext>.*found: train.csv"):
        load_labelled_files(tmp_path)


OTHER_LINES = """\
LOC:city What is the capital of Peru?
LOC:city Which city hosts the Louvre?
LOC:other Where is the Golden Gate Bridge?
LOC:other Which mountain range crosses Nepal?
NUM:count How many moons does Mars have?
NUM:count How many keys are on a piano?
NUM:other What is the speed of light?
NUM:other How hot is the surface of Venus?
ENTY:other What is the fastest land animal?
ENTY:other Which instrument has 47 strings?
"""


def test_a_name_under_several_parents_is_one_label_per_path(tmp_path: Path) -> None:
    splits = load_labelled_files(_write(tmp_path / "other.txt", OTHER_LINES), test_fraction=0.5)
    hierarchy = splits.hierarchy
    assert hierarchy.label_names == (
        ("ENTY", "LOC", "NUM"),
        ("city", "count", "other", "other", "other"),
    )
    assert hierarchy.parents == ((), (1, 2, 0, 1, 2))
    assert hierarchy.display_names(1) == (
        "LOC / city", "NUM / count", "ENTY / other", "LOC / other", "NUM / other"
    )  # fmt: skip
    assert hierarchy.path(1, 3) == ("LOC", "other") and hierarchy.display_name(0, 2) == "NUM"
    assert hierarchy.num_classes(1) == 5 and hierarchy.depth == 2
    assert splits.train.hierarchy is splits.test.hierarchy
    paths = {
        text: hierarchy.path(1, int(row[1]))
        for part in (splits.train, splits.test)
        for text, row in zip(part.texts, part.labels, strict=True)
    }
    assert paths["Which mountain range crosses Nepal?"] == ("LOC", "other")
    assert paths["What is the speed of light?"] == ("NUM", "other")
    assert paths["Which instrument has 47 strings?"] == ("ENTY", "other")
    assert _one_parent_each(splits)
    for part in (splits.train, splits.test):
        assert all(hierarchy.parents[1][fine] == coarse for coarse, fine in part.labels)
    assert hierarchy.to_json()["levels"] == [
        {"name": "level0", "labels": ["ENTY", "LOC", "NUM"]},
        {"name": "level1", "labels": ["city", "count", "other", "other", "other"],
         "parents": [1, 2, 0, 1, 2]},
    ]  # fmt: skip


def test_label_ids_keep_the_name_order_when_names_do_not_repeat() -> None:
    """Paths sort by their last name first: the ids of hierarchies without repeated names (every
    run trained before labels were paths) are the plain sorted names, as they always were."""
    rows = [("t1", ("b", "y")), ("t2", ("a", "z")), ("t3", ("b", "x")), ("t4", ("a", "w"))]
    hierarchy = build_hierarchy("d", ("coarse", "fine"), rows, ["train"] * 4)["train"].hierarchy
    assert hierarchy.label_names == (("a", "b"), ("w", "x", "y", "z"))
    assert hierarchy.parents == ((), (0, 1, 1, 0))


def test_three_levels_with_repeated_names_at_two_levels() -> None:
    rows = [
        ("t1", ("a", "misc", "other")),
        ("t2", ("b", "misc", "other")),
        ("t3", ("a", "misc", "x")),
        ("t4", ("a", "main", "other")),
    ]
    hierarchy = build_hierarchy("d", ("l0", "l1", "l2"), rows, ["train"] * 4)["train"].hierarchy
    assert hierarchy.display_names(1) == ("a / main", "a / misc", "b / misc")
    assert hierarchy.display_names(2) == (
        "a / main / other", "a / misc / other", "b / misc / other", "a / misc / x"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([("t1", ("a", "x")), ("t2", ("b", ""))], "row 2 has an empty fine label"),
        ([("t1", ("a", "x")), ("t2", ("b",))], r"row 2 has 1 label level\(s\), expected 2"),
        ([("t1", ("a", "x")), ("t2", ("a", "y"))], "level 'coarse' has a single label \\('a'\\)"),
        ([("t1", ("a", "x")), ("t2", ("b", "x"))], None),
        ([("t1", ("a", "x")), ("  ", ("b", "y"))], "row 2 has an empty text"),
    ],
)
def test_hierarchy_checks_still_apply(rows: list, message: str | None) -> None:
    if message is None:  # the same name under two parents: two labels, no error
        built = build_hierarchy("d", ("coarse", "fine"), rows, ["train"] * len(rows))
        assert built["train"].hierarchy.display_names(1) == ("a / x", "b / x")
        return
    with pytest.raises(FractalError, match=message):
        build_hierarchy("d", ("coarse", "fine"), rows, ["train"] * len(rows))


@pytest.mark.parametrize(
    ("parents", "message"),
    [
        (((), (0, 1)), "level 'fine' has 3 labels and 2 parent ids"),
        (((), (0, 1, 2)), "the parent of label 'z' is 2, not a label id of level 'coarse'"),
        (((), (0, 0, 0)), "level 'fine' has two labels with the path 'a / x'"),
        (((0, 1), (0, 0, 1)), "level 'coarse' is the first level and cannot have parents"),
        (((),), "2 level names, 2 label lists and 1 parent lists"),
    ],
)
def test_label_hierarchy_checks_its_parents(parents: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LabelHierarchy(("coarse", "fine"), (("a", "b"), ("x", "x", "z")), parents)


# --- generic loader: encodings ---------------------------------------------------------------

LATIN_1_ROWS = (
    "text,label\ncafé au lait,food:drink\ntea,food:drink\nZürich,place:city\nOslo,place:city\n"
)


def test_latin_1_file_needs_its_encoding(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes(LATIN_1_ROWS.encode("latin-1"))
    offset = LATIN_1_ROWS.encode("latin-1").index(b"\xe9")
    with pytest.raises(FractalError) as error:
        load_labelled_files(path, test_fraction=0.5)
    assert str(error.value) == (
        f"{path}: byte 0xe9 at offset {offset} is not valid utf-8; "
        "pass --encoding (e.g. --encoding latin-1)"
    )
    splits = load_labelled_files(path, test_fraction=0.5, encoding="latin-1")
    texts = set(splits.train.texts + splits.test.texts)
    assert texts == {"café au lait", "tea", "Zürich", "Oslo"}
    assert splits.hierarchy.label_names == (("food", "place"), ("city", "drink"))


def test_utf_8_byte_order_mark_is_dropped_and_unknown_encodings_refused(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + LATIN_1_ROWS.encode("utf-8"))
    splits = load_labelled_files(path, test_fraction=0.5)  # the header is "text", not "\ufefftext"
    assert "Zürich" in splits.train.texts + splits.test.texts
    assert load_labelled_files(path, test_fraction=0.5, encoding="UTF8").train.texts == (
        splits.train.texts
    )
    with pytest.raises(FractalError, match="unknown encoding 'klingon': give a Python codec"):
        load_labelled_files(path, encoding="klingon")


def test_registry_passes_the_encoding_on(tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes(LATIN_1_ROWS.encode("latin-1"))
    splits = load_dataset(str(path), encoding="latin-1", test_fraction=0.5)
    assert "café au lait" in splits.train.texts + splits.test.texts
    with pytest.raises(FractalError, match="options encoding apply to your own files"):
        load_dataset("clinc150", encoding="latin-1")


# --- hub fallback ----------------------------------------------------------------------------


def test_missing_named_files_without_hub_name_path_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(FractalError) as error:
        ensure_banking77_files(tmp_path)
    message = str(error.value)
    assert str(tmp_path / "banking77" / "train.csv") in message
    assert "FRACTAL_DATA_DIR" in message and "PolyAI/banking77" in message
    (tmp_path / "clinc150").mkdir()
    _write(tmp_path / "clinc150" / "domains.json", "{}")
    with pytest.raises(FractalError, match=r"data_full.json\. .*FRACTAL_DATA_DIR.*clinc_oos"):
        ensure_clinc150_files(tmp_path)


def test_clinc_without_domains_map_is_not_fetched(tmp_path: Path) -> None:
    with pytest.raises(FractalError, match="has no domain labels, so .*domains.json is needed"):
        ensure_clinc150_files(tmp_path)


def test_hub_rows_are_written_in_the_local_layout(tmp_path: Path) -> None:
    clinc = tmp_path / "clinc150"
    clinc.mkdir()
    _write(clinc / "domains.json", json.dumps({"banking": ["balance"], "travel": ["book_flight"]}))
    write_clinc150_files(
        clinc,
        [
            ("train", "how much money", "balance"),
            ("train", "fly me to rome", "book_flight"),
            ("train", "tell me a joke about eels", "oos"),
            ("validation", "my balance", "balance"),
            ("test", "a flight to oslo", "book_flight"),
        ],
    )
    ensure_clinc150_files(tmp_path)  # both files now exist: nothing to fetch
    splits = load_clinc150(tmp_path)
    assert splits.train.texts == ("how much money", "fly me to rome")
    assert _labels_of(splits.test) == [("travel", "book_flight")]
    layout = json.loads((clinc / "data_full.json").read_text())
    assert layout["oos_train"] == [["tell me a joke about eels", "oos"]]
    assert layout["val"] == [["my balance", "balance"]]

    write_banking77_files(
        tmp_path / "banking77",
        [("train", 'a "quoted", text', "card"), ("train", "b", "cash"), ("test", "c", "card")],
    )
    banking = load_banking77(tmp_path)
    assert banking.train.texts == ('a "quoted", text', "b")
    assert _labels_of(banking.test) == [("card",)]


# --- registry --------------------------------------------------------------------------------


def test_data_dir_follows_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path))
    assert data_dir() == tmp_path
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path / "absent"))
    with pytest.raises(
        FractalError, match=re.escape(f"{DATA_DIR_VARIABLE}={tmp_path / 'absent'} is")
    ):
        data_dir()


def test_named_dataset_reads_from_the_given_data_dir(tmp_path: Path) -> None:
    with pytest.raises(FractalError, match=re.escape(str(tmp_path / "banking77" / "train.csv"))):
        load_dataset("banking77", data_dir=tmp_path)


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(FractalError) as error:
        load_dataset("clinc151")
    assert str(error.value) == (
        "unknown dataset 'clinc151': choose one of clinc150, clinc150-3level, banking77 or give "
        "a path to a CSV/TSV/JSONL/TXT file"
    )
    assert DATASETS == ("clinc150", "clinc150-3level", "banking77")


def test_registry_loads_a_path_with_options_and_caps(tmp_path: Path) -> None:
    path = _write(tmp_path / "trec.txt", TREC_LINES)
    splits = load_dataset(str(path), max_train=5, max_test=None, level_names=("coarse", "fine"))
    assert splits.hierarchy.level_names == ("coarse", "fine")
    assert (len(splits.train), len(splits.test)) == (5, 4)
    assert load_dataset(str(path), max_train=5).train.texts == splits.train.texts


def test_registry_rejects_bad_caps_and_options_for_named_datasets() -> None:
    with pytest.raises(FractalError, match="max_train must be at least 1"):
        load_dataset("clinc150", max_train=0)
    with pytest.raises(FractalError, match="options text_column apply to your own files"):
        load_dataset("clinc150", text_column="utterance")


def test_unlabelled_corpus_mixes_three_sources_without_test_texts() -> None:
    corpus = unlabelled_corpus(data_dir(), 3001, seed=1)
    assert len(corpus.texts) == len(set(corpus.texts)) == 3001
    assert corpus.per_source == {"banking77": 1001, "clinc150": 1000, "wikipedia": 1000}
    test_texts = {
        text
        for name in ("banking77", "clinc150")
        for text in load_dataset(name, max_train=None, max_test=None).test.texts
    }
    assert not test_texts & set(corpus.texts)
    assert unlabelled_corpus(data_dir(), 3001, seed=1).texts == corpus.texts
    assert unlabelled_corpus(data_dir(), 3001, seed=2).texts != corpus.texts
    with pytest.raises(FractalError, match="fewer than the 100000 asked for"):
        unlabelled_corpus(data_dir(), 100_000)
