"""`picpac split`: write the folds of a database, or its train and test parts, as separate files.

The records of each part are exactly those the stream's split keys select with the same seed: the
assignment is :func:`picpac.sampling.folds.assign_folds` and :func:`~picpac.sampling.folds.select`,
the functions ``ImageStream`` calls. So fold ``f`` of ``--folds K`` holds what
``ImageStream(db, split=K, split_fold=f, split_negate=True, ...)`` streams, and ``--test 1/K`` is
fold ``--fold`` of K (test) and the other folds (train). Groups never straddle parts.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import CorruptRecordError, PathExistsError, PicPacError, PicPacValueError
from ..file import durable
from ..file.layout import NO_GROUP
from ..file.reader import Reader, Record, RecordReader
from ..file.shards import open_database
from ..file.writer import Writer, lock_replaced
from ..sampling.folds import assign_folds, select
from ..stores.base import output_errors

DEFAULT_SEED = 2016
"""The stream's default ``seed``: the same split as a stream that does not set one."""

Progress = Callable[[int], Any]


@dataclass
class SplitReport:
    """What :func:`split_db` wrote: each part's path and record count, and the stream keys that select it."""

    source: str
    records: int
    parts: list[tuple[str, int]]
    keys: dict[str, Any]
    test_fold: int | None = None
    seconds: float = 0.0
    removed: list[str] = field(default_factory=list)
    """Parts of the set replaced (``overwrite``) that the new set has not: removed."""
    finished: list[str] = field(default_factory=list)
    """Parts an earlier split, killed while it replaced its parts, had written: moved into place first."""

    def summary(self) -> str:
        keys = ", ".join(f"{k}={v}" for k, v in self.keys.items())
        parts = ", ".join(f"{os.path.basename(p)} {n}" for p, n in self.parts)
        if self.test_fold is None:
            how = f"fold f is ImageStream(split_fold=f, split_negate=True, {keys})"
        else:
            how = (f"test is ImageStream(split_fold={self.test_fold}, split_negate=True, {keys}), "
                   "train the same with split_negate=False")
        removed = ", ".join(os.path.basename(p) for p in self.removed)
        if removed:
            removed = f"; removed {removed} ({'a part' if len(self.removed) == 1 else 'parts'} of the set replaced)"
        if self.finished:
            removed += (f"; first finished what a split killed while replacing its parts had left: "
                        f"{', '.join(os.path.basename(p) for p in self.finished)}")
        return (f"split {self.source} ({self.records} records) into {len(self.parts)} parts in "
                f"{os.path.dirname(self.parts[0][0]) or '.'} (records: {parts}); {how}{removed}; "
                f"in {self.seconds:.1f} s")


# -- what the parts are -------------------------------------------------------------------------------

def folds_of_test(test: float | str, source: str = "") -> int:
    """K for a test fraction of 1/K: ``0.1`` or ``"1/10"`` -> 10. Other fractions are refused, since the
    stream's split keys cut a database into K equal folds."""
    text, where = str(test).strip(), f"{source}: " if source else ""
    try:
        value = Fraction(text.replace(" ", "")) if "/" in text else Fraction(float(text))
    except (ValueError, ZeroDivisionError, OverflowError):
        raise PicPacValueError(f"{where}--test {text!r} is not a fraction; give 1/K as 0.1 or 1/10") from None
    if not 0 < value <= Fraction(1, 2):
        raise PicPacValueError(f"{where}--test {text} must be in (0, 0.5]: the test part is one of K >= 2 folds")
    k = round(1 / value)
    if abs(float(value) * k - 1) > 1e-6:
        near = sorted({max(2, int(1 / value)), max(2, int(1 / value) + 1)})
        raise PicPacValueError(
            f"{where}--test {text} is not 1/K for a whole K: the stream's split keys cut the database into K equal "
            f"folds; use {' or '.join(f'--test 1/{n}' for n in near)}, or --folds K")
    return k


def _naming(db: str, output_dir: str | os.PathLike | None, prefix: str | None) -> tuple[str, str, str]:
    """(folder, PREFIX, extension) of the parts' names."""
    stem, suffix = os.path.splitext(os.path.basename(db))
    suffix = ".picpac" if suffix in ("", ".shards") else suffix  # an index's parts are single files
    folder = os.fspath(output_dir) if output_dir is not None else os.path.dirname(db)
    return folder, prefix if prefix is not None else stem, suffix


