"""Framework adapters (PyTorch, tf.data, JAX): the only subpackage that may import a heavy framework,
each lazily in the module that needs it. Empty for now."""
