"""pip install ./client/python: builds the scps package's extension
(scps/_scps.c) against an installed libscps, found with pkg-config (set
PKG_CONFIG_PATH=PREFIX/lib/pkgconfig for a prefix of your own), and records
that prefix's rpath so the package imports without LD_LIBRARY_PATH.

A plain setup.py, without pyproject.toml, on purpose: pip then builds with
the setuptools already installed (Debian's python3-setuptools, seen from a
venv made with --system-site-packages) instead of fetching one into an
isolated build environment, so the install works offline."""
import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config"] + list(args) + ["scps"], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("scps: libscps not found by pkg-config (%s). Install it first (cmake --install build --prefix P) "
                 "and set PKG_CONFIG_PATH=P/lib/pkgconfig (the libdir of your install)." % e)
    return out.stdout.strip()


prefix = pkg_config("--variable=prefix")
libdir = pkg_config("--variable=libdir")
includedir = pkg_config("--variable=includedir")


class build_py_with_paths(build_py):
    """Also writes scps/_paths.py: where that install's scps-admin is (scps.admin)."""

    def run(self):
        super().run()
        path = os.path.join(self.build_lib, "scps", "_paths.py")
        with open(path, "w") as f:
            f.write("ADMIN = %r\n" % os.path.join(prefix, "bin", "scps-admin"))


here = os.path.dirname(os.path.abspath(__file__))
setup(
    name="scps",
    version=pkg_config("--modversion"),
    description="Python client and PyTorch integration of the scps embedding parameter server (over libscps)",
    long_description=open(os.path.join(here, "README.md")).read(),
    long_description_content_type="text/markdown",
    packages=["scps"],
    package_data={"scps": ["py.typed"]},
    python_requires=">=3.10",  # Py_NewRef, PyModule_AddObjectRef
    install_requires=["numpy"],
    extras_require={"torch": ["torch"]},
    ext_modules=[Extension(
        "scps._scps", ["scps/_scps.c"],
        # The public headers include each other as "scps_x.h": their folder.
        include_dirs=[os.path.join(includedir, "scps")],
        extra_compile_args=shlex.split(pkg_config("--cflags")),
        extra_link_args=shlex.split(pkg_config("--libs")),
        runtime_library_dirs=[libdir],
    )],
    cmdclass={"build_py": build_py_with_paths},
)
