"""The `picpac` command line (click) and PicPac's `picpac-import`."""
from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any
from contextlib import contextmanager, nullcontext

import click

from .._version import __version__
from ..errors import PicPacError, SourceError
from ..file import durable
from ..image.decoding import MAX_PIXELS
from ..sources.base import FORMATS, LABEL_KINDS, PICPAC_NUMBERS, format_name
from ..stores import KINDS as STORE_KINDS, TABLE_KINDS
from .docs import docs_hint

IMPORT_FORMATS = list(FORMATS)
"""The import formats' names; ``-f`` also takes PicPac's numbers (``picpac.sources.base.PICPAC_NUMBERS``)."""


class _UsageError(click.UsageError):
    """click's usage error (an unknown option or command, a missing argument, a bad value) shown as docs/cli.md
    promises every error: one line, ``picpac: error: ...``, exit status 2 (click's own is four lines)."""

    def __init__(self, original: click.UsageError):
        super().__init__(original.format_message(), original.ctx)

    def show(self, file: Any = None) -> None:
        root = self.ctx.find_root().info_name if self.ctx is not None else "picpac"
        where = self.ctx.command_path if self.ctx is not None else root
        message = self.format_message().rstrip(".").replace("\n", " ")
        click.echo(f"{root}: error: {message}; `{where} --help` lists the options", err=True)


class _ReportErrors:
    """Print a PicPacError (or a usage error) as one line on stderr and exit 2, without a traceback. SIGTERM and
    SIGHUP unwind like Ctrl-C (:func:`picpac.file.durable.exit_on_signals`), so every temporary file is removed;
    then one line on stderr and exit status 128 + the signal's number (143 for SIGTERM)."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            raise exc if isinstance(exc, _UsageError) else _UsageError(exc) from None

    def invoke(self, ctx: click.Context):
        try:
            # (a command invoked by a group is already inside the group's block: the inner one changes nothing)
            main_thread = threading.current_thread() is threading.main_thread()
            with durable.exit_on_signals() if main_thread else nullcontext():
                return super().invoke(ctx)
        except click.UsageError as exc:
            raise exc if isinstance(exc, _UsageError) else _UsageError(exc) from None
        except PicPacError as exc:
            message = str(exc).replace("\r", "\\r").replace("\n", "\\n")  # one line, whatever a path holds
            click.echo(f"{ctx.find_root().info_name}: error: {message}", err=True)
            ctx.exit(2)
        except durable.Terminated as exc:
            click.echo(f"{ctx.find_root().info_name}: {exc} (temporary files removed)", err=True)
            ctx.exit(exc.code)


@contextmanager
def _no_temps_left(*paths: str) -> Iterator[None]:
    """However the block ends early (an error, Ctrl-C, SIGTERM), no temporary file of ``paths`` that this
    process made is left: the writers remove theirs as they unwind, and this catches one that a signal
    interrupted in the middle of that cleanup."""
    try:
        yield
    except BaseException:
        for path in paths:
            durable.remove_temps_of(durable.target(path), os.getpid())
        raise


class _Group(_ReportErrors, click.Group):
    pass


class _Command(_ReportErrors, click.Command):
    pass


def _version_message() -> str:
    """``--version``: the version, whether the fast path is on (and if not, why, what it costs and how to get it), and
    the variant of picpac's kernels that runs."""
    from ..image import decoding, kernels

    fast = decoding.FAST_PATH_OFF or ("on (picpac.image._jpeg, libjpeg-turbo): JPEGs decoded in part and at reduced "
                                      "scales, each sample in one C call")
    return (f"%(prog)s, version %(version)s\nfast path: {fast.removeprefix('the fast path is ')}\n"
            f"kernels: {kernels.variant()} (picpac's own arithmetic: the same bytes on every CPU and OpenCV)")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Documentation: `picpac docs` lists the pages, `picpac docs TOPIC` prints one.")
@click.version_option(__version__, prog_name="picpac", message=_version_message())
def main() -> None:
    """picpac: a training dataset in one file, streamed with on-the-fly decoding and augmentation."""


