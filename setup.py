"""Builds the Cython sources in native/ into edgegossip._kernels_c and edgegossip._udp_c.

The C file is generated at build time and never committed. EDGEGOSSIP_DEBUG_BUILD=1 turns
bounds checking back on (slower, but out-of-range indexing raises instead of corrupting memory).
"""
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

debug = os.environ.get("EDGEGOSSIP_DEBUG_BUILD") == "1"
directives = {
    "language_level": 3,
    "boundscheck": debug,
    "wraparound": False,
    "initializedcheck": debug,
    "cdivision": True,
    "embedsignature": True,
}
extensions = [
    Extension(
        "edgegossip._kernels_c",
        ["native/_kernels_c.pyx"],
        extra_compile_args=["-O0", "-g"] if debug else ["-O3"],
    ),
    Extension("edgegossip._udp_c", ["native/_udp_c.pyx"],
              extra_compile_args=["-O0", "-g"] if debug else ["-O2"]),
]
setup(ext_modules=cythonize(extensions, compiler_directives=directives, build_dir="build/cython"))
