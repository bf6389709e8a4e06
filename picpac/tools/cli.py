"""The `picpac` command line (click) and PicPac's `picpac-import`."""
from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import click

from .. import __version__
from ..errors import PicPacError, SourceError
from ..file import durable
from ..image.decoding import MAX_PIXELS
from ..sources.base import FORMATS, PICPAC_NUMBERS, format_name
from ..stores import KINDS as STORE_KINDS
from .docs import docs_hint

IMPORT_FORMATS = list(FORMATS)
"""The import formats' names; ``-f`` also takes PicPac's numbers (``picpac.sources.base.PICPAC_NUMBERS``)."""


class _ReportErrors:
    """Print a PicPacError as one line on stderr and exit 2, without a traceback. SIGTERM and SIGHUP unwind
    like Ctrl-C (:func:`picpac.file.durable.exit_on_signals`), so every temporary file is removed; then
    one line on stderr and exit status 128 + the signal's number (143 for SIGTERM)."""

    def invoke(self, ctx: click.Context):
        try:
            # (a command invoked by a group is already inside the group's block: the inner one changes nothing)
            main_thread = threading.current_thread() is threading.main_thread()
            with durable.exit_on_signals() if main_thread else nullcontext():
                return super().invoke(ctx)
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
    """``--version``: the version, and whether the C extension for region decoding is built."""
    from ..image import REGION_DECODE

    built = ("built (picpac.image._jpeg, libjpeg-turbo): JPEGs are decoded in part when a crop needs a part"
             if REGION_DECODE else
             "not built: JPEGs are decoded whole; install libjpeg-turbo's headers (Debian: libjpeg62-turbo-dev) "
             "and reinstall picpac to build it")
    return f"%(prog)s, version %(version)s\nregion decoding: {built}"


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Documentation: `picpac docs` lists the pages, `picpac docs TOPIC` prints one.")
@click.version_option(__version__, prog_name="picpac", message=_version_message())
def main() -> None:
    """picpac: a training dataset in one file, streamed with on-the-fly decoding and augmentation."""


def _import_options(f):
    f = click.option("--strict", is_flag=True,
                     help="Fail on the first missing, undecodable or too large file, writing nothing.")(f)
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
    f = click.option("--classes", type=click.Path(dir_okay=False), default=None,
                     help="Class names for -f yolo, yolo-seg, maskdir: a YOLO dataset YAML (`names:`) or a text "
                          "file with one name per line.")(f)
    f = click.option("--labels", type=click.Path(file_okay=False), default=None,
                     help="Folder of the YOLO label files (-f yolo, yolo-seg) [default: `labels` beside SRC] "
                          "or of the masks (-f maskdir).")(f)
    f = click.option("--from", "store", type=click.Choice(STORE_KINDS), default=None,
                     help=f"SRC is a whole dataset in this storage format ({docs_hint('stores')}), not images; "
                          "excludes -f and the image options.")(f)
    f = click.option("-f", "--format", "fmt", type=ImportFormat(), default=default_format, show_default=True,
                     help=_FORMAT_HELP)(f)
    f = click.argument("db", type=click.Path(dir_okay=False))(f)
    return click.argument("src", type=click.Path())(f)


def _import(src: str, db: str, fmt: str, store: str | None, **options) -> None:
    """What `picpac import` and `picpac-import` run."""
    if store is None:
        from .ingest import import_dataset

        with _no_temps_left(db):
            report = import_dataset(src, db, format=fmt, **options)
        click.echo(report.summary())
        return
    ctx = click.get_current_context()
    given = [name for name in ("fmt", "labels", "classes", "strict", "max_size", "max_pixels", "threads", "root")
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
    if given:
        names = {"fmt": "-f/--format", "max_size": "--max-size", "max_pixels": "--max-pixels"}
        raise click.UsageError(f"--from cannot be combined with {', '.join(names.get(n, '--' + n) for n in given)} "
                               "(they apply to image layouts)")
    from ..stores import import_store

    with _no_temps_left(db):
        report = import_store(src, db, store, overwrite=options["overwrite"], progress=_bar(f"import {store}"))
    click.echo(report.summary())


@main.command("import", cls=_Command)
@_import_command("auto")
def import_command(**options) -> None:
    """Import images (and labels, annotations, masks) from SRC into the picpac database DB.

    With --from FORMAT, SRC is a dataset in another storage format (lmdb, tfrecord, hdf5, npz, sqlite,
    tar, binary), copied record by record.
    """
    _import(**options)


def _bar(desc: str):
    from tqdm import tqdm

    return lambda total: tqdm(total=total, desc=desc, unit="rec", disable=None)


@main.command("export", cls=_Command)
@click.option("--to", "store", type=click.Choice(STORE_KINDS), required=True,
              help=f"Storage format of DST ({docs_hint('stores')}).")
@click.argument("db", type=click.Path())
@click.argument("dst", type=click.Path())
@click.option("--overwrite", is_flag=True, help="Replace DST if it exists [default: refuse, leaving DST as it is].")
def export_command(store: str, db: str, dst: str, overwrite: bool) -> None:
    """Copy every record of the picpac database DB into DST in another storage format.

    A tar is WebDataset's layout: the image as KEY.jpg, KEY.png, ... by its type, the label as KEY.cls.
    """
    from ..stores import export_store, index_path

    with _no_temps_left(dst, *([index_path(dst)] if store == "binary" else [])):
        report = export_store(db, dst, store, overwrite=overwrite, progress=_bar(f"export {store}"))
    click.echo(report.summary())


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="picpac-import", message=_version_message())
@_import_command("list")
def picpac_import(**options) -> None:
    """Import SRC into the picpac database DB: PicPac's `picpac-import -f N SRC DB`, with the options and
    formats of `picpac import` (-f takes PicPac's numbers or the names; the default is 1, list)."""
    _import(**options)


@main.command("info", cls=_Command)
@click.argument("db", type=click.Path())  # the Reader's error for a directory is one "error:" line
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def info_command(db: str, as_json: bool) -> None:
    """Show what DB holds: records, bytes, fields, classes, label histogram, image sizes."""
    from .info import describe, format_description

    description = describe(db)
    click.echo(json.dumps(description, indent=2) if as_json else format_description(description))


@main.command("verify", cls=_Command)
@click.argument("db", type=click.Path())  # the Reader's error for a directory is one "error:" line
@click.option("--decode", is_flag=True, help="Also decode every image (and mask) field.")
def verify_command(db: str, decode: bool) -> None:
    """Check every checksum of DB; exit 1 naming each damaged record."""
    from .verify import verify

    report = verify(db, decode=decode)
    for problem in report.problems:
        click.echo(problem, err=True)
    click.echo(report.summary())
    sys.exit(0 if report.ok else 1)


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
