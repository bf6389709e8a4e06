"""Other libraries' APIs on picpac's layers, at the edge of the package (nothing in the core imports them):

* ``batchup``: batchup's data sources, samplers and worker pools (public as ``picpac.data_source``,
  ``picpac.work_pool`` and, for the samplers, ``picpac.sampling``; docs/data_source.md);
* ``dataflow``: tensorpack's DataFlow API (public as ``picpac.dataflow``; docs/dataflow.md).

``picpac/__init__.py`` registers those public paths, and the paths these modules had before they moved
here (``picpac.sampling.data_source``, ``picpac.dataflow.common`` ...), so that pickles naming them load.
"""
