"""Where a stream is: each rank's share of every epoch's order, the samples consumed, and the state that
``ImageStream.state_dict`` saves and ``load_state_dict`` restores (docs/stream.md, "Ranks and resume").

Everything is kept in terms of the global order of an epoch (the same on every rank): ``epoch``, the
``start`` of the current split of that epoch's order among the ranks (0, or where an elastic resume
re-split it), and ``offset``, the keys this rank took of its share since. Any position maps to its keys
directly (``Sampler.take``/``pass_order`` and ``share``): nothing is replayed.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import PicPacTypeError, PicPacValueError
from ..file.reader import BaseReader, IndexedReader
from ..file.shards import ShardedReader
from ..sampling import Sampler
from ..sampling.sampler import share
from .config import KEYS, Order, StreamConfig

STATE_FORMAT = "picpac.ImageStream.state/1"
POSITIONS = 2**63
"""Stream positions and epochs are int64 (the key arrays, the augmentation keys): epoch ``e`` of ``n`` samples
is reachable while its stream positions ``e*n .. (e+1)*n - 1`` stay below this."""
MATCH = ("loop", "seed", "shuffle", "reshuffle", "shuffle_chunk", "shuffle_window", "oversample", "split",
         "split_fold", "split_negate", "stratify", "mixin_max", "mixin_randomize", "mixin_group_reset",
         "mixin_group_delta", "share_pad")
"""The config keys that fix the global order of every epoch: a state resumes only where they are equal."""
LATER = ("shuffle_chunk", "shuffle_window")
"""Keys of MATCH that states saved before them lack: such a state holds their defaults (its order's)."""
RENAMED = {"share_pad": "shard_pad"}
"""Keys of MATCH that states saved before their rename hold under their old name."""


class Keys:
    """The keys ``(position, epoch)`` of one iteration, from ``parts()``: arrays of consecutive keys
    (one pass's, or each epoch's of the endless stream); one at a time (per-sample path) or in chunks
    (batch path). ``cover``: any this many consecutive keys read every sample the stream reads."""

    def __init__(self, parts: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]], cover: int):
        self.parts, self.cover = parts, cover

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for positions, epochs in self.parts():
            yield from zip(positions.tolist(), epochs.tolist())

    def chunks(self, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions, epochs) arrays of ``size`` keys at a time, across epochs (a finite stream's last chunk
        may be shorter)."""
        held: list[tuple[np.ndarray, np.ndarray]] = []
        have = 0
        for positions, epochs in self.parts():
            while len(positions):
                part = size - have
                held.append((positions[:part], epochs[:part]))
                have += len(held[-1][0])
                positions, epochs = positions[part:], epochs[part:]
                if have == size:
                    yield _joined(held)
                    held, have = [], 0
        if have:
            yield _joined(held)


def _joined(held: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if len(held) == 1:
        return held[0]
    return np.concatenate([h[0] for h in held]), np.concatenate([h[1] for h in held])


class Position:
    """A stream's place: rank ``rank`` of ``world_size`` reads its share of each epoch's order.

    ``loop=True``: epoch ``e``'s order is the endless stream's positions ``e*n .. (e+1)*n - 1`` (``n``: the
    pool); the rank's keys are its shares of epochs ``e, e+1, ...`` back to back. ``loop=False``: pass
    ``e`` is ``Sampler.pass_order`` of ``e`` (0 with reshuffle=False), the rank's share of it filled up to
    whole batches with ``pad``; each iteration is one pass.
    """

    def __init__(self, sampler: Sampler, order: Order, path: str):
        self.sampler, self.n, self.path = sampler, len(sampler), path
        self.last_epoch = POSITIONS // self.n - 1
        """The last epoch this stream can reach (``POSITIONS``)."""
        self.loop, self.reshuffle, self.batch, self.pad = order.loop, order.reshuffle, order.batch, order.pad
        self.rank, self.world, self.share_pad = order.rank, order.world_size, order.share_pad
        if self.n < self.world and not self.share_pad:
            raise PicPacValueError(f"{path}: world_size={self.world} with share_pad=False, but the stream has only "
                                   f"{self.n} samples: every rank would get none; set share_pad=True (ranks "
                                   "repeat samples) or use fewer ranks")
        self.epoch = self.start = self.offset = 0
        self.started = False  # loop=False: the pass of (epoch, start, offset) is under way

    # -- the rank's keys -------------------------------------------------------------------------
    def share(self, start: int = 0, world: int | None = None) -> int:
        """Keys of the rank's share of an epoch split at ``start`` among ``world`` ranks (default: this stream's;
        every rank has as many)."""
        left, world = self.n - start, world or self.world
        return -(-left // world) if self.share_pad else left // world

    def epoch_keys(self, epoch: int, start: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
        """The rank's (positions, epochs) of ``epoch`` split at ``start``, and how many are real."""
        if epoch > self.last_epoch:
            raise self.past_the_end(f"epoch {epoch}")
        if self.loop:
            positions, epochs = self.sampler.take(epoch * self.n, self.n)
        else:
            key = epoch if self.reshuffle else 0
            positions, epochs = self.sampler.pass_order(key), np.full(self.n, key, np.int64)
        if self.world == 1 and start == 0:
            return positions, epochs, self.n
        index, real = share(self.n, self.rank, self.world, pad=self.share_pad, start=start)
        return positions[index], epochs[index], real

    def order(self) -> tuple[Keys, int | None]:
        """The keys of the next iteration (and, for a pass, how many are real): the endless stream from here,
        or the rest of the pass under way after a load, else the next pass."""
        if self.loop:
            epoch, start, offset = self.epoch, self.start, self.offset
            cover = self.sampler.cover if self.world == 1 else max(1, 2 * self.share() - 1)
            return Keys(lambda: self._endless(epoch, start, offset), cover), None
        if self.started:  # the last pass ended (or was left): the next one
            self._next_pass()
        self.started = True
        positions, epochs, real = self.epoch_keys(self.epoch, self.start)
        if self.pad and len(positions) % self.batch:
            size = len(positions) + self.batch - len(positions) % self.batch
            positions, epochs = np.resize(positions, size), np.resize(epochs, size)
        skip = self.offset
        positions, epochs = positions[skip:], epochs[skip:]
        return Keys(lambda: iter([(positions, epochs)]), len(positions)), max(real - skip, 0)

    def _endless(self, epoch: int, start: int, offset: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        while epoch <= self.last_epoch:  # then it ends: read ahead, the epoch after would fail before its turn
            positions, epochs, _ = self.epoch_keys(epoch, start)
            if offset < len(positions):
                yield positions[offset:], epochs[offset:]
            epoch, start, offset = epoch + 1, 0, 0

    # -- moving ----------------------------------------------------------------------------------
    def advance(self, taken: int) -> None:
        """``taken`` more keys were delivered (loop=True: on to the next epochs when a share is done)."""
        self.offset += taken
        if self.loop:
            self.epoch, self.start, self.offset = self.roll(self.epoch, self.start, self.offset, self.world)

    def roll(self, epoch: int, start: int, offset: int, world: int) -> tuple[int, int, int]:
        """loop=True: the same place with ``offset`` inside its epoch's share (of ``world`` ranks), the whole
        epochs it spans skipped at once (O(1) for any offset)."""
        first = self.share(start, world)
        if offset < first:
            return epoch, start, offset
        epochs, offset = divmod(offset - first, self.share(0, world))
        return epoch + 1 + epochs, 0, offset

    def finish(self) -> None:
        """loop=False: the pass under way ended."""
        if not self.loop and self.started:
            self._next_pass()

    def _next_pass(self) -> None:
        self.epoch, self.start, self.offset, self.started = self.epoch + 1, 0, 0, False

    def set_epoch(self, epoch: int) -> None:
        """The next key is the first of epoch (pass) ``epoch``."""
        if epoch > self.last_epoch:
            raise self.past_the_end(f"set_epoch({epoch})")
        self.epoch, self.start, self.offset, self.started = epoch, 0, 0, False

    # -- the state -------------------------------------------------------------------------------
    def where(self) -> tuple[int, int, int]:
        """(epoch, start, offset) of the next key."""
        return self.settle(self.epoch, self.start, self.offset)

    def settle(self, epoch: int, start: int, offset: int) -> tuple[int, int, int]:
        """(epoch, start, offset) of this stream's ranks with a fully delivered share moved on: loop=True to the
        next epochs (as many as it spans), loop=False to the next pass (the pass under way is over)."""
        if self.loop:
            return self.roll(epoch, start, offset, self.world)
        return (epoch + 1, 0, 0) if offset >= self.share(start) else (epoch, start, offset)

    def consumed(self, start: int, offset: int, world: int) -> int:
        """Samples of the epoch's order consumed by all ranks together, each at ``offset`` of its share of
        the split at ``start`` among ``world`` ranks: the first ``offset * world`` items of that split."""
        return start + min(min(offset, self.share(start, world)) * world, self.n - start)

    def state(self) -> dict[str, Any]:
        epoch, start, offset = self.where()
        return {"epoch": epoch, "start": start, "offset": offset,
                "consumed": self.consumed(start, offset, self.world), "samples": self.n,
                "rank": self.rank, "world_size": self.world}

    def past_the_end(self, what: str) -> PicPacValueError:
        return PicPacValueError(f"{self.path}: {what} is past the last epoch this stream can reach, "
                                f"{self.last_epoch} (its {self.n} samples per epoch x the epoch must stay below "
                                "2**63: stream positions and augmentation keys are int64); use a smaller epoch")

    def resolve(self, epoch: int, start: int, offset: int, world: int) -> tuple[int, int, int]:
        """Where a saved place of ``world`` ranks is for this stream (O(1)): with another world size, the rest
        of its epoch split among these ranks; a finished share: the next epoch (loop=True: as many as it spans)."""
        if self.loop:
            epoch, start, offset = self.roll(epoch, start, offset, world)
        if world != self.world:
            start, offset = self.consumed(start, offset, world), 0
            if start >= self.n:
                epoch, start = epoch + 1, 0
        return self.settle(epoch, start, offset)

    def load(self, epoch: int, start: int, offset: int) -> None:
        """Go to a place ``resolve`` gave."""
        self.epoch, self.start, self.offset, self.started = epoch, start, offset, False


def fingerprint(reader: IndexedReader) -> dict[str, Any]:
    """What identifies a database's committed contents: its records and its commit (number, CRC, end); for a
    sharded dataset its records and every shard's (name, records, commit), in order."""
    if isinstance(reader, ShardedReader):
        return {"records": len(reader),
                "shards": [{"name": os.path.basename(shard.path), **fingerprint(shard)} for shard in reader.shards]}
    if not isinstance(reader, BaseReader):  # a Reader or a RemoteReader: one file's, which has a commit
        raise PicPacTypeError(f"{reader.path}: a {type(reader).__name__} has no commit to resume from")
    commit = reader.header.current
    return {"records": len(reader), "commit": int(commit.seq), "crc": int(commit.crc), "bytes": int(commit.end)}


def state_dict(position: Position, config: StreamConfig, readers: Sequence[IndexedReader]) -> dict[str, Any]:
    """The JSON-serialisable state of a stream (docs/stream.md, "Ranks and resume")."""
    return {"format": STATE_FORMAT, **position.state(),
            "config": {key: config[key] for key in MATCH},
            "databases": [fingerprint(reader) for reader in readers]}


def _equal(theirs: Any, ours: Any) -> bool:
    """Equal, and a bool only where the stream has one (``True == 1`` in Python, not in a state)."""
    return isinstance(theirs, bool) == isinstance(ours, bool) and theirs == ours


def load_state_dict(position: Position, config: StreamConfig, readers: Sequence[IndexedReader], state: Any) -> None:
    """Restore ``state`` into ``position``, or PicPacValueError naming what differs from this stream, or the
    key that no state of it can hold."""
    path = readers[0].path
    if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
        got = state.get("format") if isinstance(state, Mapping) else type(state).__name__
        raise PicPacValueError(f"{path}: load_state_dict takes what ImageStream.state_dict() returned "
                               f"(format {STATE_FORMAT!r}), got {got!r}")
    differ = []
    saved = state.get("config")
    if not isinstance(saved, Mapping):
        raise PicPacValueError(f"{path}: the state has no 'config' (was it written by ImageStream.state_dict()?)")
    for key in MATCH:
        theirs = saved.get(key, saved.get(RENAMED.get(key), KEYS[key].default if key in LATER else "(missing)"))
        if not _equal(theirs, config[key]):
            differ.append(f"config key {key!r} is {theirs!r} in the state, {config[key]!r} here")
    names = ["the database", "the mixin"]
    databases = state.get("databases")
    mine = [fingerprint(reader) for reader in readers]
    if not isinstance(databases, list) or len(databases) != len(mine):
        differ.append(f"the state has {len(databases) if isinstance(databases, list) else 'no'} database(s), "
                      f"this stream {len(mine)}")
    else:
        for name, reader, theirs, ours in zip(names, readers, databases, mine):
            changed = [f"{k} {theirs.get(k) if isinstance(theirs, Mapping) else None!r} in the state, {v!r} here"
                       for k, v in ours.items() if not isinstance(theirs, Mapping) or not _equal(theirs.get(k), v)]
            if changed:
                differ.append(f"{name} {reader.path} is not the one the state was saved from ({'; '.join(changed)})")
    if not differ and not _equal(state.get("samples"), position.n):
        differ.append(f"the state's stream has {state.get('samples')!r} samples per epoch, this one {position.n}")
    if differ:
        raise PicPacValueError(f"{path}: the state is from another stream: " + "; ".join(differ))
    values = {}
    for key, low, high in (("epoch", 0, None), ("start", 0, position.n), ("offset", 0, None),
                           ("world_size", 1, None), ("consumed", 0, position.n)):
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            within = f"an int >= {low}" + ("" if high is None else f" and <= {high}")
            raise PicPacValueError(f"{path}: the state's {key!r} must be {within}, got {value!r} (pass what "
                                   "state_dict() returned, unchanged)")
        values[key] = value
    epoch, start, offset, world = values["epoch"], values["start"], values["offset"], values["world_size"]
    rank = state.get("rank")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
        raise PicPacValueError(f"{path}: the state's 'rank' must be an int in [0, world_size={world}), got "
                               f"{rank!r} (pass what state_dict() returned, unchanged)")
    if not position.share(0, world):
        raise PicPacValueError(f"{path}: the state's 'world_size' ({world}) leaves no sample to any rank of an "
                               f"epoch of {position.n} with share_pad=False: no stream saves that state")
    if not position.loop and offset > (share := position.share(start, world)):
        raise PicPacValueError(f"{path}: the state's 'offset' ({offset}) is past the end of its pass: each of its "
                               f"{world} rank(s) has {share} samples of it after 'start' {start}; a loop=False "
                               "stream never saves that state (a new pass: 'epoch' + 1, 'offset' 0)")
    place = position.resolve(epoch, start, offset, world)
    if place[0] > position.last_epoch:
        raise position.past_the_end(f"the state's 'epoch' ({epoch})" if epoch > position.last_epoch else
                                    f"the state's 'offset' ({offset}) from its 'epoch' {epoch}")
    position.load(*place)
