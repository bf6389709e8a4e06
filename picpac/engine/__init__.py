"""The parallel engines that every pipeline runs on: ordered maps on threads (``threads``), worker
processes (``processes``) with POSIX shared memory (``shared_memory``) and batches assembled in it
(``shared_batches``), and batch arrays aligned for zero-copy hand-off (``aligned``). Nothing here
knows what an image, a sample order or a stream is."""
