"""Issue 15: does every route earn its keep with the default bundle?

    python -m benchmarks routes --bundle runs/clinc150/bundle --mrl-bundle runs/clinc150-mrl/bundle
    python -m benchmarks routes --bundle B --smoke --out /tmp/routes  # tiny

CLINC-150 throughout: the training split is the corpus (and the only data anything is fitted or
chosen on), the test split gives the queries. Four parts, each beside its baseline in one run:

1. **The coarse prefix, a Pareto across V5 settings.** One head per setting (seed 42, frozen
   MiniLM features, the trainer's own code), scored on what each route needs of it: steerability
   S, domain k-NN at 64-d, coarse retrieval (the share of the 64-d top-10 neighbours in the
   query's domain), intent k-NN at 256-d, and C2F recall@10 at the shortlist prefix the export
   would choose (:mod:`training.evaluation.shortlist`). MRL at the same training budget is the bar.
2. **Five seeds of the defaults** (V5 and MRL, ``TrainConfig()``): S, the coarse numbers, intent
   k-NN at 256-d against the raw 384-d encoder, and the paper's mixed workload (Fig. 9): a share α
   of queries is coarse, scored by domain k-NN at 64-d for V5-adaptive and at 256-d for MRL; the
   rest fine, by intent k-NN at 256-d for both. At which α V5-adaptive wins.
3. **C2F through the live service** with ``--bundle``: ``python -m service`` on loopback, the
   training utterances ingested over HTTP, every test utterance searched exactly at the full
   dimension and by C2F (k′ = 4k) at the bundle's shortlist prefix and, for contrast, at its
   coarse prefix (``shortlist_dim``); recall@10 against the exact ids. The export's own table
   (``manifest.evaluation.shortlist``) is shown beside it.
4. **granularity=auto** for each bundle on two mixed workloads of the test split
   (:mod:`training.evaluation.mixed_queries`; "named need" is held out of every fit and choice):
   how often each policy (the bundle's ``router.json``, the old thresholds, always coarse, always
   fine) picks the right resolution, and the retrieval quality it buys on the 50/50 mix: exact
   search over the corpus's bundle embeddings at the route's prefix, precision@10 at the query's
   level (a hit counts when it is in a coarse query's domain, or has a fine query's intent).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks.harness.clinc_documents import labelled_documents
from benchmarks.harness.markdown import bullet_list, markdown_table, targets_table
from benchmarks.harness.processes import live_service
from benchmarks.harness.router_decisions import decisions
from benchmarks.harness.runner import DEFAULT_BUNDLE, Progress, bundle_folder, option
from bundle import COARSE, load_bundle
from client import FractalClient, SearchResult
from training.bundle_embeddings import onnx_embeddings
from training.data.registry import load_dataset
from training.evaluation.knn import knn_accuracy_table, normalize_prefix, prefix_neighbours
from training.evaluation.mixed_queries import MixedQuery, join_queries, named_need_queries
from training.evaluation.shortlist import measure_shortlist
from training.evaluation.steerability import SteerabilityScores
from training.frozen_encoder import FrozenEncoder
from training.head_job import train
from training.prepared_data import DataConfig, PreparedData, prepare_data
from training.train_config import PAPER_SEEDS, TrainConfig
from training.trainer import embed_features

PREFIX_DIMS = [64, 128, 192, 256]
K = 10
C2F_FACTOR = 4
# (name, changes to TrainConfig()): the defaults' neighbourhood and the recipe they replaced.
PARETO: tuple[tuple[str, dict], ...] = (
    ("5 epochs at 1e-4, discard 5 (before)", {"epochs": 5, "learning_rate": 1e-4,
                                              "discard_weight": 5.0}),
    ("5 epochs at 1e-4, discard 3", {"epochs": 5, "learning_rate": 1e-4, "discard_weight": 3.0}),
    ("discard 0", {"discard_weight": 0.0}),
    ("discard 0.25", {"discard_weight": 0.25}),
    ("discard 0.35", {"discard_weight": 0.35}),
    ("discard 0.5 (default)", {}),
    ("discard 0.75", {"discard_weight": 0.75}),
    ("discard 1", {"discard_weight": 1.0}),
    ("discard 2", {"discard_weight": 2.0}),
    ("discard 0.5, SupCon 0", {"supcon_weight": 0.0}),
    ("discard 0.5, SupCon 2", {"supcon_weight": 2.0}),
    ("discard 0.5, 20 epochs", {"epochs": 20}),
    ("MRL (the bar)", {"objective": "mrl"}),
)  # fmt: skip
DEFAULT_SETTING = "discard 0.5 (default)"
MRL_SETTING = "MRL (the bar)"
ALPHAS = tuple(round(float(a), 2) for a in np.linspace(0.0, 1.0, 21))
PAPER_CROSSOVER = 0.35


@dataclass(frozen=True)
class Settings:
    """Every parameter of a run."""

    bundle: Path = option(DEFAULT_BUNDLE, "the default V5 bundle", parse=bundle_folder)
    mrl_bundle: Path | None = option(
        None, "an MRL bundle of the same data, for the auto comparison", parse=bundle_folder
    )
    max_train: int | None = option(10000, "training texts the heads are trained and scored on")
    max_test: int | None = option(2000, "test texts (queries)")
    seeds: tuple[int, ...] = option(PAPER_SEEDS, "seeds of part 2")
    pareto: tuple[str, ...] = option(
        tuple(name for name, _ in PARETO), "Pareto settings (names of PARETO)"
    )
    epochs: int | None = option(None, "override every setting's epochs (smoke runs)")
    documents: int | None = option(None, "training utterances ingested by the live service")
    mixed_size: int = option(1000, "queries per mixed workload (half coarse)")


SMOKE = Settings(
    max_train=1500, max_test=300, seeds=(42, 123), epochs=1, documents=600, mixed_size=60,
    pareto=(DEFAULT_SETTING, "discard 0", MRL_SETTING),
)  # fmt: skip


def _config(name: str, settings: Settings, seed: int = 42) -> TrainConfig:
    config = replace(TrainConfig(seed=seed), **dict(PARETO)[name])
    return replace(config, epochs=settings.epochs) if settings.epochs else config


def _head_scores(data: PreparedData, config: TrainConfig) -> dict:
    """Train one head and score it on what every route needs of it."""
    started = time.perf_counter()
    head = train(data, config, progress=False).head
    corpus, queries = (
        embed_features(head, data.train_features),
        embed_features(head, data.test_features),
    )
    train_labels, test_labels = data.splits.train.labels, data.splits.test.labels
    knn = knn_accuracy_table(corpus, train_labels, queries, test_labels, PREFIX_DIMS)
    neighbours = prefix_neighbours(corpus, queries, PREFIX_DIMS[0], K)
    shortlist = measure_shortlist(corpus, queries, PREFIX_DIMS, first_stage=False)
    chosen = next((row for row in shortlist.rows if row.dim == shortlist.shortlist_dim), None)
    choice = shortlist.shortlist_ks.index(shortlist.choice_k)
    return {
        "s": SteerabilityScores.from_table(knn).s,
        "domain_knn": knn[0].tolist(),
        "intent_knn": knn[-1].tolist(),
        "top10_same_domain_64": float(np.mean(train_labels[neighbours, 0] == test_labels[:, :1])),
        "shortlist_dim": shortlist.shortlist_dim,
        "c2f_recall_at_shortlist": 1.0 if chosen is None else chosen.recall[choice],
        "c2f_recall_at_64": shortlist.rows[0].recall[choice],
        "seconds": time.perf_counter() - started,
    }


def pareto(data: PreparedData, settings: Settings, progress: Progress) -> list[dict]:
    rows = []
    for name in settings.pareto:
        config = _config(name, settings)
        scores = _head_scores(data, config)
        rows.append({"name": name, "config": config.to_json(), **scores})
        progress(
            f"  {name}: S {scores['s']:+.3f}, domain k-NN@64 {scores['domain_knn'][0]:.3f}, "
            f"top-10 same domain {scores['top10_same_domain_64']:.3f}"
        )
    return rows


def _mean(rows: list[dict], key: str, index: int) -> float:
    return float(np.mean([row[key][index] for row in rows]))


def seeds_and_workload(data: PreparedData, settings: Settings, progress: Progress) -> dict:
    """Part 2: the defaults over seeds, and the paper's Fig. 9 mixed workload."""
    runs: dict[str, list[dict]] = {"v5": [], "mrl": []}
    for objective in runs:
        for seed in settings.seeds:
            config = _config(DEFAULT_SETTING, settings, seed)
            config = replace(config, objective=objective)
            runs[objective].append(_head_scores(data, config))
            progress(f"  {objective} seed {seed}: S {runs[objective][-1]['s']:+.3f}")
    raw = knn_accuracy_table(
        data.train_features,
        data.splits.train.labels,
        data.test_features,
        data.splits.test.labels,
        [data.train_features.shape[1]],
    )
    v5, mrl = runs["v5"], runs["mrl"]
    v5_coarse, v5_fine = _mean(v5, "domain_knn", 0), _mean(v5, "intent_knn", -1)
    mrl_coarse, mrl_fine = _mean(mrl, "domain_knn", -1), _mean(mrl, "intent_knn", -1)
    v5_full_coarse = _mean(v5, "domain_knn", -1)
    workload = [
        {
            "alpha": alpha,
            "v5_adaptive": alpha * v5_coarse + (1 - alpha) * v5_fine,
            "v5_256": alpha * v5_full_coarse + (1 - alpha) * v5_fine,
            "mrl_256": alpha * mrl_coarse + (1 - alpha) * mrl_fine,
        }
        for alpha in ALPHAS
    ]
    return {
        "runs": runs,
        "raw_intent_knn_full": float(raw[-1, 0]),
        "raw_dim": int(data.train_features.shape[1]),
        "workload": workload,
        "v5_wins_at": [row["alpha"] for row in workload if row["v5_adaptive"] > row["mrl_256"]],
    }


