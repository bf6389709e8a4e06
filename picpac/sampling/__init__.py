"""Sampling: which records a stream reads, and in what order (``picpac.sampling``, also batchup's module).

* ``folds``: K-fold assignment (stratified, group-aware) and fold selection;
* ``sampler``: ``Sampler``, the order of every pass of a stream, and ``share``, a rank's share of one
  (``picpac.sampling.sampler.share``).

batchup's samplers of index mini-batches live in ``picpac.compat.batchup.batch_samplers``; since
batchup code imports them from ``picpac.sampling``, ``picpac/__init__.py`` adds them to this package's
names (and ``__all__``) once the package is imported.

Nothing here reads a record's bytes: splits and orders are exact, reproducible functions of the
labels, groups and the seed.
"""
from .folds import assign_folds, select
from .sampler import Sampler

__all__ = ["Sampler", "assign_folds", "select"]
