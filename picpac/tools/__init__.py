"""The tools: import (``ingest``, public as ``picpac.ingest``), ``info``, ``verify``, ``bench``,
``demo``, and the click command line that fronts them all (``cli``: ``picpac``, ``picpac-import``)."""
