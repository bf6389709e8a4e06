"""picpac's C extensions and the documentation pages shipped inside the package. Everything else is in pyproject.toml.

* ``picpac.image._kernels`` (required: a C compiler is all it needs): picpac's own pixel kernels, the arithmetic of
  every resize, warp, flip and conversion picpac promises to be exact about, the same bytes on every CPU.
* ``picpac.image._jpeg`` (the fast path: needs libjpeg-turbo's headers, Debian's libjpeg62-turbo-dev): JPEG regions
  decoded at a reduced scale, and the fused sample path (decode, kernels and conversion in one call without the GIL).
  Without the headers it is skipped, loudly: the install prints what it costs and how to get it, and
  ``picpac --version``, ``picpac bench`` and ``stream.stats()`` say the fast path is off. The wheels picpac
  publishes carry libjpeg-turbo (``auditwheel repair``: benchmarks/wheel.sh).

The pages ``docs/*.md`` are copied into the built package as ``picpac/_docs/*.md``, so that ``picpac docs TOPIC``
prints them for a pip-installed user (the messages point there, not to files of the source tree); MANIFEST.in puts
them in the sdist.
"""
import glob
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
FAST_PATH_OFF = """
picpac: the fast path is OFF in this install: libjpeg-turbo's headers were not found, so picpac.image._jpeg was not
built. JPEGs will be decoded whole by OpenCV (no region or reduced decoding, no fused sample path): in our benchmarks
that is about 1.2 to 2x slower to stream, and more where images are shrunk a lot. To get it: install libjpeg-turbo's
headers (Debian/Ubuntu: apt-get install libjpeg62-turbo-dev; Fedora: libjpeg-turbo-devel; conda: libjpeg-turbo;
macOS: brew install jpeg-turbo) and reinstall picpac, or install a picpac wheel, which carries libjpeg-turbo.
"""


class BuildWithDocs(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "picpac", "_docs")
        os.makedirs(target, exist_ok=True)
        for page in sorted(glob.glob(os.path.join(HERE, "docs", "*.md"))):
            shutil.copyfile(page, os.path.join(target, os.path.basename(page)))


class BuildSayingWhatIsOff(build_ext):
    """build_ext that says so, on stderr where pip shows it, when the optional extension (the fast path) failed."""

    def run(self):
        super().run()
        if any(ext.name == "picpac.image._jpeg" and not os.path.exists(self.get_ext_fullpath(ext.name))
               for ext in self.extensions):
            sys.stderr.write(FAST_PATH_OFF)
            self.warn(FAST_PATH_OFF.strip())


# -ffp-contract=off: the kernels' float arithmetic is fused exactly where they say so (fmaf), on every compiler
FLAGS = ["-ffp-contract=off", "-fno-strict-aliasing"]
KERNELS = Extension("picpac.image._kernels", ["picpac/image/_kernels_module.c", "picpac/image/_kernels.c"],
                    depends=["picpac/image/_kernels.h", "picpac/image/_kernels_api.h", "picpac/image/_kernels_loops.h"],
                    extra_compile_args=FLAGS, libraries=["m"])
JPEG = Extension("picpac.image._jpeg", ["picpac/image/_jpeg.c"],
                 depends=["picpac/image/_kernels.h", "picpac/image/_kernels_api.h"], libraries=["jpeg"],
                 extra_compile_args=FLAGS, optional=True)

setup(ext_modules=[KERNELS, JPEG],
      cmdclass={"build_py": BuildWithDocs, "build_ext": BuildSayingWhatIsOff})