def output_paths(db: str | os.PathLike, *, folds: int | None = None, test: float | str | None = None,
                 output_dir: str | os.PathLike | None = None, prefix: str | None = None) -> list[str]:
    """The files the split writes: PREFIX-fold0.picpac ... for ``folds``, PREFIX-train / PREFIX-test for
    ``test``; PREFIX defaults to DB's name without its extension, the folder to DB's."""
    folder, stem, suffix = _naming(os.fspath(db), output_dir, prefix)
    names = ["train", "test"] if test is not None else [f"fold{f}" for f in range(folds or 0)]
    return [os.path.join(folder, f"{stem}-{name}{suffix}") for name in names]


def _split_of(path: str, db: str) -> dict[str, Any] | None:
    """The ``split`` metadata of the file at ``path`` when it is a picpac database split from ``db``; None
    when it is none (missing, not a regular file, not a picpac database, a split of another database)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # (opening a FIFO would wait for a writer)
        with Reader(path) as reader:
            split = reader.metadata.get("split")
    except (PicPacError, OSError):
        return None
    source = split.get("from") if isinstance(split, dict) else None
    return split if isinstance(source, str) and durable.target(source) == durable.target(db) else None


def replaced_parts(db: str, paths: Sequence[str], *, folds: bool, output_dir: str | os.PathLike | None = None,
                   prefix: str | None = None) -> list[str]:
    """The parts of an earlier split of ``db`` that a split writing ``paths`` with ``overwrite`` removes since it
    does not replace them: those the ``parts`` of a split of ``db`` at one of ``paths`` name, and with
    ``folds`` every other PREFIX-foldN file beside them (a set written before ``parts`` was recorded). Only
    files that are picpac databases split from ``db``."""
    folder, stem, suffix = _naming(db, output_dir, prefix)
    names: set[str] = set()
    for path in paths:
        split = _split_of(path, db)
        listed = split.get("parts") if split is not None else None
        if isinstance(listed, list):
            names.update(n for n in listed if isinstance(n, str) and os.path.basename(n) == n not in ("", ".", ".."))
    if folds:
        fold = re.compile(re.escape(stem) + r"-fold[0-9]+" + re.escape(suffix))
        try:
            names.update(n for n in os.listdir(folder or ".") if fold.fullmatch(n))
        except OSError:
            pass  # (no folder: no parts)
    keep = {durable.target(p) for p in [*paths, db]}
    return [path for path in (os.path.join(folder, n) for n in sorted(names))
            if durable.target(path) not in keep and _split_of(path, db) is not None]


def _units(groups: np.ndarray) -> int:
    """Groups plus ungrouped records: what folds are dealt."""
    grouped = groups != NO_GROUP
    return int((~grouped).sum()) + len(np.unique(groups[grouped]))


# -- copying ----------------------------------------------------------------------------------------

def copied_metadata(reader: RecordReader, provenance_key: str, provenance: dict[str, Any]) -> dict[str, Any]:
    """The database's metadata for a copy of some of its records: class table, source, arrays ... kept;
    ``fields`` and ``created`` are the new Writer's; ``provenance_key`` says where the records came from."""
    metadata = {k: v for k, v in reader.metadata.items() if k not in ("fields", "created")}
    metadata[provenance_key] = provenance
    return metadata


def append_copy(writer: Writer, record: Record, source: str, *, fields: Mapping[str, Any] | None = None,
                label: float | None = None) -> None:
    """Append ``record`` to ``writer``: every field byte for byte (or ``fields``), its label (or ``label``), group
    and meta."""
    meta = record.meta
    if not isinstance(meta, dict):
        raise CorruptRecordError(source, record.index, f"has meta that is a JSON {type(meta).__name__}, "
                                 "not an object; run `picpac verify`")
    writer.append(record.fields if fields is None else fields, label=record.label if label is None else label,
                  group=record.group, meta=meta or None)


def check_outputs(paths: Sequence[str], source: str, overwrite: bool) -> None:
    """Refuse outputs that exist (without ``overwrite``) or that are the source itself, before writing any."""
    for path in paths:
        if durable.target(path) == durable.target(source):
            raise PicPacValueError(f"{path}: is the database being read; choose another output name")
        if not overwrite and os.path.lexists(path):
            raise PathExistsError(f"{path}: already exists; pass --overwrite (overwrite=True) to replace it "
                                  "(nothing was written)")


