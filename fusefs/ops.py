"""The file system: one method per system call the mount answers, in the style of fusepy's examples.

What a path is comes from `fusefs.tree` (the layout), what exists from `fusefs.catalog`
(the daemon's listings), bytes from `fusefs.sources` and generated content from
`fusefs.views`, read through `fusefs.stream`.

Attributes: directories 0555, files 0444, owned by the user who mounted. A segment's
files carry the segment's largest record timestamp as mtime; raw files their true size;
generated files size 0 (like /proc: the size is not known before the content is made)
and are opened with direct I/O, so every read reaches the mount and tools read to the
end of the content. A rolled segment's raw files keep the kernel's page cache from one
open to the next while they are the same file (see `_cache_kept`); the active segment's
are read through the mount at every open, as it grows. Other files and directories carry the time of the mount.

Errors: unknown paths ENOENT; offsets outside the partition ENOENT; a topic the daemon's [[acl]] rules
deny (to describe, or a file to read) EACCES, with the daemon's reason in the log; writes of any kind
EROFS (the mount is read-only: the kernel refuses them before they reach here); the daemon unreachable or corrupt data: EIO, with the reason in the log (the same
reason at most every 10 s). A segment deleted by retention is ENOENT from then on, but
files opened before keep reading: raw files and generated views hold the descriptors of
what they read (see fusefs.sources), index views read their entries at open.
"""

from __future__ import annotations

import errno
import functools
import itertools
import json
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from typing import Callable, NamedTuple

from lookupd.rpc.client import RemoteError
from lookupd.errors import LookupdError
from lookupd.format.times import MAX_TIMESTAMP, outside_records
from lookupd.format.wire import MissingExtra, ValueDecoder, require
from lookupd.log.fileio import regular_stat
from lookupd.sdnotify import sd_notify

from . import listing, tree
from .binding import FuseOSError, Operations
from .catalog import Catalog, PartitionInfo
from .sources import Cursor, DaemonLog, DaemonSource, Handles, LocalFile, LocalSource, TieredSource
from .stream import Pieces, Stream
from .tiers import REMOTE_IO_SIZE, BucketLogFile, BucketSegments
from .views import RenderCache, key_lines, index_lines, partition_json, read_index, record_lines, segment_index

log = logging.getLogger(__name__)

WARN_EVERY_S = 10.0
MAX_WARNED = 1024  # reasons and paths remembered for WARN_EVERY_S (past it, the older ones are forgotten)
# The most one FUSE read may ask for: libfuse 3's most (its 1 MiB request buffer). Reads through the
# kernel's page cache (local raw files) still come in its 128 KiB read-ahead window; reads of files opened
# with direct I/O (generated files, remote `.log`s) come as the reader asked, up to this.
MAX_READ = REMOTE_IO_SIZE
# The I/O size stat reports (st_blksize): readers that size their buffers from it (Python's open, stdio, cat)
# then ask for one page-cache window at a time, not 4 KiB; a generated file's every read is a call into
# Python. A remote `.log` reports REMOTE_IO_SIZE: each of its reads is a call into Python.
IO_SIZE = 128 << 10
MAX_IDENTITIES = 1 << 16  # raw files whose last open is remembered (forgotten: opened once without keep_cache)
_NOT_THERE = {"UNKNOWN_PARTITION", "OFFSET_OUT_OF_RANGE", "UNKNOWN_GROUP"}


def _grows(node: tree.Node) -> bool:
    """Whether a generated file grows as the broker appends (views of records; not partition.json, whose
    bytes change, nor an index view, read when opened)."""
    if isinstance(node, tree.SegmentFile):
        return node.suffix == "records.jsonl"
    return isinstance(node, (tree.AtOffset, tree.AtTime, tree.ByKey))


def _nothing(cursor: None) -> Pieces:
    yield from ()


def _once(content: bytes, cursor: None) -> Pieces:
    yield content, None


class OpenFile(NamedTuple):
    content: LocalFile | DaemonLog | BucketLogFile | Stream
    attrs: dict  # at open

    def stat(self) -> dict:
        if isinstance(self.content, LocalFile):  # a segment file may grow while open
            return {**self.attrs, "st_size": self.content.size()}
        if isinstance(self.content, Stream):  # what is produced so far, and a little past the latest read
            return {**self.attrs, "st_size": self.content.grow()}
        return self.attrs


