"""What every adapter's loader shares: one ImageStream, its epochs and its exact resume."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import PicPacTypeError, PicPacValueError
from ..stream.config import StreamConfig
from ..stream.image_stream import ImageStream
from ..stream.legacy import translate


def with_rank(config: dict[str, Any], rank: int, world_size: int) -> dict[str, Any]:
    """``config`` with ``rank`` and ``world_size`` set where it leaves them out (or None): a framework's own
    process index and count, which an explicit config key overrides."""
    config = dict(config)
    if config.get("rank") is None:
        config["rank"] = rank
    if config.get("world_size") is None:
        config["world_size"] = world_size
    return config


def database_and_config(path: Any, config: dict[str, Any], adapter: str,
                        instead: str = "") -> tuple[Any, dict[str, Any]]:
    """The database and the stream config a loader was given, as a path and keys or PicPac's dict form
    ``{'db': ..., key: value}``. A ready ImageStream is refused: the loader sets keys of its own (the
    order, the label type, the share); ``instead`` says what takes a stream of your own."""
    if isinstance(path, Mapping):
        config = {**path, **config}
        path = config.pop("db", None)
    if path is None:
        raise PicPacTypeError(f"the {adapter} adapter needs a database: its path, or {{'db': path, ...}}")
    if isinstance(path, ImageStream):
        raise PicPacTypeError(f"the {adapter} adapter builds its own ImageStream (it sets order, label_dtype and "
                              f"the share): pass the database's path and the stream's config keys{instead}")
    return path, config


def loader_config(path: Any, config: StreamConfig | None, keys: dict[str, Any], adapter: str,
                  defaults: Mapping[str, Any], label_dtype: str,
                  distributed: Callable[[dict[str, Any]], dict[str, Any]] = lambda given: given,
                  instead: str = "") -> tuple[Any, StreamConfig]:
    """The database and the StreamConfig a loader runs, from ``config`` (a StreamConfig) and/or ``keys``
    (ImageStream's keys; PicPac's dict form as ``path``): the loader's ``defaults`` where they leave a key out,
    ``distributed`` (the framework's rank and world size where they leave those None), and ``label_dtype`` for
    class ids when the task is classification without ``onehot``."""
    path, keys = database_and_config(path, keys, adapter, instead)
    if config is not None and not isinstance(config, StreamConfig):
        raise PicPacTypeError(f"the {adapter} adapter's config= takes a StreamConfig (StreamConfig.from_dict(keys)), "
                              f"got {type(config).__name__}; or give the keys themselves")
    given = distributed(translate({**(config.given if config is not None else {}), **keys}))
    given = {**defaults, **given}
    parsed = StreamConfig.from_dict(given)  # every key checked now, the task known, the rank resolved
    if "label_dtype" not in given and parsed.output.task == "classify" and not parsed.output.onehot:
        parsed = parsed.replace(label_dtype=label_dtype)
    return path, parsed


class StreamLoader:
    """A loader over ``self.stream`` (set by the subclass): ``len``, ``size``, ``set_epoch``,
    ``state_dict``/``load_state_dict`` and ``close``, each as the stream's. A loader that holds a batch
    ahead overrides :meth:`_state` (the state after the batches delivered) and :meth:`_forget`."""

    stream: ImageStream

    def __len__(self) -> int:
        """Batches per epoch (of this rank's share)."""
        return len(self.stream)

    def size(self) -> int:
        """Samples per epoch (of this rank's share)."""
        return self.stream.size()

    def set_epoch(self, epoch: int) -> None:
        """The next pass is epoch ``epoch`` (its order and every sample's randomness); as the stream's."""
        self.stream.set_epoch(epoch)
        self._forget()

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is (JSON-serialisable): the stream's state after the batches delivered, for an
        exact resume."""
        return {"stream": self._state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state_dict()``'s state: the next batch is the one after those delivered."""
        name = type(self).__name__
        if not isinstance(state, Mapping) or "stream" not in state:
            raise PicPacValueError(f"{name}.load_state_dict takes what {name}.state_dict() returned "
                                   f"(a dict with 'stream'), not {type(state).__name__}")
        self.stream.load_state_dict(state["stream"])
        self._forget()

    def _state(self) -> dict[str, Any]:
        return self.stream.state_dict()

    def _forget(self) -> None:
        """Drop what the loader holds ahead of the stream's position (nothing here)."""

    def close(self) -> None:
        self.stream.close()

    def __enter__(self) -> StreamLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
