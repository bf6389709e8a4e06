"""batchup's API on picpac's engines (docs/data_source.md): ``batch_samplers`` (index mini-batches),
``data_source`` (data sources on them) and ``work_pool`` (worker pools that prepare their batches in
threads or processes). Users import them as batchup's modules: ``picpac.data_source``,
``picpac.work_pool`` and ``picpac.sampling`` (which offers the samplers beside the stream's)."""
