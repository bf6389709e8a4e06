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

from types import ModuleType

from ..errors import MissingFrameworkError, require as require_framework

__all__ = ["MissingFrameworkError", "require"]


def require(module: str, extra: str) -> ModuleType:
    """``import module``, or a :class:`MissingFrameworkError` naming ``pip install 'picpac[extra]'``."""
    return require_framework(module, extra, f"picpac.adapters.{extra} (see `picpac docs adapters`)")