def live_c2f(settings: Settings, progress: Progress) -> dict:
    """Part 3: C2F recall@10 against exact full-dim search through the live service."""
    manifest = load_bundle(settings.bundle)
    data = load_dataset("clinc150", max_train=settings.documents, max_test=settings.max_test)
    documents = labelled_documents(data.train, {"domain": 0, "intent": 1}, id_prefix="train-")
    queries = list(data.test.texts)
    with tempfile.TemporaryDirectory() as work:
        index_dir, log = Path(work) / "index", Path(work) / "service.log"
        with (
            live_service(
                settings.bundle, index_dir, log, c2f_factor=C2F_FACTOR, index_kinds="exact"
            ) as url,
            FractalClient(url) as client,
        ):
            progress(f"live service: ingesting {len(documents)} documents")
            client.add_documents(documents)
            progress(f"live service: {len(queries)} queries, exact and C2F")
            options = {"k": K, "granularity": "fine", "index": "exact"}
            exact = client.search_batch(queries, **options)
            c2f = client.search_batch(queries, **options, rerank="c2f")
            at_coarse = client.search_batch(
                queries, **options, rerank="c2f", shortlist_dim=manifest.coarse_dim
            )
            info = client.info()

    def recall(results: list[SearchResult]) -> float:
        return float(
            np.mean([len(set(a.ids) & set(e.ids)) / K for a, e in zip(results, exact, strict=True)])
        )

    return {
        "documents": len(documents),
        "queries": len(queries),
        "shortlist_k": c2f[0].route.shortlist_k,
        "shortlist_dim": c2f[0].route.shortlist_dimension,
        "info_shortlist_dim": info["resolutions"]["shortlist_dim"],
        "recall_at_shortlist": recall(c2f),
        "coarse_dim": manifest.coarse_dim,
        "fine_dim": manifest.fine_dim,
        "recall_at_coarse": recall(at_coarse),
        "export_table": manifest.evaluation.get("shortlist"),
    }