@contextmanager
def writers(paths: Sequence[str], metadata: Sequence[dict[str, Any]], overwrite: bool,
            remove: Sequence[str] = ()) -> Iterator[list[Writer]]:
    """Writers of new databases for ``paths``, built in a temporary folder beside the first until the block ends
    well: then all are committed and replace ``paths`` (and ``remove``) as one set (:func:`replace_set`). An
    error (or a stop) in the block discards them all and leaves ``paths`` as they were; a commit that fails
    names its path."""
    targets = [durable.target(p) for p in paths]
    durable.remove_stale_temps(targets[0])
    folder = durable.temp_path(targets[0])
    os.mkdir(folder)
    lock = durable.lock(folder)  # a live temporary: never removed as a dead process's
    try:
        with ExitStack() as stack:
            outs = [stack.enter_context(Writer(os.path.join(folder, f"{i}.{os.path.basename(t)}"), metadata=m))
                    for i, (t, m) in enumerate(zip(targets, metadata))]
            yield outs
            for path, out in zip(paths, outs):
                with output_errors(path):
                    out.close()
        # what the replacement is, beside the new parts: a split killed in it is finished by the next one
        durable.write_json(os.path.join(folder, REPLACING), {"targets": targets, "remove": list(remove)})
        replace_set([out.path for out in outs], paths, overwrite, remove)
    finally:
        if lock is not None:
            os.close(lock)
        shutil.rmtree(folder, ignore_errors=True)


REPLACING = "replacing.json"
"""The file in a split's temporary folder that says its new parts are complete and replacing the old has begun."""


def finish_interrupted(first: str) -> list[str]:
    """Finish the replacement a split killed midway left beside ``first`` (its first part): the new parts it had
    written, all committed, move into place (the old parts it was removing go); a split killed before it began to
    replace left nothing replaced, and its folder is removed. The parts finished, which the split's caller reports."""
    finished = []
    for folder in durable.dead_temp_folders(first):
        plan = os.path.join(folder, REPLACING)
        if os.path.exists(plan):
            with open(plan) as f:
                replacing = json.load(f)
            staged = [os.path.join(folder, f"{i}.{os.path.basename(t)}") for i, t in enumerate(replacing["targets"])]
            pending = [(s, t) for s, t in zip(staged, replacing["targets"]) if os.path.exists(s)]
            for target in replacing["remove"]:
                if os.path.lexists(target) and target not in replacing["targets"]:
                    os.unlink(target)
            for temp, target in pending:
                durable.publish(temp, target, overwrite=True)
                finished.append(target)
        shutil.rmtree(folder, ignore_errors=True)
    return finished


def replace_set(staged: Sequence[str], paths: Sequence[str], overwrite: bool, remove: Sequence[str] = ()) -> None:
    """Move the finished databases ``staged`` to ``paths`` so that no moment shows parts of two sets: the old
    files but the first (and, with ``overwrite``, the old parts ``remove`` that the new set has not) are
    removed, the first is replaced by one rename, then the others move in. A stop midway leaves parts of one
    set missing (an error to open), never a mix of old and new parts. Each old file is locked first, as
    ``Writer(path, overwrite=True)`` locks the file it replaces (WriterBusyError while a Writer appends to
    one, every file left as it was). Without ``overwrite`` none is replaced: a file that appeared at one of
    ``paths`` meanwhile is a PathExistsError, and the parts moved are removed."""
    targets = [durable.target(p) for p in paths]
    gone = [durable.target(p) for p in remove] if overwrite else []
    held: list[int] = []
    placed: list[str] = []
    try:
        for target, path in zip(targets + gone, [*paths, *remove]):
            if overwrite and (fd := lock_replaced(target, path)) is not None:
                held.append(fd)
        if overwrite:
            removed = [t for t in targets[1:] + gone if os.path.lexists(t)]
            for target in removed:
                os.unlink(target)
            for folder in {os.path.dirname(t) for t in removed}:
                durable.fsync_directory(folder)  # gone before a new part appears, after a power loss too
        for temp, target, path in zip(staged, targets, paths):
            with output_errors(path):
                if not durable.publish(temp, target, overwrite=overwrite):
                    raise PathExistsError(f"{path}: already exists; pass --overwrite (overwrite=True) to replace it")
            placed.append(target)
    except BaseException:
        if not overwrite:
            for target in placed:
                os.unlink(target)
        raise
    finally:
        for fd in held:
            os.close(fd)


def bar_of(progress: Progress | None, total: int) -> Any:
    return progress(total) if progress is not None else None


# -- the split --------------------------------------------------------------------------------------