def _import_options(f):
    f = click.option("--strict", is_flag=True,
                     help="Fail on the first missing, undecodable, damaged or too large file, writing nothing.")(f)
    f = click.option("--keep-damaged", is_flag=True,
                     help="Import damaged JPEGs (libjpeg warns: \"Corrupt JPEG data ...\") as libjpeg fills them in, "
                          "listing them [default: skip them, listing them].")(f)
    f = click.option("--max-size", type=click.IntRange(min=1), default=None,
                     help="Downsize images whose longer side exceeds N pixels and re-encode them.")(f)
    f = click.option("--max-pixels", type=click.IntRange(min=0), default=MAX_PIXELS, show_default=True,
                     help="Reject images (and masks) whose header declares more than N pixels (width x height), "
                          "before decoding them: decompression bombs. 0: no limit.")(f)
    f = click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="Threads validating images in parallel [default: number of cores].")(f)
    f = click.option("--root", type=click.Path(file_okay=False), default=None,
                     help="Directory that relative paths in a list, CSV or COCO file are taken from "
                          "[default: the file's directory].")(f)
    f = click.option("--overwrite", is_flag=True,
                     help="Replace DB if it exists [default: refuse, leaving DB as it is].")(f)
    f = click.option("--shard-size", default=None, metavar="SIZE",
                     help="Write shards of about SIZE bytes (500MB, 1GB, 1GiB), DB-00000.picpac, ..., and their "
                          "index file DB.shards (DB's name, with .shards for .picpac) [default: one file].")(f)
    return f


class ImportFormat(click.ParamType):
    """``-f``: a format's name or PicPac's number of one, read through the one table both import
    commands share (:func:`picpac.sources.base.format_name`)."""

    name = "format"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "FORMAT|N"

    def convert(self, value, param, ctx):
        try:
            return format_name(value)
        except SourceError as exc:
            self.fail(str(exc), param, ctx)


_FORMAT_HELP = ("Layout of SRC: " + ", ".join(IMPORT_FORMATS) + " (auto detects it), or PicPac's number of one: "
                + ", ".join(f"{n} {name}" for n, name in PICPAC_NUMBERS.items()) + f" ({docs_hint('import')}).")


def _import_command(default_format: str):
    """The options of `picpac import` and `picpac-import`: the same for both, only -f's default differs."""
    return lambda f: _import_arguments(_import_options(f), default_format)


def _import_arguments(f, default_format: str):
    f = click.option("--class-name-column", default=None, metavar="N|NAME",
                     help="-f list, csv: the column naming the class of each integer label (its number, 1 the first, "
                          "or its header name); the classes map each id to its name [default: a list's header column "
                          "class_name or name].")(f)
    f = click.option("--label-column", default=None, metavar="N|NAME",
                     help="-f list, csv: the label column (its number, 1 the first, or its header name) [default: a "
                          "list's header column label, class or class_index, else column 2 of a 2-column list; a "
                          "CSV's column label]; --from parquet, arrow, mds: the label column's name [default: the "
                          "first ClassLabel; mds: label].")(f)
    f = click.option("--image-column", default=None, metavar="NAME",
                     help="--from parquet, arrow, mds: the column of the images [default: the first Image].")(f)
    f = click.option("--bbox-format", type=click.Choice(["xywh", "xyxy"]), default="xywh", show_default=True,
                     help="--from parquet, arrow: the boxes of a detection column (objects: bbox, category), "
                          "in pixels.")(f)
    f = click.option("--label-kind", type=click.Choice(LABEL_KINDS), default="auto", show_default=True,
                     help="-f list, csv: the labels are numbers, or class names (each its position in the sorted "
                          "names); auto takes whichever every label is and refuses a column mixing the two.")(f)
    f = click.option("--classes", type=click.Path(dir_okay=False), default=None,
                     help="Class names for -f yolo, yolo-seg, maskdir: a YOLO dataset YAML (`names:`) or a text "
                          "file with one name per line.")(f)
    f = click.option("--labels", type=click.Path(file_okay=False), default=None,
                     help="Folder of the YOLO label files (-f yolo, yolo-seg) [default: `labels` beside SRC] "
                          "or of the masks (-f maskdir).")(f)
    f = click.option("--unpickle", is_flag=True,
                     help="--from lmdb: read an LMDB written by tensorpack's LMDBSerializer, whose datapoints are "
                          "pickles; unpickling runs code: only for a file you trust.")(f)
    f = click.option("--label-feature", default=None,
                     help="--from tfrecord: the feature that holds each record's label, e.g. image/class/label "
                          "(TensorFlow's ImageNet layout) [default: picpac's own picpac/label].")(f)
    f = click.option("--image-feature", default=None,
                     help="--from tfrecord: the feature that holds each record's encoded image, e.g. image/encoded; "
                          "it becomes the field `image` [default: each bytes feature a field of its name].")(f)
    f = click.option("--from", "store", type=click.Choice([*STORE_KINDS, *TABLE_KINDS]), default=None,
                     help=f"SRC is a whole dataset in this storage format ({docs_hint('stores')}), not images; "
                          "excludes -f and the image options.")(f)
    f = click.option("-f", "--format", "fmt", type=ImportFormat(), default=default_format, show_default=True,
                     help=_FORMAT_HELP)(f)
    f = click.argument("db", type=click.Path(dir_okay=False))(f)
    return click.argument("src", type=click.Path())(f)