def _precision_at_level(
    corpus: np.ndarray,
    corpus_labels: np.ndarray,
    vectors: np.ndarray,
    queries: list[MixedQuery],
    coarse: np.ndarray,
    dims: tuple[int, int],
) -> float:
    """Mean precision@10 at each query's level, each query searched exactly at the prefix its
    route (``coarse[i]``) picks."""
    precision = np.zeros(len(queries))
    for routed_coarse, dim in ((True, dims[0]), (False, dims[1])):
        rows = np.flatnonzero(coarse == routed_coarse)
        if not len(rows):
            continue
        scores = normalize_prefix(vectors[rows], dim) @ normalize_prefix(corpus, dim).T
        top = np.argpartition(-scores, K - 1, axis=1)[:, :K]
        for row, hits in zip(rows, top, strict=True):
            query = queries[row]
            if query.level == COARSE:
                precision[row] = np.mean(corpus_labels[hits, 0] == query.coarse_label)
            else:
                precision[row] = np.mean(corpus_labels[hits, -1] == query.fine_label)
    return float(precision.mean())


def auto_routes(bundle: Path, settings: Settings, progress: Progress) -> dict:
    """Part 4 for one bundle: decisions and retrieval quality on both mixed workloads."""
    manifest = load_bundle(bundle)
    data = load_dataset("clinc150", max_train=settings.documents, max_test=settings.max_test)
    progress(f"auto ({manifest.objective}): embedding {len(data.train)} corpus texts")
    corpus = onnx_embeddings(bundle, list(data.train.texts))
    dims = (manifest.coarse_dim, manifest.fine_dim)
    workloads = {
        "join": join_queries(data.test, settings.mixed_size, seed=1),
        "named_need": named_need_queries(data.test, settings.mixed_size, seed=1),
    }
    out = {"bundle": str(bundle), "objective": manifest.objective, "workloads": {}}
    for name, queries in workloads.items():
        vectors = onnx_embeddings(bundle, [query.text for query in queries])
        is_coarse = np.array([query.level == COARSE for query in queries])
        decided = {**decisions(bundle, vectors), "oracle": is_coarse}
        out["workloads"][name] = {
            policy: {
                "accuracy": float(np.mean(coarse == is_coarse)),
                "coarse_recall": float(np.mean(coarse[is_coarse])),
                "fine_recall": float(np.mean(~coarse[~is_coarse])),
                "precision_at_level": _precision_at_level(
                    corpus, data.train.labels, vectors, queries, coarse, dims
                ),
            }
            for policy, coarse in decided.items()
        }
        progress(f"  {name}: " + ", ".join(
            f"{p} {s['accuracy']:.3f}" for p, s in out["workloads"][name].items()
        ))  # fmt: skip
    return out


