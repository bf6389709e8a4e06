"""The optional C extension picpac.image._jpeg (region-of-interest JPEG decoding with the system's
libjpeg-turbo, package libjpeg62-turbo-dev on Debian, and the fused sample path's resampling kernels), and the documentation pages shipped inside the
package. Everything else is in pyproject.toml.

The extension is optional: without libjpeg's headers the build skips it and picpac decodes whole JPEGs
with OpenCV (``picpac.image.REGION_DECODE`` says which; ``picpac --version`` too).

The pages ``docs/*.md`` are copied into the built package as ``picpac/_docs/*.md``, so that
``picpac docs TOPIC`` prints them for a pip-installed user (the messages point there, not to files of
the source tree); MANIFEST.in puts them in the sdist.
"""
import glob
import os
import shutil

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class BuildWithDocs(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "picpac", "_docs")
        os.makedirs(target, exist_ok=True)
        for page in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "docs", "*.md"))):
            shutil.copyfile(page, os.path.join(target, os.path.basename(page)))


# -ffp-contract=off: the resampling kernels round where OpenCV rounds (picpac/image/_resample.c)
JPEG = Extension("picpac.image._jpeg", ["picpac/image/_jpeg.c", "picpac/image/_resample.c"],
                 depends=["picpac/image/_resample.h"], libraries=["jpeg"], extra_compile_args=["-ffp-contract=off"],
                 optional=True)

setup(ext_modules=[JPEG],
      cmdclass={"build_py": BuildWithDocs})
