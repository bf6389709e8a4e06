"""picpac's C extensions and the documentation pages shipped inside the package. Everything else is in pyproject.toml.

* ``picpac.image._kernels`` (required: a C compiler is all it needs): picpac's own pixel kernels, the arithmetic of
  every resize, warp, flip and conversion picpac promises to be exact about, the same bytes on every CPU.
* ``picpac.image._jpeg`` (the fast path): JPEG regions decoded at a reduced scale, and the fused sample path (decode,
  kernels and conversion in one call without the GIL), over libjpeg-turbo. Its headers are required, as Pillow requires
  libjpeg's: without them the build stops and says how to get them (Debian/Ubuntu: libjpeg62-turbo-dev), or how to go
  without (``PICPAC_FAST_PATH=off pip install ...``: then JPEGs are decoded whole by OpenCV, and ``picpac --version``,
  ``picpac bench`` and ``stream.stats()`` say the fast path is off). The wheels carry libjpeg-turbo
  (``.ci/wheel``: ``python -m build`` and ``auditwheel repair``).

The pages ``docs/*.md`` are copied into the built package as ``picpac/_docs/*.md``, so that ``picpac docs TOPIC``
prints them for a pip-installed user (the messages point there, not to files of the source tree); MANIFEST.in puts
them in the sdist.
"""
import glob
import os
import shutil
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import CompileError

HERE = os.path.dirname(os.path.abspath(__file__))
NO_HEADERS = """
picpac: cannot build its fast path, picpac.image._jpeg: libjpeg-turbo's headers (jpeglib.h) were not found.
Install them and build again (Debian/Ubuntu: apt-get install libjpeg62-turbo-dev; Fedora: dnf install
libjpeg-turbo-devel; conda: conda install libjpeg-turbo; macOS: brew install jpeg-turbo), or install a picpac wheel,
which carries libjpeg-turbo. To install without the fast path (JPEGs decoded whole by OpenCV, no region or reduced
decoding, no fused sample path: slower streams, see `picpac docs performance`), build with PICPAC_FAST_PATH=off.
"""


class BuildWithDocs(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "picpac", "_docs")
        os.makedirs(target, exist_ok=True)
        for page in sorted(glob.glob(os.path.join(HERE, "docs", "*.md"))):
            shutil.copyfile(page, os.path.join(target, os.path.basename(page)))


class BuildFastPathOrSay(build_ext):
    """build_ext that stops, saying why and what to do, when the fast path cannot be built, unless PICPAC_FAST_PATH=off
    asks for an install without it (then it skips it, and says so)."""

    def build_extension(self, ext):
        if ext.name != JPEG.name:
            return super().build_extension(ext)
        if os.environ.get("PICPAC_FAST_PATH", "").lower() == "off":
            self.warn("picpac: PICPAC_FAST_PATH=off: building without the fast path (picpac.image._jpeg)")
            return None
        if not self.finds_jpeglib(ext):
            raise SystemExit(NO_HEADERS)
        return super().build_extension(ext)

    def finds_jpeglib(self, ext) -> bool:
        with tempfile.TemporaryDirectory() as folder:
            probe = os.path.join(folder, "probe.c")
            with open(probe, "w") as f:
                f.write("#include <stdio.h>\n#include <jpeglib.h>\nint probe(void) { return JPEG_LIB_VERSION; }\n")
            try:
                self.compiler.compile([probe], output_dir=folder, include_dirs=ext.include_dirs)
            except CompileError:
                return False
        return True


# -ffp-contract=off: the kernels' float arithmetic is fused exactly where they say so (fmaf), on every compiler
FLAGS = ["-ffp-contract=off", "-fno-strict-aliasing"]
KERNELS = Extension("picpac.image._kernels", ["picpac/image/_kernels_module.c", "picpac/image/_kernels.c"],
                    depends=["picpac/image/_kernels.h", "picpac/image/_kernels_api.h", "picpac/image/_kernels_loops.h"],
                    extra_compile_args=FLAGS, libraries=["m"])
JPEG = Extension("picpac.image._jpeg", ["picpac/image/_jpeg.c"],
                 depends=["picpac/image/_kernels.h", "picpac/image/_kernels_api.h"], libraries=["jpeg"],
                 extra_compile_args=FLAGS)

setup(ext_modules=[KERNELS, JPEG],
      cmdclass={"build_py": BuildWithDocs, "build_ext": BuildFastPathOrSay})