def run(settings: Settings, progress: Progress) -> dict:
    config = DataConfig("clinc150", settings.max_train, settings.max_test)
    data = prepare_data(config, FrozenEncoder(), progress=progress.enabled)
    progress("Part 1: Pareto across V5 settings (seed 42)")
    record: dict = {"settings": {k: str(v) for k, v in asdict(settings).items()}}
    record["pareto"] = pareto(data, settings, progress)
    progress.checkpoint(record | {"targets": []})
    progress(f"Part 2: the defaults over seeds {list(settings.seeds)}")
    record["defaults"] = seeds_and_workload(data, settings, progress)
    progress.checkpoint(record | {"targets": []})
    progress("Part 3: C2F through the live service")
    record["live_c2f"] = live_c2f(settings, progress)
    progress("Part 4: granularity=auto")
    record["auto"] = [auto_routes(settings.bundle, settings, progress)]
    if settings.mrl_bundle is not None:
        record["auto"].append(auto_routes(settings.mrl_bundle, settings, progress))
    return record | {"targets": targets(record)}


def _default_row(record: dict, name: str) -> dict:
    return next(row for row in record["pareto"] if row["name"] == name)


def targets(record: dict) -> list[dict]:
    defaults, live = record["defaults"], record["live_c2f"]
    v5, mrl = defaults["runs"]["v5"], defaults["runs"]["mrl"]
    top10 = float(np.mean([r["top10_same_domain_64"] for r in v5]))
    mrl_top10 = float(np.mean([r["top10_same_domain_64"] for r in mrl]))
    domain64, mrl_domain256 = _mean(v5, "domain_knn", 0), _mean(mrl, "domain_knn", -1)
    s = float(np.mean([r["s"] for r in v5]))
    intent256 = _mean(v5, "intent_knn", -1)
    late = [row for row in defaults["workload"] if row["alpha"] >= PAPER_CROSSOVER]
    out = [
        {
            "target": f"C2F recall@10 ≥ 0.99 vs exact {live['fine_dim']}-d search through the "
            f"live service, default bundle, k' = {live['shortlist_k']} (4k)",
            "reached": round(live["recall_at_shortlist"], 4),
            "met": live["recall_at_shortlist"] >= 0.99,
        },
        {
            "target": "64-d coarse top-10 same-domain ≥ 0.95 and ≥ MRL's (mean over seeds)",
            "reached": f"{top10:.3f} (MRL {mrl_top10:.3f})",
            "met": top10 >= 0.95 and top10 >= mrl_top10,
        },
        {
            "target": "domain k-NN@64 ≥ MRL's domain k-NN@256 (mean over seeds)",
            "reached": f"{domain64:.3f} (MRL@256 {mrl_domain256:.3f})",
            "met": domain64 >= mrl_domain256,
        },
        {
            "target": f"V5 S ≥ +0.15 ({len(v5)} seeds)",
            "reached": round(s, 4),
            "met": s >= 0.15,
        },
        {
            "target": f"V5 intent k-NN@256 ≥ raw encoder ({defaults['raw_dim']}-d)",
            "reached": f"{intent256:.3f} (raw {defaults['raw_intent_knn_full']:.3f})",
            "met": intent256 >= defaults["raw_intent_knn_full"],
        },
        {
            "target": f"V5-adaptive beats MRL-256 on the Fig. 9 workload for α ≥ {PAPER_CROSSOVER}",
            "reached": f"wins at α ∈ {defaults['v5_wins_at']}",
            "met": bool(late) and all(row["v5_adaptive"] > row["mrl_256"] for row in late),
        },
    ]
    for bundle in record["auto"]:
        for name, policies in bundle["workloads"].items():
            if "router" not in policies:
                continue
            router = policies["router"]
            fixed = max(policies["always_coarse"]["precision_at_level"],
                        policies["always_fine"]["precision_at_level"])  # fmt: skip
            out += [
                {
                    "target": f"auto decision accuracy ≥ 0.90 ({bundle['objective']}, {name})",
                    "reached": round(router["accuracy"], 4),
                    "met": router["accuracy"] >= 0.90,
                },
                {
                    "target": f"auto precision@10 at the query's level ≥ the better fixed route "
                    f"({bundle['objective']}, {name}, 50/50)",
                    "reached": f"{router['precision_at_level']:.3f} (best fixed {fixed:.3f})",
                    "met": router["precision_at_level"] >= fixed,
                },
            ]
    return out


