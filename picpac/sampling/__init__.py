"""Sampling: which records a stream reads, and in what order (``picpac.sampling``, also batchup's module).

* ``folds``: K-fold assignment (stratified, group-aware) and fold selection;
* ``sampler``: ``Sampler``, the order of every pass of a stream, and ``shard``, a rank's share of one
  (``picpac.sampling.sampler.shard``);
* ``batch_samplers``: batchup's samplers of index mini-batches, and ``data_source`` batchup's data
  sources on them (``picpac.data_source``).

Nothing here reads a record's bytes: splits and orders are exact, reproducible functions of the
labels, groups and the seed.
"""
from .batch_samplers import (AbstractSampler, StandardSampler, SubsetSampler, WeightedSampler, WeightedSubsetSampler,
                             num_batches)
from .folds import assign_folds, select
from .sampler import Sampler

__all__ = ["AbstractSampler", "Sampler", "StandardSampler", "SubsetSampler", "WeightedSampler",
           "WeightedSubsetSampler", "assign_folds", "num_batches", "select"]
