"""picpac's version: one place, read by the package root, the writers that stamp it into a file's
metadata, the command line, and setuptools (pyproject.toml's ``version``)."""
__version__ = "0.1.0"