def _f(value: float) -> str:
    return f"{value:.3f}"


def _pareto_table(record: dict) -> str:
    rows = [
        [
            f"**{row['name']}**" if row["name"] == DEFAULT_SETTING else row["name"],
            f"{row['s']:+.3f}",
            _f(row["domain_knn"][0]),
            _f(row["top10_same_domain_64"]),
            _f(row["intent_knn"][0]),
            _f(row["intent_knn"][-1]),
            _f(row["domain_knn"][-1]),
            f"{row['shortlist_dim']}: {_f(row['c2f_recall_at_shortlist'])}",
            _f(row["c2f_recall_at_64"]),
        ]
        for row in record["pareto"]
    ]
    return markdown_table(
        ["setting", "S", "domain k-NN@64", "top-10 same domain @64", "intent k-NN@64",
         "intent k-NN@256", "domain k-NN@256", "C2F recall@10 at the shortlist (k′ = 40)",
         "C2F at 64-d"],
        rows,
    )  # fmt: skip


def _seeds_table(record: dict) -> str:
    defaults = record["defaults"]
    rows = []
    for objective, runs in defaults["runs"].items():

        def stat(values: list[float]) -> str:
            return f"{np.mean(values):.3f} ± {np.std(values, ddof=1) if len(values) > 1 else 0:.3f}"

        rows.append([
            objective,
            stat([r["s"] for r in runs]),
            stat([r["domain_knn"][0] for r in runs]),
            stat([r["domain_knn"][-1] for r in runs]),
            stat([r["top10_same_domain_64"] for r in runs]),
            stat([r["intent_knn"][-1] for r in runs]),
            stat([r["c2f_recall_at_shortlist"] for r in runs]),
            "/".join(str(r["shortlist_dim"]) for r in runs),
        ])  # fmt: skip
    return markdown_table(
        ["objective", "S", "domain k-NN@64", "domain k-NN@256", "top-10 same domain @64",
         "intent k-NN@256", "C2F recall at its shortlist", "shortlist prefix per seed"],
        rows,
    )  # fmt: skip


