"""fusepy's FUSE, with one change: a read is answered into libfuse's own reply buffer.

fusepy asks the file system for a `bytes` and copies it into libfuse's buffer. A 128 KiB
`bytes` per read is fresh memory every time (malloc hands out blocks that size by mmap),
and faulting its pages in cost more than the copy itself: a cold raw read through the
mount spent half its CPU there. Here `KafkaFS.read` gets the buffer as a writable
memoryview and a raw file is `preadv`'d straight into it.
"""

from __future__ import annotations

import ctypes

from fuse import FUSE


class KafkaFUSE(FUSE):
    def read(self, path, buf, size, offset, fip):  # noqa: D102 - fusepy's callback, libfuse's arguments
        target = (ctypes.c_char * size).from_address(ctypes.addressof(buf.contents))
        return self.operations("read", self._decode_optional_path(path), memoryview(target).cast("B"), offset,
                               fip.contents)
