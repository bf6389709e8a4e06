"""Framework adapters: the only subpackage that may import a heavy framework, each lazily in the module
that needs it, so ``import picpac`` never loads one.

* ``picpac.adapters.torch`` (``pip install 'picpac[torch]'``): ``TorchLoader``, ``TorchDataset``,
  ``DevicePrefetcher`` (`picpac docs adapters`).
* ``picpac.adapters.tf`` (``pip install 'picpac[tf]'``): ``tf_dataset``, ``dataflow_to_dataset``.
* ``picpac.adapters.jax`` (``pip install 'picpac[jax]'``): ``JaxLoader``, ``device_put_batches``.
* ``picpac.adapters.ray``, also ``picpac.ray`` (``pip install 'picpac[ray]'``): ``read_picpac``, ``write_picpac``,
  ``StreamTransform``, ``import_images`` (Ray Data).
"""
from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import PicPacError


class MissingFrameworkError(PicPacError, ImportError):
    """An adapter's framework is not installed; the message names the extra that installs it."""


def require(module: str, extra: str) -> ModuleType:
    """``import module``, or a :class:`MissingFrameworkError` naming ``pip install 'picpac[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingFrameworkError(f"picpac.adapters.{extra} needs {module!r}, which cannot be imported ({exc}): "
                                    f"pip install 'picpac[{extra}]' (see `picpac docs adapters`)") from None
