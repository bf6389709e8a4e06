"""``ImageStream`` and ``ImageLoader`` (public as ``picpac.ImageStream``, ``picpac.ImageLoader``):
config keys (``config``), one sample's processing (``processor``), the per-sample and batch paths
(``sample_path``, ``batch_path``) and the stream that runs them on the engines (``image_stream``)."""