def _import(src: str, db: str, fmt: str, store: str | None, image_feature: str | None, label_feature: str | None,
            unpickle: bool, image_column: str | None, bbox_format: str, **options) -> None:
    """What `picpac import` and `picpac-import` run."""
    features = {"image_feature": image_feature, "label_feature": label_feature}
    if store != "tfrecord" and any(features.values()):
        raise click.UsageError("--image-feature and --label-feature name the features of a TFRecord file: they go "
                               "with --from tfrecord")
    if unpickle and store != "lmdb":
        raise click.UsageError("--unpickle reads tensorpack's LMDBs: it goes with --from lmdb")
    if unpickle:
        features["unpickle"] = True
    ctx = click.get_current_context()
    if store not in TABLE_KINDS and (image_column or ctx.get_parameter_source("bbox_format")
                                       is not click.core.ParameterSource.DEFAULT):
        raise click.UsageError("--image-column and --bbox-format name columns of a table: they go with --from "
                               f"{', '.join(TABLE_KINDS)}")
    if store is None:
        from .ingest import import_dataset

        with _no_temps_left(db):
            report = import_dataset(src, db, format=fmt, **options)
        click.echo(report.summary())
        return
    table = ("strict", "keep_damaged", "max_pixels", "threads", "shard_size", "label_column")
    given = [name for name in ("fmt", "labels", "classes", "strict", "keep_damaged", "max_size", "max_pixels",
                               "threads", "root", "shard_size", "label_kind", "label_column", "class_name_column")
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
             and not (store in TABLE_KINDS and name in table)]
    if given:
        shown = [("-f/--format" if n == "fmt" else "--" + n.replace("_", "-")) for n in given]
        raise click.UsageError(f"--from cannot be combined with {', '.join(shown)} "
                               "(they apply to image layouts)")
    if store in TABLE_KINDS:
        from .tables import import_table

        with _no_temps_left(db):
            report = import_table(src, db, store, image_column=image_column, bbox_format=bbox_format,
                                  **{name: options[name] for name in ("overwrite", *table)})
        click.echo(report.summary())
        return
    from ..stores import import_store

    with _no_temps_left(db):
        report = import_store(src, db, store, overwrite=options["overwrite"], progress=_bar(f"import {store}"),
                              **features)
    click.echo(report.summary())


@main.command("import", cls=_Command)
@_import_command("auto")
def import_command(**options) -> None:
    """Import images (and labels, annotations, masks) from SRC into the picpac database DB.

    With --from FORMAT, SRC is a dataset in another storage format (lmdb, tfrecord, hdf5, npz, sqlite,
    tar, binary), copied record by record, or a table (parquet, arrow, mds) whose rows are checked as images are.
    """
    _import(**options)


def _bar(desc: str):
    from tqdm import tqdm

    return lambda total: tqdm(total=total, desc=desc, unit="rec", disable=None)


def _storage_options(f):
    """``--storage-options JSON``: fsspec's options for a DB on object storage, as ImageStream's key of that name."""
    def parse(ctx: click.Context, param: click.Parameter, value: str | None):
        if value is None:
            return None
        from ..stream.config import StreamConfig
        try:
            options = json.loads(value)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON ({exc}): e.g. '{{\"anon\": true}}'") from None
        try:
            return StreamConfig.from_dict({"storage_options": options}).remote_options()
        except PicPacError as exc:
            raise click.BadParameter(str(exc)) from None
    return click.option("--storage-options", "remote", default=None, metavar="JSON", callback=parse,
                        help="fsspec's options for a DB on object storage (s3://, gs://, https://), as JSON: "
                             "credentials, endpoint_url, anon ...; the environment's by default.")(f)