def _workload_table(record: dict) -> str:
    rows = [
        [f"{row['alpha']:.2f}", _f(row["v5_adaptive"]), _f(row["v5_256"]), _f(row["mrl_256"]),
         "yes" if row["v5_adaptive"] > row["mrl_256"] else "no"]
        for row in record["defaults"]["workload"]
        if round(row["alpha"] * 20) % 2 == 0 or row["alpha"] == PAPER_CROSSOVER
    ]  # fmt: skip
    return markdown_table(
        ["α (coarse share)", "V5-adaptive (64-d coarse, 256-d fine)", "V5 at 256-d", "MRL at 256-d",
         "V5-adaptive wins"],
        rows,
    )  # fmt: skip


def _live_section(record: dict) -> list[str]:
    live = record["live_c2f"]
    lines = [
        f"{live['documents']:,} training utterances ingested over HTTP, {live['queries']:,} test "
        f"utterances searched exactly at {live['fine_dim']}-d and by C2F with k′ = "
        f"{live['shortlist_k']}; `/info` reports `shortlist_dim` {live['info_shortlist_dim']}.",
        "",
        markdown_table(
            ["shortlist prefix", "C2F recall@10 vs exact"],
            [
                [f"{live['shortlist_dim']} (the bundle's)", _f(live["recall_at_shortlist"])],
                [
                    f"{live['coarse_dim']} (coarse, `shortlist_dim={live['coarse_dim']}`)",
                    _f(live["recall_at_coarse"]),
                ],
            ],
        ),  # fmt: skip
    ]
    table = live.get("export_table")
    if table:
        ks = table["shortlist_ks"]
        lines += [
            "",
            f"Measured at export ({table['documents']:,} training texts as the corpus, "
            f"{table['queries']:,} test texts as queries; the shortlist is the smallest prefix "
            f"reaching {table['target_recall']} at k′ = {table['choice_k']}):",
            "",
            markdown_table(
                ["prefix", *(f"k′ = {k}" for k in ks)],
                [[row["dim"], *(_f(v) for v in row["recall"])] for row in table["recall_at_k"]],
            ),
        ]
    return lines


def _auto_section(record: dict) -> list[str]:
    lines = []
    for bundle in record["auto"]:
        for name, policies in bundle["workloads"].items():
            lines += [
                "",
                f"**{bundle['objective']}** bundle (`{bundle['bundle']}`), **{name}** workload"
                + (" (held out of every fit and choice)" if name == "named_need" else "") + ":",
                "",
                markdown_table(
                    ["policy", "right resolution", "coarse → coarse", "fine → fine",
                     "precision@10 at the query's level"],
                    [[p, _f(v["accuracy"]), _f(v["coarse_recall"]), _f(v["fine_recall"]),
                      _f(v["precision_at_level"])] for p, v in policies.items()],
                ),
            ]  # fmt: skip
    return lines


