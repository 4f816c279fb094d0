"""The fuzzers' one switch to instrumented builds: an AddressSanitizer + UBSan build of lookupd's C extensions
(bench/fuzz/Makefile) loaded from a path and put in place of the installed one in each layer's switch
(lookupd.format._accel, lookupd.log._accel), so that every caller of `_accel.X` runs the instrumented code."""

from __future__ import annotations

import importlib.machinery
import importlib.util

from lookupd.format import _accel as format_accel, columnar
from lookupd.log import _accel as log_accel


def load_extension(name: str, path: str):
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


# The names each layer's switch (lookupd.format._accel, lookupd.log._accel) takes from its extension.
DECODE_NAMES = ("decode_frames", "decode_v2", "render_batch", "find_timestamp", "find_timestamp_batch", "sound_batches",
                "commit_runs", "CommitTable", "decompress", "codecs", "validity_bitmap", "nonempty_bitmap",
                "spread_flag", "avro_program", "avro_json", "avro_arrow")
NATIVE_NAMES = ("entry", "locate", "locate_time", "find_batch", "install", "register", "unregister", "faults",
                "resident", "slot", "plain_slot")


def load_instrumented(decode_so: str | None, native_so: str | None) -> None:
    """The instrumented builds in place of the installed extensions, in each layer's switch."""
    if decode_so:
        module = load_extension("lookupd.format._decode", decode_so)
        format_accel.extension, format_accel.NATIVE = module, True
        for name in DECODE_NAMES:
            setattr(format_accel, name, getattr(module, name))
        columnar.NATIVE = True
        columnar.validity_bitmap, columnar.nonempty_bitmap, columnar.spread_flag = \
            module.validity_bitmap, module.nonempty_bitmap, module.spread_flag
    if native_so:
        module = load_extension("lookupd.log._native", native_so)
        log_accel.extension, log_accel.NATIVE = module, True
        for name in NATIVE_NAMES:
            setattr(log_accel, name, getattr(module, name))
