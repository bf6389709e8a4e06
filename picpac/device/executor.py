"""The device executor: a job's units planned on CPU threads, each batch of plans made into device tensors by a
stage on a thread of its own, one batch ahead of the consumer (``engine.executor``'s protocol)."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..engine.executor import Delivery, OnError, ThreadExecutor
from ..engine.threads import ordered_map
from .warp import torch

AHEAD = 2
"""Batches the stage makes ahead of the consumer: the next one is in flight while the current one trains."""


class DeviceExecutor:
    """Runs a job whose units return planned samples on ``workers`` threads, and ``stage(plans)`` (a
    ``stage.DeviceStage``) on each group of them, on a side CUDA stream: a delivery's ``arrays`` is the stage's
    result, which the consumer's current stream waits for before it is used."""

    def __init__(self, workers: int, stage: Callable[[list], Any], name: str = "picpac", timeout: float | None = None):
        self.threads = ThreadExecutor(workers, name, timeout)
        self.stage, self.name, self.timeout = stage, name, timeout
        self.cuda = getattr(stage, "cuda", False)

    def run(self, job: Callable[[Any], tuple[Any, Any]], units: Iterable[Any], group: int, window: int,
            on_error: OnError, chunk: int = 1, layout: tuple[tuple[int, ...], np.dtype] | None = None
            ) -> Iterator[Delivery]:
        planned = self.threads.run(job, units, group, window, on_error, chunk, layout)
        side = torch.cuda.Stream(self.stage.device) if self.cuda else None
        made = ordered_map(lambda delivery: self._make(delivery, side), planned, 1, AHEAD, name=f"{self.name}-device",
                           timeout=self.timeout)
        try:
            for delivery, outcome in made:
                result, event = outcome.get()
                if event is not None:  # the consumer's stream waits for the side stream's work, and owns the memory
                    current = torch.cuda.current_stream(self.stage.device)
                    current.wait_event(event)
                    for tensor in result:
                        if isinstance(tensor, torch.Tensor):
                            tensor.record_stream(current)
                yield delivery._replace(arrays=result)
        finally:
            made.close()
            planned.close()

    def _make(self, delivery: Delivery, side: Any) -> tuple[Any, Any]:
        """The stage's tensors of one delivery, made on the side stream, and the event that marks their end."""
        if side is None:
            return self.stage(delivery.arrays), None
        with torch.cuda.device(side.device), torch.cuda.stream(side):  # (this thread's device is cuda:0 by default)
            result = self.stage(delivery.arrays)
            event = torch.cuda.Event()
            event.record(side)
        return result, event

    def close(self) -> None:
        """Nothing to stop: a run's threads end with it."""