def _make_folder(folder: str) -> str | None:
    """Make the output folder ``folder`` (``-o DIR``) where it is missing, its parents too; the folder made, or
    None when it was there. A path that is not a folder is a PicPacValueError naming it."""
    if not folder or os.path.isdir(folder):
        return None
    try:
        os.makedirs(folder)
    except OSError as exc:
        raise PicPacValueError(f"{folder}: cannot make the output folder ({exc.strerror})") from None
    return folder


def split_db(db: str | os.PathLike, *, folds: int | None = None, test: float | str | None = None,
             fold: int | None = None, seed: int = DEFAULT_SEED, stratify: bool = True, shuffle: bool = True,
             output_dir: str | os.PathLike | None = None, prefix: str | None = None, overwrite: bool = False,
             progress: Progress | None = None) -> SplitReport:
    """Write DB's K folds (``folds=K``) or its train and test parts (``test=1/K``, the test part being fold
    ``fold``, default 0) as new databases; see :func:`output_paths` for their names."""
    start = time.perf_counter()
    db = os.fspath(db)
    if (folds is None) == (test is None):
        raise PicPacValueError(f"{db}: give either --folds K (write every fold) or --test FRACTION (write a "
                               "train and a test part), not " + ("both" if folds is not None else "neither"))
    if folds is not None:
        if fold is not None:
            raise PicPacValueError(f"{db}: --fold picks the test fold of --test; --folds writes every fold")
        if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
            raise PicPacValueError(f"{db}: --folds must be a whole number >= 2, got {folds!r}")
        k = int(folds)
    else:
        k = folds_of_test(test, db)
        fold = 0 if fold is None else fold
        if not 0 <= fold < k:
            raise PicPacValueError(f"{db}: --fold must be in 0..{k - 1} for --test {test} ({k} folds), got {fold}")
    paths = output_paths(db, folds=folds, test=test, output_dir=output_dir, prefix=prefix)
    with open_database(db) as reader:  # a .shards index: its shards as one database
        try:
            assigned = assign_folds(reader.labels, reader.groups, k, seed, shuffle=shuffle, stratify=stratify)
        except PicPacValueError as exc:
            fix = "; pass --no-stratify to split without classes" if stratify and "stratify" in str(exc) else ""
            raise PicPacValueError(f"{db}: {exc}{fix}") from None
        if folds is not None:
            parts = [select(assigned, k, f, True) for f in range(k)]
        else:
            parts = [select(assigned, k, fold, False), select(assigned, k, fold, True)]
        for path, records in zip(paths, parts):
            if not len(records):
                raise PicPacValueError(
                    f"{db}: {path} would be empty: {len(reader)} records in {_units(reader.groups)} units "
                    f"(groups and ungrouped records) cannot fill {k} folds; use fewer folds (nothing was written)")
        finished = finish_interrupted(durable.target(paths[0]))
        check_outputs(paths, db, overwrite)
        remove = replaced_parts(db, paths, folds=folds is not None, output_dir=output_dir, prefix=prefix) \
            if overwrite else []
        keys = {"split": k, "seed": seed, "stratify": stratify, **({} if shuffle else {"shuffle": False})}
        run = secrets.token_hex(8)  # the parts of one run share it: parts of two runs are told apart
        part_of = np.empty(len(reader), np.int64)
        for p, records in enumerate(parts):
            part_of[records] = p
        metadata = []
        for p in range(len(paths)):
            fold_p, negate = (p, True) if folds is not None else (fold, p == 1)
            metadata.append(copied_metadata(reader, "split", {
                "from": db, **keys, "split_fold": fold_p, "split_negate": negate, "id": run,
                "parts": [os.path.basename(p) for p in paths]}))
        made = _make_folder(os.path.dirname(paths[0]))
        bar = bar_of(progress, len(reader))
        try:
            with writers(paths, metadata, overwrite, remove) as outs:
                part = 0
                with output_errors(lambda: paths[part]):  # a full disk: named by the part being written
                    for i in range(len(reader)):
                        part = part_of[i]
                        append_copy(outs[part], reader[i], db)
                        if bar is not None:
                            bar.update(1)
        except BaseException:
            if made and not os.listdir(made):  # the folder made for this split, left empty: gone with it
                os.rmdir(made)
            raise
        finally:
            if bar is not None:
                bar.close()
    return SplitReport(db, len(part_of), [(p, len(r)) for p, r in zip(paths, parts)], keys,
                       None if folds is not None else fold, time.perf_counter() - start, remove, finished)
