"""The parallel engines that every pipeline runs on: ordered maps on threads (``threads``), worker
processes (``processes``) with POSIX shared memory (``shared_memory``) and batches assembled in it
(``shared_batches``), batchup's worker pools on them (``work_pool``, public as
``picpac.work_pool``), and batch arrays aligned for zero-copy hand-off
(``aligned``). Nothing here knows what an image or a stream is."""
