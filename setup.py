"""The optional C extension picpac.image._jpeg (region-of-interest JPEG decoding with the system's
libjpeg-turbo, package libjpeg62-turbo-dev on Debian). Everything else is in pyproject.toml.

It is optional: without libjpeg's headers the build skips it and picpac decodes whole JPEGs with
OpenCV (``picpac.image.REGION_DECODE`` says which)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("picpac.image._jpeg", ["picpac/image/_jpeg.c"], libraries=["jpeg"], optional=True)])
