"""Builds the Cython sources in native/ into edgegossip._kernels_c, edgegossip._udp_c and
edgegossip._wire_c (which links OpenSSL's libcrypto, the library CPython's hashlib already uses,
for ChaCha20-Poly1305;
without its headers the wire fast path is skipped and the pure-Python path serves).

The C file is generated at build time and never committed. EDGEGOSSIP_DEBUG_BUILD=1 turns
bounds checking back on (slower, but out-of-range indexing raises instead of corrupting memory).
"""
import os
import sysconfig
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

debug = os.environ.get("EDGEGOSSIP_DEBUG_BUILD") == "1"
directives = {
    "language_level": 3,
    "boundscheck": debug,
    "wraparound": False,
    "initializedcheck": debug,
    "cdivision": True,
    "embedsignature": True,
}
# No fused multiply-add contraction: aarch64 compilers fuse a*b+c by default, which would round
# the payload codecs (native/_codec.pxi) differently from their NumPy twins.
strict = ["-ffp-contract=off"]
extensions = [
    Extension(
        "edgegossip._kernels_c",
        ["native/_kernels_c.pyx"],
        include_dirs=["native"],
        extra_compile_args=(["-O0", "-g"] if debug else ["-O3"]) + strict,
    ),
    Extension("edgegossip._udp_c", ["native/_udp_c.pyx"],
              extra_compile_args=["-O0", "-g"] if debug else ["-O2"]),
]


def _have_openssl() -> bool:
    roots = [Path(p) for p in (sysconfig.get_paths().get("include", ""), "/usr/include",
                               "/usr/local/include", os.environ.get("OPENSSL_INCLUDE", ""))
             if p]
    return any((r / "openssl" / "sha.h").is_file() for r in roots)


if _have_openssl():
    # HMAC() (for the MAC benchmark's reference row) is deprecated in OpenSSL 3, not removed
    extensions.append(Extension(
        "edgegossip._wire_c", ["native/_wire_c.pyx"], libraries=["crypto"], include_dirs=["native"],
        define_macros=[("OPENSSL_SUPPRESS_DEPRECATED", "1")],
        extra_compile_args=(["-O0", "-g"] if debug else ["-O3"]) + strict))


class build_py_with_devices(build_py):
    """Copies devices/ (profiles, the unit, the first-boot template) into the wheel as
    edgegossip/devices, so a pip-installed edgegossip can init, flash and deploy a fleet
    (edgegossip/paths.py finds it there, and in devices/ in a checkout)."""

    def run(self):
        super().run()
        for src in Path("devices").rglob("*"):
            if src.is_file():
                dest = Path(self.build_lib) / "edgegossip" / src
                self.mkpath(str(dest.parent))
                self.copy_file(str(src), str(dest))


setup(ext_modules=cythonize(extensions, compiler_directives=directives, build_dir="build/cython"),
      cmdclass={"build_py": build_py_with_devices})
