"""Position's arithmetic: any offset moves on in O(1) to the place that many single steps reach, a saved place
of another world size resolves the same way, and the last reachable epoch (int64 stream positions) is a
PicPacValueError past it, never an overflow."""
from __future__ import annotations

import numpy as np
import pytest

from picpac import PicPacValueError
from picpac.sampling import Sampler
from picpac.stream.config import Order
from picpac.stream.position import POSITIONS, Position


def position(n: int = 10, *, loop: bool = True, rank: int = 0, world: int = 1, share_pad: bool = True,
             oversample: bool = False) -> Position:
    sampler = Sampler(np.arange(n) % 3, 5, shuffle=True, reshuffle=True, oversample=oversample)
    order = Order(loop=loop, reshuffle=True, batch=4, pad=True, rank=rank, world_size=world, share_pad=share_pad)
    return Position(sampler, order, "db.picpac")


def stepped(p: Position, epoch: int, start: int, offset: int, steps: int) -> tuple[int, int, int]:
    """The place ``steps`` single keys after (epoch, start, offset): the slow way."""
    p.load(epoch, start, offset)
    p.advance(0)
    for _ in range(steps):
        p.advance(1)
    return p.epoch, p.start, p.offset


@pytest.mark.parametrize("world,share_pad", [(1, True), (3, True), (3, False)])
def test_a_large_step_lands_where_single_steps_do(world, share_pad):
    p = position(10, world=world, share_pad=share_pad)
    for start in (0, 4, 10):
        for steps in (0, 1, 2, 3, 5, 17, 40):
            expected = stepped(p, 2, start, 0, steps)
            p.load(2, start, 0)
            p.advance(steps)
            assert (p.epoch, p.start, p.offset) == expected, (start, steps)
            assert p.resolve(2, start, steps, world) == expected


@pytest.mark.timeout(10)
def test_an_offset_of_10_to_the_18_is_arithmetic():
    p = position(10, world=3)  # shares of 4 (share_pad: 12 = 3 x 4)
    assert p.resolve(5, 0, 10**18 + 3, 3) == (5 + 10**18 // 4, 0, 3)
    assert p.resolve(5, 6, 10**18, 3) == (6 + (10**18 - 2) // 4, 0, (10**18 - 2) % 4)  # start 6: a first share of 2
    p.load(0, 0, 0)
    p.advance(10**18 + 1)
    assert (p.epoch, p.start, p.offset) == (10**18 // 4, 0, 1)
    # saved by 2 ranks (shares of 5), loaded on 3: whole epochs in the saved shares, then the rest re-split
    assert p.resolve(0, 0, 10**18 + 2, 2) == (10**18 // 5, 4, 0)


def test_the_keys_of_the_last_epoch_are_int64_and_then_the_endless_stream_ends():
    for p in (position(7), position(7, world=2), position(7, oversample=True)):
        last = p.last_epoch
        assert last == POSITIONS // 7 - 1 and (last + 1) * 7 <= 2**63
        positions, epochs, real = p.epoch_keys(last)
        assert epochs.dtype == np.int64 and (epochs >= 0).all() and real == p.share()
        if not p.sampler.n_classes > 1:  # oversample: the epochs are the classes' cycles
            assert set(epochs.tolist()) == {last}
        assert sorted(p.sampler.pass_order(last).tolist()) == list(range(7))
        p.load(last, 0, 2)
        keys, _ = p.order()
        assert len(list(keys)) == p.share() - 2  # the rest of the last epoch, then the stream ends
        with pytest.raises(PicPacValueError, match=rf"db.picpac: epoch {last + 1} is past the last epoch this "
                                                   rf"stream can reach, {last} \(its 7 samples per epoch"):
            p.epoch_keys(last + 1)


def test_set_epoch_past_the_last_is_refused_naming_the_bound():
    p = position(10, loop=False)
    p.set_epoch(p.last_epoch)
    assert p.order()[1] == 10  # its samples (12 keys with pad)
    with pytest.raises(PicPacValueError, match=rf"set_epoch\({p.last_epoch + 1}\) is past the last epoch this "
                                               rf"stream can reach, {p.last_epoch} .*use a smaller epoch"):
        p.set_epoch(p.last_epoch + 1)
    with pytest.raises(PicPacValueError, match=r"set_epoch\(4611686018427387904\) is past"):
        p.set_epoch(2**62)
