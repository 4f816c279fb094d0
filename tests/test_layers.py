"""The package layout is the architecture: each layer imports only the layers below it, and the log
layer is read-only by construction. Checked on the source (every import, function-level ones too)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# What each package may import from this project (itself always allowed). Leaves first.
ALLOWED = {
    "lookupd.errors": set(),
    "lookupd.native": set(),  # the one switch between lookupd's C code and Python (LOOKUPD_PURE_PYTHON)
    "lookupd.sdnotify": set(),
    # Kafka's generated-message format (declarations and their one codec): the leaf under both the
    # internal topics' records (lookupd.format.internal) and the Kafka listener's requests (lookupd.kafka).
    "lookupd.message": set(),
    "lookupd.format": {"lookupd.errors", "lookupd.native", "lookupd.message"},
    "lookupd.log": {"lookupd.errors", "lookupd.native", "lookupd.message", "lookupd.format"},
    # The tiered-storage plugin's bytes (store, manifest, transforms, chunks, caches): a leaf under the log layer,
    # which knows nothing of Kafka's format; Kafka's side of the tiers is lookupd.log.tiered, above it.
    "lookupd.log.remote": {"lookupd.errors", "lookupd.native"},
    "lookupd.rpc": {"lookupd.errors"},
    # Kafka's wire protocol, no I/O (the daemon's Kafka listener speaks it)
    "lookupd.kafka": {"lookupd.errors", "lookupd.message"},
    "lookupd.daemon": {"lookupd.errors", "lookupd.sdnotify", "lookupd.message", "lookupd.format", "lookupd.log",
                       "lookupd.rpc", "lookupd.kafka"},
    "lookupd.tools": {"lookupd.errors", "lookupd.sdnotify", "lookupd.message", "lookupd.format", "lookupd.log",
                      "lookupd.rpc", "lookupd.daemon"},
    "fusefs": {"lookupd.errors", "lookupd.sdnotify", "lookupd.message", "lookupd.format", "lookupd.log",
               "lookupd.rpc"},
    "spark_client": {"lookupd.errors", "lookupd.message", "lookupd.format", "lookupd.log", "lookupd.rpc"},
    # The runnable examples play a broker too (lookupd's writer appends while a stream follows).
    "spark_client.examples": {"lookupd.errors", "lookupd.message", "lookupd.format", "lookupd.log", "lookupd.rpc",
                              "lookupd.tools", "spark_client"},
}
OURS = ("lookupd", "fusefs", "spark_client")


def _modules():
    for top in OURS:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


def _layer(module: str) -> str | None:
    """The ALLOWED key a module belongs to (the longest prefix), None for lookupd/__init__ and __main__."""
    best = None
    for key in ALLOWED:
        if (module == key or module.startswith(key + ".")) and (best is None or len(key) > len(best)):
            best = key
    return best


def _imports(module: str, path: Path):
    """(line, absolute module) of every import in the file, relative ones resolved."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from . import x` imports the submodule x
                yield node.lineno, f"{target}.{alias.name}"


def test_each_layer_imports_only_the_layers_below_it():
    wrong = []
    for module, path in _modules():
        mine = _layer(module)
        if mine is None:
            continue
        for line, target in _imports(module, path):
            if not target.startswith(OURS):
                continue
            theirs = _layer(target)
            if theirs is None and target.split(".")[0] in OURS and target.count(".") == 1:
                continue  # `from lookupd import X` names resolved below; the package itself re-exports lazily
            if theirs is None or theirs == mine or theirs in ALLOWED[mine] or \
                    any(theirs.startswith(layer + ".") for layer in (mine, *ALLOWED[mine])):  # a leaf under it
                continue
            wrong.append(f"{path.relative_to(REPO)}:{line} ({mine}) imports {target} ({theirs})")
    assert not wrong, "\n".join(wrong)


def _writes(call: ast.Call) -> str | None:
    """Why this call may open something for writing, or None."""
    name = ast.unparse(call.func)
    args = [ast.unparse(a) for a in call.args] + [ast.unparse(k.value) for k in call.keywords]
    text = " ".join(args)
    if name in ("open", "io.open", "builtins.open") and len(call.args) + len(call.keywords) > 1:
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        if mode is None or not isinstance(mode, ast.Constant) or set(str(mode.value)) & set("wax+"):
            return f"open mode {ast.unparse(mode) if mode is not None else '?'}"
    if name == "os.open" and any(f in text for f in ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")):
        return "os.open with write flags"
    if name.endswith("mmap") and any(f in text for f in ("ACCESS_WRITE", "PROT_WRITE", "ACCESS_DEFAULT")):
        return "writable mmap"
    if name.endswith((".write", ".truncate", "os.pwrite", "os.ftruncate", "os.rename", "os.replace", "os.unlink",
                      "os.remove")) and name.startswith("os."):
        return name
    return None


# The one module of the log layer allowed to write, and why: it keeps lookupd's own cache of remote
# segments under [remote] cache_dir (never Kafka's files, never the bucket).
WRITERS = {REPO / "lookupd" / "log" / "remote" / "diskcache.py"}


@pytest.mark.parametrize("path", sorted(set((REPO / "lookupd" / "log").rglob("*.py")) - WRITERS),
                         ids=lambda p: str(p.relative_to(REPO / "lookupd" / "log")))
def test_nothing_in_the_log_layer_opens_a_file_for_writing(path):
    tree = ast.parse(path.read_text(), str(path))
    found = [f"{path.name}:{n.lineno}: {why}" for n in ast.walk(tree)
             if isinstance(n, ast.Call) and (why := _writes(n))]
    assert not found, found


def test_the_write_check_would_see_a_write():
    code = ("open(p, 'wb'); os.open(p, os.O_RDWR); mmap.mmap(f, 0, access=mmap.ACCESS_WRITE); "
            "os.ftruncate(fd, 0); open(p, 'rb'); os.open(p, os.O_RDONLY)")
    calls = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call) and n.func is not None]
    flagged = [ast.unparse(c.func) for c in calls if _writes(c)]
    assert flagged == ["open", "os.open", "mmap.mmap", "os.ftruncate"], flagged


def test_a_client_import_stays_light():
    """`lookupd query`, the FUSE mount and Spark executors import the client: never the daemon or numpy."""
    import subprocess
    import sys

    code = ("import sys, lookupd.rpc.client, lookupd.rpc.address; "
            "print(sorted(m for m in sys.modules if m.startswith(('lookupd.daemon', 'lookupd.log', 'numpy'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_two_modules_import_each_other():
    """No import loop between modules, counting every import (function-level and TYPE_CHECKING ones too): a
    loop means neither module can be read, tested or moved without the other. A package's __init__ is left out,
    as it only hands its modules' names on."""
    modules = {name: path for name, path in _modules() if path.name != "__init__.py"}
    graph = {name: {target for _, target in _imports(name, path) if target in modules and target != name}
             for name, path in modules.items()}
    assert _cycles(graph) == []


def test_the_loop_check_would_see_a_loop():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