class KafkaFS(Operations):
    """Kafka log dirs as a read-only tree of topics, partitions and segments (see fusefs.tree)."""

    use_ns = True

    def __init__(self, catalog: Catalog, handles: Handles | None = None, renders: RenderCache | None = None,
                 remote: BucketSegments | None = None, decode_values: bool = True):
        self.catalog = catalog
        # Keys and values in Confluent's wire format decoded in the record views, with the schemas of the
        # daemon's `_schemas` topic (off: `fusefs mount --no-decode-values`, or no such topic).
        self.decode_values = decode_values
        self._decoder: ValueDecoder | None = None
        self.remote = remote  # the bucket's segments (fusefs mount --config); None: remote segments not shown
        self.daemon = catalog.daemon
        self.handles = handles or Handles()
        self.renders = renders or RenderCache()
        self.listings = listing.Listings()
        self.mounted_ns = time.time_ns()
        self._owner = {"st_uid": os.getuid(), "st_gid": os.getgid()}
        self._files: dict[int, OpenFile] = {}
        # Generated files open now, by path: their size is what the furthest open has produced (Stream.grow),
        # so a `tail -f` polling the size with fstat (no file handle) sees it grow, never shrink.
        self._streams: dict[str, list[Stream]] = {}
        self._streams_lock = threading.Lock()
        # Drops the kernel's cached attributes of a path: set by fusefs.binding once mounted.
        self.invalidate: Callable[[str], object] = lambda path: None
        self._listings: dict[int, list | None] = {}  # open directory -> its entries, made at the first readdir
        self._fh = itertools.count(1)
        self._identities: OrderedDict[str, tuple] = OrderedDict()  # path -> identity at its last open
        self._identity_lock = threading.Lock()
        self._warned: dict[str, float] = {}
        self._warn_lock = threading.Lock()

    # ------------------------------------------------------------------ errors

    def __call__(self, op: str, *args):
        try:
            return getattr(self, op)(*args)
        except FuseOSError:
            raise
        except RemoteError as err:
            if err.code in _NOT_THERE:
                raise FuseOSError(errno.ENOENT) from None
            if err.code == "INVALID_ARGUMENT":
                raise FuseOSError(errno.EINVAL) from None
            if err.code == "UNAUTHORIZED":  # the daemon's [[acl]] rules: its message names the topic and operation
                self._warn(op, args, err, answering="EACCES")
                raise FuseOSError(errno.EACCES) from None
            self._warn(op, args, err)
        except LookupdError as err:  # the daemon unreachable, corrupt data
            self._warn(op, args, err)
        except FileNotFoundError:
            raise FuseOSError(errno.EIO if op in ("read", "read_buf") else errno.ENOENT) from None
        except OSError as err:
            self._warn(op, args, err)
            raise FuseOSError(err.errno or errno.EIO) from None
        except Exception:
            log.exception("%s %s failed", op, args[0] if args else "")
        raise FuseOSError(errno.EIO)

    def _warn(self, op: str, args: tuple, err: Exception, answering: str = "EIO") -> None:
        reason = f"{type(err).__name__}: {err}"
        if self._first_in_a_while(reason):
            log.warning("%s %s: %s; answering %s", op, args[0] if args else "", reason, answering)

    def _first_in_a_while(self, key: str) -> bool:
        """Whether `key` was not logged in the last WARN_EVERY_S (and is now)."""
        now = time.monotonic()
        with self._warn_lock:
            if now - self._warned.get(key, -WARN_EVERY_S) < WARN_EVERY_S:
                return False
            if len(self._warned) >= MAX_WARNED:  # keys are paths and reasons: keep those of the last while only
                self._warned = {k: t for k, t in self._warned.items() if now - t < WARN_EVERY_S}
            self._warned[key] = now
        return True

    # ------------------------------------------------------------------ lifecycle

    def init(self, path: str) -> None:
        log.info("mounted; lookups go to lookupd at %s", self.daemon.address)
        sd_notify("READY=1\nSTATUS=mounted")

    def destroy(self, path: str) -> None:
        sd_notify("STOPPING=1")
        self.daemon.close()

    # ------------------------------------------------------------------ metadata

    def getattr(self, path: str, fh=None) -> dict:
        opened = self._files.get(fh.fh) if fh is not None else None
        if opened is not None:  # fstat: what was opened, even if it is gone from the log dir since
            return opened.stat()
        attrs = self._stat(tree.parse(path))
        if self._streams:
            size = self._open_size(path)
            if size:
                attrs = {**attrs, "st_size": size}
        return attrs

    def _open_size(self, path: str) -> int:
        """The size of generated file `path` as its open streams know it (Stream.grow), 0 if none is open."""
        with self._streams_lock:
            streams = list(self._streams.get(path, ()))
        return max((s.grow() for s in streams), default=0)

    def opendir(self, path: str) -> int:
        fh = next(self._fh)
        self._listings[fh] = None
        return fh

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict | None]]:
        """The entries of the directory open as `fh`, each with its attributes where they are known
        (READDIRPLUS: `ls -l` then asks nothing per entry). Made at the first call and kept until
        releasedir, so the pieces the kernel asks for by offset are of one listing."""
        listing = self._listings.get(fh)
        if listing is None:
            listing = [(".", None), ("..", None), *self._listing(path, tree.parse(path))]
            if self._streams:  # a generated file open now has the size getattr gives it
                base = path.rstrip("/") + "/"
                with self._streams_lock:
                    here = [p[len(base):] for p in self._streams if p.startswith(base)]
                sizes = {name: size for name in here if (size := self._open_size(base + name))}
                if sizes:
                    listing = [(n, {**a, "st_size": sizes[n]} if a is not None and n in sizes else a) for n, a in listing]
            if fh in self._listings:
                self._listings[fh] = listing
        return listing

    def releasedir(self, path: str, fh: int) -> int:
        self._listings.pop(fh, None)
        return 0

    # No extended attributes. getxattr answers ENOTSUP itself: left undefined (ENOSYS), the kernel
    # answers ENODATA for the ACL names, and GNU `ls -l` then asks once per file (half the system
    # calls of an `ls -lR`); ENOTSUP tells it the file system has none, and it stops asking.
    # listxattr stays undefined: the kernel learns ENOSYS once and answers ENOTSUP itself.
    def getxattr(self, path: str, name: str, position: int = 0) -> bytes:
        raise FuseOSError(errno.ENOTSUP)

    listxattr = None

    def statfs(self, path: str) -> dict:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_namemax": 255}

    # ------------------------------------------------------------------ data

    def open(self, path: str, fi) -> int:
        if fi.flags & os.O_ACCMODE != os.O_RDONLY:
            raise FuseOSError(errno.EROFS)
        node = tree.parse(path)
        attrs = self._stat(node)
        if isinstance(node, tree.DIRECTORIES):
            raise FuseOSError(errno.EISDIR)
        if isinstance(node, tree.SegmentFile) and node.raw:
            part = self.catalog.partition(node.topic, node.partition)
            content = self._source(part).open_raw(node.base_offset, node.suffix)
            if isinstance(content, LocalFile):
                rolled = not self.catalog.segment(part, node.base_offset).active
                fi.keep_cache = int(self._cache_kept(path, content.identity(), rolled))
            elif isinstance(content, BucketLogFile):
                fi.direct_io = 1  # reads as big as the reader's (MAX_READ), not the page cache's 128 KiB
        else:
            content = Stream(*self._producer(node, path), resumable=_grows(node))
            fi.direct_io = 1
            with self._streams_lock:
                self._streams.setdefault(path, []).append(content)
        fi.fh = next(self._fh)
        self._files[fi.fh] = OpenFile(content, attrs)
        return 0

    def _cache_kept(self, path: str, identity: tuple, rolled: bool) -> bool:
        """Whether the kernel may keep the pages it cached for `path` (FOPEN_KEEP_CACHE).

        Only for a rolled segment's file, and only when it is the very file, in the very
        state (device, inode, size, mtime), that the last open of `path` found: a file
        deleted and made again, replaced (compaction's swap) or truncated under the same name
        is opened without, and that makes the kernel drop the old name's pages at this open.
        """
        with self._identity_lock:
            before = self._identities.pop(path, None)
            self._identities[path] = identity
            while len(self._identities) > MAX_IDENTITIES:
                self._identities.popitem(last=False)
        return rolled and before == identity

    def read_buf(self, path: str, fi) -> int | None:
        """The descriptor a read of the file open as `fi` takes its bytes from, libfuse reading them itself
        (a raw local file: see fusefs.binding); None when `read` makes them."""
        content = self._files[fi.fh].content
        return content.fd if isinstance(content, LocalFile) else None

    def read(self, path: str, buf: memoryview, offset: int, fi) -> int:
        """Fill `buf` (a buffer libfuse sends on) from `offset` of a generated file, a `.log` read through
        the daemon or a remote `.log` (copied from its decoded chunks); how many bytes went in."""
        content = self._files[fi.fh].content
        if isinstance(content, BucketLogFile):
            return content.read_into(buf, offset)
        data = content.read(len(buf), offset)
        buf[:len(data)] = data
        if len(data) < len(buf) and isinstance(content, Stream):
            # At the end of what is made so far: the kernel may still hold the size it got before (0 at
            # open), and a reader polling the size (`tail -f`) would take the file for truncated.
            self.invalidate(path)
        return len(data)

    def release(self, path: str, fi) -> int:
        opened = self._files.pop(fi.fh, None)
        if opened is not None and isinstance(opened.content, Stream):
            opened.content.close()
            with self._streams_lock:
                streams = self._streams.get(path, [])
                if opened.content in streams:
                    streams.remove(opened.content)
                if not streams:
                    self._streams.pop(path, None)
        return 0

    # ------------------------------------------------------------------ refused (fusepy allows these by default)

    def utimens(self, path: str, times=None) -> int:
        raise FuseOSError(errno.EROFS)

    def setxattr(self, path: str, name: str, value: bytes, options: int, position: int = 0) -> int:
        raise FuseOSError(errno.EROFS)

    def removexattr(self, path: str, name: str) -> int:
        raise FuseOSError(errno.EROFS)

    # ------------------------------------------------------------------ helpers

    def _attrs(self, mode: int, *, nlink: int = 1, size: int = 0, blocks: int = 0, mtime_ns: int | None = None,
               io_size: int = IO_SIZE) -> dict:
        t = self.mounted_ns if mtime_ns is None else mtime_ns
        return {"st_mode": mode, "st_nlink": nlink, "st_size": size, "st_blocks": blocks, "st_blksize": io_size,
                **self._owner, "st_mtime": t, "st_ctime": t, "st_atime": t}

    def _stat(self, node: tree.Node) -> dict:
        if isinstance(node, tree.Root):  # answered without the daemon, so umount works while it is down
            return self._attrs(stat.S_IFDIR | 0o555, nlink=1)  # 1: subdirectories not counted
        if isinstance(node, tree.DIRECTORIES):
            return self._attrs(stat.S_IFDIR | 0o555, nlink=2 + self._subdirectories(node))
        if isinstance(node, tree.SegmentFile):
            return self._segment_attrs(node)
        self._check_exists(node)
        return self._attrs(stat.S_IFREG | 0o444)

    def decoder(self) -> ValueDecoder | None:
        """The decoder the record views open now use: over the registry the catalog holds, None when
        decoding is off, there are no schemas, or the packages that decode are missing (said once)."""
        if not self.decode_values:
            return None
        reg = self._schemas_or_none("decode")
        if reg is None:
            return None
        dec = self._decoder
        if dec is None or dec.registry is not reg:
            try:
                require()
            except MissingExtra as err:
                log.warning("records are shown undecoded: %s", err)
                self.decode_values = False
                return None
            dec = self._decoder = ValueDecoder(reg)
        return dec

    def _schemas_or_none(self, op: str):
        """The catalog's registry; None when there is none, or it cannot be had now (said in the log): the
        records are then shown undecoded, and the root lists no __schemas."""
        try:
            return self.catalog.schemas()
        except (LookupdError, RemoteError, OSError) as err:
            self._warn(op, (tree.SCHEMAS,), err)
            return None

    def _registry(self):
        reg = self.catalog.schemas()
        if reg is None:
            raise FuseOSError(errno.ENOENT)
        return reg

    def _schema_version(self, node: tree.SchemaFile):
        """The version a schema file names; ENOENT unless it is there under exactly that name."""
        sv = self._registry().version(node.subject, node.version)
        if sv is None or tree.schema_file_name(sv.version, sv.schema_type, sv.deleted) != node.name:
            raise FuseOSError(errno.ENOENT)
        return sv

    def _partitions_of(self, topic: str) -> list[int]:
        partitions = self.catalog.topics().get(topic)
        if partitions is None:
            raise self.catalog.absent(topic)  # ENOENT, or EACCES for a topic the [[acl]] rules deny
        return partitions

    def _subdirectories(self, node: tree.Node) -> int:
        """How many directories `node` holds (for st_nlink); ENOENT when it does not exist."""
        if isinstance(node, tree.SchemasDir):
            return len(self._registry().subjects(include_deleted=True))
        if isinstance(node, tree.SubjectDir):
            if node.subject not in self._registry().subjects(include_deleted=True):
                raise FuseOSError(errno.ENOENT)
            return 0
        if isinstance(node, tree.GroupsDir):
            if tree.CONSUMER_OFFSETS not in self.catalog.topics():
                raise FuseOSError(errno.ENOENT)  # no group to show (or none this principal may see)
            return 0
        if isinstance(node, tree.Topic):
            return len(self._partitions_of(node.topic)) + 1  # and by-key/
        self._check_exists(node)
        return len(tree.NAV_DIRS) if isinstance(node, tree.Partition) else 0

    def _tiered(self, part: PartitionInfo) -> bool:
        """Whether the partition has segments in the bucket that this mount reads (a partition with no
        local directory: only when all its segments are there, the daemon's host having the others)."""
        if self.remote is None:
            return False
        tiers = {s.tier for s in self.catalog.segments(part).list}
        return "remote" in tiers and (part.local_dir is not None or tiers == {"remote"})

    def _source(self, part: PartitionInfo) -> LocalSource | DaemonSource:
        if self._tiered(part):
            return TieredSource(part, self.catalog, self.handles, self.remote)
        if part.local_dir is not None:
            return LocalSource(part, self.catalog, self.handles)
        return DaemonSource(part, self.catalog, self.daemon)

    def _listing(self, path: str, node: tree.Node) -> list[tuple[str, dict | None]]:
        if isinstance(node, tree.Root):
            topics = self.catalog.topics()
            names = [n for n in topics if n != tree.GROUPS] + ([tree.GROUPS] if tree.CONSUMER_OFFSETS in topics else [])
            if self._schemas_or_none("readdir") is not None:  # (a topic named __schemas is shadowed)
                names = [n for n in names if n != tree.SCHEMAS] + [tree.SCHEMAS]
        elif isinstance(node, tree.SchemasDir):
            names = [tree.key_file_name(s.encode(), "") for s in self._registry().subjects(include_deleted=True)]
        elif isinstance(node, tree.SubjectDir):
            versions = self._registry().subjects(include_deleted=True).get(node.subject)
            if versions is None:
                raise FuseOSError(errno.ENOENT)
            names = [tree.schema_file_name(sv.version, sv.schema_type, sv.deleted) for sv in versions]
        elif isinstance(node, tree.GroupsDir):
            groups = self.daemon.call("groups")["groups"]
            return [(tree.group_file_name(g["group"]), self._attrs(stat.S_IFREG | 0o444)) for g in groups]
        elif isinstance(node, tree.Topic):
            names = [str(p) for p in self._partitions_of(node.topic)] + [tree.BY_KEY]
        elif isinstance(node, tree.Partition):
            part = self.catalog.partition(node.topic, node.partition)
            return self._segment_listing(part) + [(n, self._child_attrs(path, n)) for n in tree.PARTITION_EXTRAS]
        elif isinstance(node, (tree.NavDir, tree.ByKeyDir)):
            self._check_exists(node)
            return []  # resolved on lookup, never listed
        else:
            raise FuseOSError(errno.ENOTDIR)
        return [(n, self._child_attrs(path, n)) for n in names]

    def _child_attrs(self, path: str, name: str) -> dict | None:
        """What getattr would answer for `name` in `path`; None (looked up later) when that is an error."""
        try:
            return self._stat(tree.parse(path.rstrip("/") + "/" + name))
        except (FuseOSError, LookupdError, RemoteError, OSError):
            return None

    def _segment_listing(self, part: PartitionInfo) -> list[tuple[str, dict | None]]:
        """Every segment's files and views, with the attributes `_segment_attrs` gives each, from one
        scan of the partition directory (fusefs.listing), not one getattr per file."""
        segments = self.catalog.segments(part).list
        if self._tiered(part):
            source = self._source(part)
            local = [s for s in segments if s.tier != "remote"]
            entries = self.listings.entries(part.local_dir, local, self._file_attrs) if local else []
            return listing.tiered_entries([s for s in segments if s.tier == "remote"], source.index_size,
                                          self._file_attrs) + entries
        if part.local_dir is None:
            return listing.remote_entries(segments, self._file_attrs)
        return self.listings.entries(part.local_dir, segments, self._file_attrs)

    def _file_attrs(self, size: int, blocks: int, mtime_ns: int, io_size: int = IO_SIZE) -> dict:
        return self._attrs(stat.S_IFREG | 0o444, size=size, blocks=blocks, mtime_ns=mtime_ns, io_size=io_size)

    def _segment_attrs(self, node: tree.SegmentFile) -> dict:
        part = self.catalog.partition(node.topic, node.partition)
        seg = self.catalog.segment(part, node.base_offset)
        mtime_ns = seg.largest_timestamp * 1_000_000
        if node.remote != (seg.tier == "remote") or (node.remote and not self._tiered(part)):
            raise FuseOSError(errno.ENOENT)  # a remote segment is named <base>.remote.<suffix>, a local one not
        if node.remote:
            size = self._source(part).index_size(node.base_offset, node.disk_suffix)
            if size is None:
                raise FuseOSError(errno.ENOENT)
            blocks = (size + 511) // 512
        elif part.local_dir is not None:
            st = regular_stat(LocalSource(part, self.catalog, self.handles).path(node.base_offset, node.disk_suffix))
            size, blocks = st.st_size, st.st_blocks
        elif node.disk_suffix == "log":
            size, blocks = seg.size, (seg.size + 511) // 512
        else:
            raise FuseOSError(errno.ENOENT)  # index bytes are not served by the daemon
        if not node.raw:
            size = blocks = 0
        if node.remote and node.suffix == "log":
            return self._file_attrs(size, blocks, mtime_ns, REMOTE_IO_SIZE)
        return self._file_attrs(size, blocks, mtime_ns)

    def _group_offsets(self, group: str) -> dict:
        """The daemon's answer for a group file: UNKNOWN_GROUP (ENOENT) when there is no such group."""
        return self.daemon.call("group_offsets", group, "read_uncommitted")

    def _check_exists(self, node: tree.Node) -> None:
        if isinstance(node, tree.SchemaFile):
            self._schema_version(node)
            return
        if isinstance(node, tree.GroupFile):
            self._group_offsets(node.group)
            return
        if getattr(node, "partition", 0) is None:  # a topic's by-key/
            self._partitions_of(node.topic)
            return
        part = self.catalog.partition(node.topic, node.partition)
        if isinstance(node, tree.AtOffset):
            self._resolve_offset(part, node.start)  # ENOENT outside [log start, log end]

    def _key_producer(self, node: tree.ByKey) -> tuple:
        """A by-key file: its partitions' sources, each read from its first segment."""
        numbers = self._partitions_of(node.topic) if node.partition is None else [node.partition]
        sources, starts = [], []
        for number in numbers:
            part = self.catalog.partition(node.topic, number)
            bases = self.catalog.segments(part).bases
            if bases:
                sources.append(self._source(part))
                starts.append(Cursor(bases[0], 0, bases[0]))
        if not sources:
            return _nothing, None
        return functools.partial(key_lines, sources, starts, node.key, decoder=self.decoder()), (0, starts[0])

    def _resolve_offset(self, part: PartitionInfo, offset: int) -> dict | None:
        return self.daemon.call("resolve_offset", part.topic, part.partition, offset)

    def _offset_for_timestamp(self, part: PartitionInfo, timestamp: int) -> dict | None:
        return self.daemon.call("offset_for_timestamp", part.topic, part.partition, timestamp)

    def _producer(self, node: tree.Node, path: str) -> tuple:
        """(producer, start cursor) of a generated file, with what it reads pinned now: a view
        opened before retention deletes its segment reads on as if it had not (ENOENT once it has)."""
        if isinstance(node, tree.ByKey):
            return self._key_producer(node)
        if isinstance(node, tree.SchemaFile):
            return functools.partial(_once, self._schema_version(node).schema.encode()), None
        if isinstance(node, tree.GroupFile):
            answer = self._group_offsets(node.group)
            cols = answer["offsets"]  # the daemon's columns, shown a partition a row (as lookupd groups --json)
            answer["offsets"] = [dict(zip(cols, row)) for row in zip(*cols.values())]
            return functools.partial(_once, (json.dumps(answer, indent=2) + "\n").encode()), None
        part = self.catalog.partition(node.topic, node.partition)
        if isinstance(node, tree.PartitionJson):
            return functools.partial(_once, partition_json(part, self.catalog.segments(part))), None
        source = self._source(part)
        if isinstance(node, tree.SegmentFile):
            if node.suffix == "records.jsonl":
                if isinstance(source, LocalSource):
                    source.pin(node.base_offset)
                produce = functools.partial(record_lines, source, self.renders, None, None, False,
                                            decoder=self.decoder())
                return produce, Cursor(node.base_offset, 0, node.base_offset)
            active = self.catalog.segment(part, node.base_offset).active
            if node.remote:
                entries = segment_index(source.remote_segment(node.base_offset), node.disk_suffix)
            else:
                entries = read_index(part.local_dir, node.base_offset, node.disk_suffix, active)
            return functools.partial(index_lines, entries), 0
        if isinstance(node, tree.AtOffset):
            first, end = node.start, node.end
            at = self._resolve_offset(part, first)
            if at is not None and isinstance(source, LocalSource):
                source.pin(at["segment"])  # gone: the offset is below the log start now (ENOENT)
        else:
            at = self._offset_for_timestamp(part, node.start)
            first = at["offset"] if at is not None else None
            to = self._offset_for_timestamp(part, node.end) if node.end is not None and at is not None else None
            end = to["offset"] if to is not None else None
            if at is not None and isinstance(source, LocalSource):
                at = self._pin_from(source, part, at)
                first = at["offset"] if at is not None else None
            if at is None or (end is not None and end <= first):
                self._explain_empty(path, part, node)
        if at is None:  # the log end, or no record that late
            return _nothing, None
        produce = functools.partial(record_lines, source, self.renders, first, end, True, decoder=self.decoder())
        return produce, Cursor(at["segment"], at["position"], first)

    def _explain_empty(self, path: str, part: PartitionInfo, node: tree.AtTime) -> None:
        """An at-time view with no record cannot say why: the mount's log does (at INFO, at most every
        WARN_EVERY_S for a path), when its times are outside the partition's records."""
        why = outside_records(f"{part.topic}-{part.partition}", node.start, node.end,
                              self._offset_for_timestamp(part, 0), self._offset_for_timestamp(part, MAX_TIMESTAMP))
        if why is not None and self._first_in_a_while(f"empty {path}"):
            log.info("%s is empty: %s", path, why)

    def _pin_from(self, source: LocalSource, part: PartitionInfo, at: dict) -> dict | None:
        """`at`, or where the next segment starts if retention deleted its segment meanwhile
        (the records from a time on are then those of the segments that are left)."""
        segment = at["segment"]
        while True:
            try:
                source.pin(segment)
                return at
            except FileNotFoundError:
                nxt = self.catalog.segments(part).after(segment)
                if nxt is None:
                    return None
                segment = nxt.base_offset
                at = {"segment": segment, "position": 0, "offset": segment}