def _defaults_section(report: dict) -> list[str]:
    defaults = report["defaults"]
    return [
        f"## 2. The defaults over {len(defaults['runs']['v5'])} seeds",
        "",
        _seeds_table(report),
        "",
        f"Raw encoder ({defaults['raw_dim']}-d) intent k-NN: "
        f"{defaults['raw_intent_knn_full']:.3f}.",
        "",
        "The paper's mixed workload (Fig. 9): a share α of the queries is coarse (scored by domain "
        "k-NN, at 64-d for V5-adaptive, at 256-d otherwise), the rest fine (intent k-NN at 256-d); "
        "means over the seeds.",
        "",
        _workload_table(report),
    ]


def markdown(report: dict) -> str:
    """The results file; a checkpoint (parts still to run) shows the parts measured so far."""
    smoke = " (smoke run)" if report["smoke"] else ""
    sections = [
        [
            f"# Every route earns its keep{smoke}",
            "",
            f"Command: `{report['command']}`",
            "",
            "CLINC-150, frozen all-MiniLM-L6-v2 features; the training split is the corpus and "
            "the only data anything is fitted or chosen on, the test split gives the queries. "
            "k-NN is the paper's probe (k = 5, cosine on each L2-normalised prefix).",
            "",
            "## Targets",
            "",
            targets_table(report["targets"]),
        ],
        [
            "## 1. The coarse prefix: Pareto across V5 settings (seed 42)",
            "",
            "Every setting changes `TrainConfig()` (10 epochs, lr 3e-4, SupCon 0.5, discard 0.5) "
            "as named; MRL at the same budget is the bar.",
            "",
            _pareto_table(report),
        ],
    ]
    if "defaults" in report:
        sections.append(_defaults_section(report))
    if "live_c2f" in report:
        sections.append(["## 3. C2F through the live service", "", *_live_section(report)])
    if "auto" in report:
        sections.append([
            "## 4. granularity=auto",
            "",
            "Decisions by the service's own router code on the bundle's ONNX graphs; retrieval "
            "quality by exact search over the corpus's bundle embeddings at the prefix each "
            "decision picks (coarse → 64-d, fine → 256-d), 50/50 mixes.",
            *_auto_section(report),
        ])  # fmt: skip
    sections.append(["## Machine", "", bullet_list(report["machine"])])
    return "\n\n".join("\n".join(section) for section in sections) + "\n"


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    for row in report["pareto"]:
        mrl = row["name"] == MRL_SETTING
        left.scatter(row["s"], row["domain_knn"][0], marker="s" if mrl else "o",
                     color="tab:red" if mrl else "tab:blue")  # fmt: skip
        left.annotate(row["name"], (row["s"], row["domain_knn"][0]), fontsize=7,
                      xytext=(4, 2), textcoords="offset points")  # fmt: skip
    bar = (
        _default_row(report, MRL_SETTING)["domain_knn"][-1]
        if any(row["name"] == MRL_SETTING for row in report["pareto"])
        else None
    )
    if bar is not None:
        left.axhline(bar, color="tab:red", linestyle="--", linewidth=1,
                     label="MRL domain k-NN@256 (the target)")  # fmt: skip
    left.axvline(0.15, color="grey", linestyle=":", linewidth=1, label="S = +0.15")
    left.set_xlabel("steerability S")
    left.set_ylabel("domain k-NN accuracy at 64-d")
    left.set_title("Coarse prefix vs steerability (seed 42)")
    left.legend(fontsize=8)
    workload = report["defaults"]["workload"]
    alphas = [row["alpha"] for row in workload]
    for key, label in (("v5_adaptive", "V5-adaptive"), ("v5_256", "V5 at 256-d"),
                       ("mrl_256", "MRL at 256-d")):  # fmt: skip
        right.plot(alphas, [row[key] for row in workload], label=label)
    right.axvline(PAPER_CROSSOVER, color="grey", linestyle=":", linewidth=1,
                  label="paper's crossover α = 0.35")  # fmt: skip
    right.set_xlabel("α, share of coarse queries")
    right.set_ylabel("k-NN accuracy at the query's level")
    right.set_title("Mixed workload (Fig. 9 protocol)")
    right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