@main.command("export", cls=_Command)
@click.option("--to", "store", type=click.Choice([*STORE_KINDS, "parquet"]), required=True,
              help=f"Storage format of DST ({docs_hint('stores')}).")
@click.argument("db", type=click.Path())
@click.argument("dst", type=click.Path())
@click.option("--overwrite", is_flag=True, help="Replace DST if it exists [default: refuse, leaving DST as it is].")
@click.option("--layout", type=click.Choice(["picpac", "tensorpack"]), default=None,
              help="--to lmdb: picpac's records [default], or what tensorpack's LMDBSerializer.load reads: "
                   "[field values..., label] pickled.")
@click.option("--shard-size", default=None, metavar="SIZE",
              help="--to parquet: DST is a folder of files of about SIZE bytes (500MB, 1GB) [default: one file].")
@_storage_options
def export_command(store: str, db: str, dst: str, overwrite: bool, layout: str | None, shard_size: str | None,
                   remote) -> None:
    """Copy every record of the picpac database DB into DST in another storage format. DB may be a URL
    (s3://, gs://, https://), several files, a glob or a .shards index, as a stream takes.

    A tar is WebDataset's layout: the image as KEY.jpg, KEY.png, ... by its type, the label as KEY.cls.
    """
    from ..stores import export_store, index_path

    with _no_temps_left(dst, *([index_path(dst)] if store == "binary" else [])):
        report = export_store(db, dst, store, overwrite=overwrite, progress=_bar(f"export {store}"), remote=remote,
                              layout=layout, shard_size=shard_size)
    click.echo(report.summary())


PICPAC_IMPORT_OPTIONS = {
    "--max": "PicPac's --max N shrank each image so that its shorter side was at most N; picpac keeps the images "
             "as they are and sizes them when it streams them (resize_shorter=N), or shrinks the longer side at "
             "import: picpac-import ... --max-size N, or picpac downsize DB OUT --max-size N",
    "--resize": "PicPac's --resize N stored N x N images; picpac keeps the images as they are and resizes them "
                "when it streams them: ImageStream(DB, resize_width=N, resize_height=N)",
    "--encode": "PicPac's --encode EXT re-encoded every image; picpac stores the original bytes, and re-encodes "
                "only what it shrinks: picpac downsize DB OUT --max-size N [--quality Q]",
    "--compact": "PicPac's --compact wrote records without its 4 KiB padding; picpac never pads records, so "
                 "leave it out (picpac compact DB reclaims what older commits left)",
}
"""PicPac's picpac-import options that picpac does not take, each with what to run instead."""


def _picpac_import_options(f):
    """PicPac's options of picpac-import that have no meaning here, refused with the replacement (hidden)."""
    def refuse(ctx: click.Context, param: click.Parameter, value: object) -> None:
        if value not in (None, False):
            given = param.opts[0] if value is True else f"{param.opts[0]} {value}"
            raise click.UsageError(f"{given} is not supported: {PICPAC_IMPORT_OPTIONS[param.opts[0]]}", ctx)

    for name in reversed(PICPAC_IMPORT_OPTIONS):
        kind = {"is_flag": True} if name == "--compact" else {"default": None}
        f = click.option(name, hidden=True, expose_value=False, callback=refuse, is_eager=True, **kind)(f)
    return f


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="picpac-import", message=_version_message())
@_picpac_import_options
@_import_command("list")
def picpac_import(**options) -> None:
    """Import SRC into the picpac database DB: PicPac's `picpac-import -f N SRC DB`, with the options and
    formats of `picpac import` (-f takes PicPac's numbers or the names; the default is 1, list)."""
    _import(**options)


