"""The C extensions (pyproject.toml holds everything else). Here rather than in pyproject.toml's
[tool.setuptools] ext-modules, which setuptools still calls experimental and warns about at every build.

Each extension is optional: without a C compiler the package still installs, and lookupd runs the
pure-Python paths (searches in Python, sizes checked before reads, records decoded in Python).
Every C source and header is listed here, and is a prerequisite of the Makefile's venv stamp.
"""

import warnings

from setuptools import Extension, setup
from setuptools.warnings import InformationOnly

# `pip install -e .` (the Makefile's venv): setuptools notes at every editable build that folders named like
# the package in the working directory may be imported instead of it. Here that folder is the package
# itself, on purpose; the note is information, not a problem, and the build otherwise prints no warning.
warnings.filterwarnings("ignore", message="Editable installation", category=InformationOnly)

EXTENSIONS = [
    # SIGBUS guard and index search.
    Extension("lookupd.log._native", ["lookupd/log/_native.c"], depends=["lookupd/format/_kafka.h"],
              optional=True),
    # Columnar record decoding (_decode.c and its parts, see _decode.h), decompressing through the codec
    # libraries it finds (_codecs.c, with dlopen); without it lookupd.format.columnar decodes in Python.
    # Hidden visibility: the parts share functions, the module exports only PyInit__decode.
    Extension("lookupd.format._decode",
              ["lookupd/format/_decode.c", "lookupd/format/_records.c", "lookupd/format/_crc32c.c",
               "lookupd/format/_frames.c", "lookupd/format/_json.c", "lookupd/format/_timestamps.c",
               "lookupd/format/_bitmaps.c", "lookupd/format/_codecs.c", "lookupd/format/_offsets.c",
               "lookupd/format/_avro.c"],
              depends=["lookupd/format/_decode.h", "lookupd/format/_kafka.h", "lookupd/format/_codecs.h"],
              extra_compile_args=["-O3", "-fvisibility=hidden"], optional=True),
    # A listing's attributes into libfuse's buffer; without it fusefs.binding does it in Python.
    Extension("fusefs._fill", ["fusefs/_fill.c"], optional=True),
]

setup(ext_modules=EXTENSIONS)
