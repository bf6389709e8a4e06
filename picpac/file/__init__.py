"""The picpac file: its byte layout (``layout``), crash-safe writing (``writer``) and zero-copy,
O(1) reading (``reader``). ``picpac.Writer``, ``picpac.Reader`` and ``picpac.write_arrays`` come
from here. The format is described in docs/format.md."""