@main.command("info", cls=_Command)
@click.argument("db", nargs=-1, required=True, type=click.Path())  # a directory: the Reader's "error:" line
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@_storage_options
def info_command(db: tuple[str, ...], as_json: bool, remote) -> None:
    """Show what DB holds: records, bytes, fields, classes, label histogram, image sizes. DB may be a URL
    (s3://, gs://, https://), several files, a glob or a .shards index: each shard is shown, then the totals."""
    from ..file.shards import resolve
    from .info import describe, format_description

    paths = resolve(list(db), remote) if len(db) > 1 else resolve(db[0], remote)
    descriptions = [describe(path, remote=remote) for path in paths]
    if len(descriptions) == 1:
        click.echo(json.dumps(descriptions[0], indent=2) if as_json else format_description(descriptions[0]))
        return
    total = {"shards": len(paths), "records": sum(d["records"] for d in descriptions),
             "file_bytes": sum(d["file_bytes"] for d in descriptions),
             "data_bytes": sum(d["data_bytes"] for d in descriptions)}
    if as_json:
        click.echo(json.dumps({"total": total, "shards": descriptions}, indent=2))
        return
    for d in descriptions:
        click.echo(format_description(d) + "\n")
    click.echo(f"total: {total['shards']} shards, {total['records']} records, {total['file_bytes']} bytes")


@main.command("verify", cls=_Command)
@click.argument("db", nargs=-1, required=True, type=click.Path())  # a directory: the Reader's "error:" line
@click.option("--decode", is_flag=True, help="Also decode every image (and mask) field.")
@_storage_options
def verify_command(db: tuple[str, ...], decode: bool, remote) -> None:
    """Check every checksum of DB; exit 1 naming each damaged record. DB may be a URL (s3://, gs://, https://),
    several files, a glob or a .shards index: each shard is checked, then the totals."""
    from ..file.shards import resolve
    from .verify import verify

    paths = resolve(list(db), remote) if len(db) > 1 else resolve(db[0], remote)
    reports = [verify(path, decode=decode, remote=remote) for path in paths]
    for report in reports:
        for problem in report.problems:
            click.echo(problem, err=True)
        click.echo(report.summary())
    ok = all(report.ok for report in reports)
    if len(reports) > 1:
        problems = sum(len(report.problems) for report in reports)
        click.echo(f"total: {len(reports)} shards, {sum(r.records for r in reports)} records, "
                   + ("OK" if ok else f"{problems} problem(s)"))
    sys.exit(0 if ok else 1)


