"""setup.py - builds libringcc with the checkout's Makefile and puts the
shared library into the package (ringcc/_lib/libringcc.so).

The package itself is pure Python (ctypes); the wheel is tagged for this
platform because it carries the library. Environment:
  RINGCC_MAKE_ARGS   extra arguments for make (e.g. "CUDA=0 -j4")
  RINGCC_PREBUILT    a libringcc.so to ship instead of running make
"""

import os
import re
import shlex
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def version():
    header = os.path.join(ROOT, "include", "ringcc.h")
    try:
        with open(header) as f:
            text = f.read()
    except OSError:
        return "0.0.0"
    parts = [re.search(rf"#define RINGCC_VERSION_{p}\s+(\d+)", text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def build_library():
    """Path of a freshly built libringcc.so (the real file, not a link)."""
    prebuilt = os.environ.get("RINGCC_PREBUILT")
    if prebuilt:
        return os.path.realpath(prebuilt)
    if not os.path.exists(os.path.join(ROOT, "Makefile")):
        raise SystemExit(
            f"ringcc: {ROOT} is not a libringcc checkout (no Makefile): "
            "install with `pip install ./python` from the checkout, or set "
            "RINGCC_PREBUILT to a libringcc.so")
    cmd = ["make", "-C", ROOT, "--no-print-directory", "lib"] + \
        shlex.split(os.environ.get("RINGCC_MAKE_ARGS", ""))
    print("ringcc: " + " ".join(cmd), flush=True)
    subprocess.check_call(cmd)
    return os.path.realpath(os.path.join(ROOT, "build", "lib", "libringcc.so"))


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = build_library()
        dest = os.path.join(self.build_lib, "ringcc", "_lib")
        os.makedirs(dest, exist_ok=True)
        shutil.copyfile(lib, os.path.join(dest, "libringcc.so"))
        os.chmod(os.path.join(dest, "libringcc.so"), 0o755)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # the wheel carries a shared library: platform-tagged


setup(version=version(), cmdclass={"build_py": BuildPyWithLibrary},
      distclass=BinaryDistribution)
