"""``ImageStream`` and ``ImageLoader`` (public as ``picpac.ImageStream``, ``picpac.ImageLoader``): the typed
config (``config``, ``StreamConfig``; PicPac's keys in ``legacy``), one sample's processing (``processor``),
what a stream is made of (``job``: a pool of keys, a job and an executor), its two jobs (``sample_job``,
``batch_job``), its place in each epoch (``position``) and the stream with its one delivery loop
(``image_stream``)."""