@main.command("repair", cls=_Command)
@click.argument("db", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the repaired database here [default: replace DB].")
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists [default: refuse].")
def repair_command(db: str, output: str | None, overwrite: bool) -> None:
    """Recover every committed record DB still holds (after a damaged header slot, a damaged record or an
    interrupted write); an intact DB is left as it is."""
    from ..file.repair import repair

    with _no_temps_left(output or db):
        report = repair(db, output, overwrite=overwrite)
    click.echo(report.summary())


@main.command("merge", cls=_Command)
@click.argument("sources", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--relabel-by-source", is_flag=True,
              help="Label each record with the index of its source (0, 1, ...) [default: keep the labels, matched "
                   "to the union of the sources' class names].")
@click.option("--max-pixels", type=click.IntRange(min=0), default=MAX_PIXELS, show_default=True,
              help="Refuse a mask whose header declares more than N pixels, before decoding it to remap its class "
                   "values. 0: no limit.")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists [default: refuse, leaving OUT as it is].")
def merge_command(sources: tuple[str, ...], out: str, relabel_by_source: bool, max_pixels: int,
                  overwrite: bool) -> None:
    """Concatenate the records of the databases SOURCES into the new database OUT, source after source.

    Fields, groups and meta are copied as stored. Class names are reconciled: OUT's table is the first
    source's followed by each new name in the order met, and each class id becomes its class's id in it:
    the labels, or the annotation shapes' labels and mask values when the classes name those (COCO, YOLO
    and mask imports).
    """
    from .merge import merge

    with _no_temps_left(out):
        report = merge(sources, out, relabel_by_source=relabel_by_source, overwrite=overwrite,
                       progress=_bar("merge"), max_pixels=max_pixels)
    click.echo(report.summary())


@main.command("compact", cls=_Command)
@click.argument("db", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the compact database here [default: replace DB].")
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists [default: refuse].")
def compact_command(db: str, output: str | None, overwrite: bool) -> None:
    """Rewrite DB keeping only what its newest commit references (appends leave older index and metadata
    blocks behind); records, labels, metadata and checksums stay the same."""
    from .compact import compact

    with _no_temps_left(output or db):
        report = compact(db, output, overwrite=overwrite, progress=_bar("compact"))
    click.echo(report.summary())



@main.command("split", cls=_Command)
@click.argument("db", type=click.Path(dir_okay=False))
@click.option("--folds", type=click.IntRange(min=2), default=None,
              help="Write each of K folds as PREFIX-foldF (F = 0..K-1): fold F is what the stream's split=K, "
                   "split_fold=F, split_negate=True selects.")
@click.option("--test", default=None, metavar="FRACTION",
              help="Write PREFIX-train and PREFIX-test; FRACTION is 1/K (0.1 or 1/10): test is fold --fold of "
                   "the stream's split=K.")
@click.option("--fold", type=click.IntRange(min=0), default=None, help="With --test: the fold that is the test "
              "part (the stream's split_fold) [default: 0].")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=2016, show_default=True,
              help="The stream's seed: the same seed gives the same folds.")
@click.option("--stratify/--no-stratify", default=True, show_default=True,
              help="Deal each class evenly over the folds (the stream's stratify; labels must be whole numbers).")
@click.option("--shuffle/--no-shuffle", default=True, show_default=True,
              help="Shuffle groups before dealing them (the stream's shuffle).")
@click.option("-o", "--output-dir", type=click.Path(file_okay=False), default=None,
              help="Folder of the parts, made if missing [default: DB's folder].")
@click.option("--prefix", default=None, help="Name of the parts before -foldF/-train/-test [default: DB's name "
              "without its extension; the extension is DB's].")
@click.option("--overwrite", is_flag=True, help="Replace parts that exist [default: refuse, writing nothing].")
def split_command(db: str, **options) -> None:
    """Write the folds of DB (--folds K), or a train and a test part (--test 1/K), as separate databases:
    exactly the records the stream's split keys select with the same seed; records of one group stay
    in one part."""
    from .split import output_paths, split_db

    paths = output_paths(db, folds=options["folds"], test=options["test"], output_dir=options["output_dir"],
                         prefix=options["prefix"])
    with _no_temps_left(*paths):
        report = split_db(db, progress=_bar("split"), **options)
    click.echo(report.summary())


@main.command("relabel", cls=_Command)
@click.argument("db", type=click.Path(dir_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--map", "mapping", multiple=True, required=True, metavar="OLD=NEW",
              help="Map class OLD to NEW, each an id or a class name (a new name joins the class table); repeat.")
@click.option("--annotation-field", default="annotation", show_default=True,
              help="The field holding the JSON annotations whose shape classes are mapped.")
@click.option("--apply-to", type=click.Choice(["labels", "shapes", "both"]), default=None,
              help="What --map changes: the record labels, the annotation shapes' classes, or both [default: what "
                   "the class table names; both without one].")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists [default: refuse, leaving OUT as it is].")
def relabel_command(db: str, out: str, mapping: tuple[str, ...], annotation_field: str, apply_to: str | None,
                    overwrite: bool) -> None:
    """Copy DB into OUT with classes mapped (--map OLD=NEW): the record labels or the annotation shapes' classes,
    whichever the class table names."""
    from .relabel import relabel_db

    with _no_temps_left(out):
        report = relabel_db(db, out, mapping, annotation_field=annotation_field, apply_to=apply_to,
                            overwrite=overwrite, progress=_bar("relabel"))
    click.echo(report.summary())


@main.command("filter", cls=_Command)
@click.argument("db", type=click.Path(dir_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--label", "labels", multiple=True, metavar="L",
              help="Keep label L: a number, a range A..B, or a class name (repeat: any of them).")
@click.option("--group", "groups", multiple=True, metavar="G",
              help="Keep group G, or 'none' for records without a group (repeat: any of them).")
@click.option("--meta", multiple=True, metavar="KEY=VALUE",
              help="Keep records whose meta has KEY equal to VALUE (read as JSON when it parses, else text; "
                   "a.b for nested keys); repeat: all keys must match, values of one key are alternatives.")
@click.option("--class", "classes", multiple=True, metavar="C",
              help="Keep records with an annotation shape of class C: an id or a class name (repeat: any of them).")
@click.option("--drop-other-classes", is_flag=True,
              help="With --class: remove the shapes of other classes from the annotations kept.")
@click.option("--annotation-field", default="annotation", show_default=True,
              help="The field holding the JSON annotations (for --class).")
@click.option("--min-size", default=None, metavar="WxH", help="Keep images at least W wide and H high.")
@click.option("--max-size", default=None, metavar="WxH", help="Keep images at most W wide and H high.")
@click.option("--field", default="image", show_default=True, help="The field holding the image (for the sizes).")
@click.option("--max-pixels", type=click.IntRange(min=0), default=MAX_PIXELS, show_default=True,
              help="Pixel limit for an image whose header cannot be read and must be decoded to size it. 0: none.")
@click.option("--invert", is_flag=True, help="Keep the records that do NOT match.")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists [default: refuse, leaving OUT as it is].")
def filter_command(db: str, out: str, **options) -> None:
    """Copy the records of DB that match every condition given into OUT (fields byte for byte, the
    class table and other metadata kept)."""
    from .filter import filter_db

    with _no_temps_left(out):
        report = filter_db(db, out, progress=_bar("filter"), **options)
    click.echo(report.summary())



def _rewrite_options(f):
    """The options `picpac downsize` and `picpac crop` share."""
    f = click.option("--overwrite", is_flag=True, help="Replace OUT if it exists [default: refuse, leaving OUT as it is].")(f)
    f = click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="Threads decoding and encoding in parallel [default: number of cores].")(f)
    f = click.option("--max-pixels", type=click.IntRange(min=0), default=MAX_PIXELS, show_default=True,
                     help="Refuse images (and masks) whose header declares more than N pixels, before decoding "
                          "them. 0: no limit.")(f)
    f = click.option("--image-field", default="image", show_default=True, help="The field that holds the images.")(f)
    f = click.option("--quality", type=click.IntRange(0, 100), default=95, show_default=True,
                     help="JPEG and WebP quality of re-encoded images (PNG and the others stay lossless).")(f)
    f = click.argument("out", type=click.Path(dir_okay=False))(f)
    return click.argument("db", type=click.Path())(f)


@main.command("downsize", cls=_Command)
@click.option("--max-size", type=click.IntRange(1, 32766), required=True,
              help="The longest side, in pixels, an image of OUT may have.")
@_rewrite_options
def downsize_command(db: str, out: str, max_size: int, **options) -> None:
    """Copy DB to OUT with every image whose longer side exceeds --max-size shrunk to it (INTER_AREA) and
    re-encoded in its own format; smaller images are copied byte for byte.

    Masks (the mask field, or an annotation field holding an image) are shrunk by nearest neighbour to
    the image's new size; JSON annotations are relative to the image and stay as they are. Labels,
    groups, meta (width and height follow the image) and other fields are kept.
    """
    from .downsize import downsize

    with _no_temps_left(out):
        report = downsize(db, out, max_size, progress=_bar("downsize"), **options)
    click.echo(report.summary())


@main.command("crop", cls=_Command)
@click.option("--margin", type=click.FloatRange(0, 100), default=0.0, show_default=True,
              help="Widen each crop by this fraction of the object's width (and height) on every side.")
@click.option("--min-size", type=click.IntRange(min=0), default=1, show_default=True,
              help="Leave out objects whose box inside the image is narrower or shorter than N pixels.")
@click.option("--annotation-field", default="annotation", show_default=True,
              help="The field that holds the PicPac JSON annotations.")
@_rewrite_options
def crop_command(db: str, out: str, **options) -> None:
    """Write one record to OUT per box, polygon or ellipse of DB's annotations: the image cut to the
    object's bounding box, labelled with the object's label, its annotation moved into the crop.

    The meta names the source record and object (source, object, box); the group is the source's group,
    else the source record, so the crops of one image stay in one fold. Points are left out.
    """
    from .crop import crop

    with _no_temps_left(out):
        report = crop(db, out, progress=_bar("crop"), **options)
    click.echo(report.summary())


@main.command("dump", cls=_Command)
@click.argument("db", type=click.Path())
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.argument("config", nargs=-1)
@click.option("--count", type=click.IntRange(min=1), default=16, show_default=True, help="How many samples to write.")
@click.option("--seed", type=int, default=None, help="The stream's seed [default: the config's, else 2016].")
@click.option("--annotations/--no-annotations", default=True, show_default=True,
              help="Read the annotations (annotate=any unless the config sets it) and draw them over the samples; "
                   "without, each PNG holds exactly the stream's pixels.")
@click.option("--overwrite", is_flag=True,
              help="Replace OUT_DIR if it holds an earlier dump [default: refuse, leaving it as it is].")
def dump_command(db: str, out_dir: str, config: tuple[str, ...], count: int, seed: int | None, annotations: bool,
                 overwrite: bool) -> None:
    """Stream DB with the stream keys CONFIG and write the samples to OUT_DIR as PNGs, annotations drawn,
    with an index.html showing them (PicPac's picpac-stream).

    CONFIG: YAML or JSON files of stream keys and key=value pairs, e.g. `batch=8 resize_width=224
    perturb=true pert_angle=20` (`picpac docs stream` lists the keys).
    """
    from .dump import dump, load_config

    with _no_temps_left(out_dir):
        report = dump(db, out_dir, load_config(list(config)), count=count, seed=seed, annotations=annotations,
                      overwrite=overwrite, progress=_bar("dump"))
    click.echo(report.summary())


@main.command("explore", cls=_Command)
@click.argument("db", type=click.Path())
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port to listen on; 0 picks a free one (the URL printed says which).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Another than loopback lets anyone who reaches it see the data (a warning).")
@click.option("--no-browser", is_flag=True, help="Do not open a web browser on the URL.")
@_storage_options
def explore_command(db: str, port: int, host: str, no_browser: bool, remote) -> None:
    """Browse DB in a local web app: overview, filtered thumbnail grid, records, live augmentation. DB may be a
    URL (s3://, gs://, https://) or a .shards index, as a stream takes.

    Read-only; serves nothing but DB. Needs `pip install picpac[explore]` (starlette, uvicorn, jinja2).
    """
    try:
        from .explore.server import serve
        import starlette, uvicorn, jinja2  # noqa: E401,F401
    except ImportError as exc:
        raise click.ClickException(f"picpac explore needs {exc.name}: pip install 'picpac[explore]'") from None
    serve(db, host, port, open_browser=not no_browser, echo=lambda line: click.echo(line),
          warn=lambda line: click.echo(line, err=True), remote=remote)


@main.command("bench", cls=_Command)
@click.argument("db", type=click.Path())
@click.argument("settings", nargs=-1)
@click.option("--seconds", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="How long to stream (per thread count with --threads auto).")
@click.option("--threads", default=None, help="Worker threads, or 'auto' to find the fastest count.")
def bench_command(db: str, settings: tuple[str, ...], seconds: float, threads: str | None) -> None:
    """Stream DB for a while and report img/s, time per stage and what bounds the throughput.

    SETTINGS are stream config keys as key=value, e.g. `batch=64 resize_width=224 resize_height=224`.
    """
    from .bench import auto_threads, measure, parse_settings, report

    config = parse_settings(list(settings))
    if threads == "auto":
        best, result = auto_threads(db, config, seconds / 2, click.echo)
        click.echo(f"fastest: threads={best}")
    else:
        if threads is not None:
            if not threads.isdigit() or int(threads) < 1:
                raise click.BadParameter(f"{threads!r} is not a positive number or 'auto'", param_hint="--threads")
            config["threads"] = int(threads)

        def tick(elapsed: float, samples: int) -> None:
            click.echo(f"\r{elapsed:5.1f} s  {samples:>9,} samples  {samples / elapsed:>9,.0f} img/s", nl=False,
                       err=True)

        result = measure(db, config, seconds, tick)
        click.echo("", err=True)
    click.echo(report(result))


@main.command("demo", cls=_Command)
@click.option("--count", type=click.IntRange(min=1), default=300, show_default=True,
              help="How many images to draw.")
@click.option("--keep", type=click.Path(file_okay=False), default=None,
              help="Keep the drawn images and the database in this directory.")
def demo_command(count: int, keep: str | None) -> None:
    """Draw a labelled shape dataset, import it, show `picpac info` and read it all back."""
    from .demo import run_demo

    run_demo(count=count, workdir=keep and os.path.abspath(keep), echo=click.echo)


@main.command("docs", cls=_Command)
@click.argument("topic", required=False)
def docs_command(topic: str | None) -> None:
    """Print the documentation page TOPIC (markdown), or list the topics."""
    from .docs import overview, page

    click.echo(overview() if topic is None else page(topic), nl=topic is None)
