"""One method table (lookupd.rpc.methods): a method added as a row there, with its handler, is served with
its params checked, run where its row says, and under the [[acl]] rules its row names, with nothing else
edited; a row with no handler, or a handler with no row, is refused."""

from __future__ import annotations

import numpy as np
import pytest

from test_service import service  # noqa: F401 - fixture (its LogManager over the reference corpus)
from lookupd.daemon import service as service_module
from lookupd.daemon.acl import Acl
from lookupd.daemon.service import HANDLERS, NEEDS_THREAD, Service, Session, bind, compact_targets
from lookupd.errors import LookupdError
from lookupd.rpc import methods
from lookupd.rpc.methods import READ, THREAD, TOPIC, Access, MethodSpec

TRUSTED = Session(trusted=True)
# CN=reader may read `plain`; CN=viewer may only describe it.
RULES = [{"principal": "CN=reader", "topics": ["plain"], "operations": ["describe", "read"]},
         {"principal": "CN=viewer", "topics": ["plain"], "operations": ["describe"]}]


def _segment_bases(s: Service, p: list) -> list:
    """The dummy: the base offsets of the partition's segments at or above each target."""
    bases = [seg["base_offset"] for seg in s.manager.get(p[0], p[1]).segments_info()]
    return [[b for b in bases if b >= int(t)] for t in p[2]]


@pytest.fixture(scope="module")
def table():
    """The service's methods with one more, added as a row of a copy of the table and its handler."""
    rows = dict(methods.METHODS)
    rows["segment_bases"] = MethodSpec(("topic", "partition", "offsets"), THREAD, (Access(READ, TOPIC),),
                                       targets="offsets")
    return bind(rows, {**HANDLERS, "segment_bases": _segment_bases})


@pytest.fixture(scope="module")
def manager(service):  # noqa: F811
    return service.manager


def _code(svc: Service, name: str, params: list, session: Session) -> tuple[str, str]:
    with pytest.raises(LookupdError) as e:
        svc.call(name, params, session)
    return e.value.code, str(e.value)


def test_a_method_added_to_the_table_is_served_under_its_acl(table, manager, monkeypatch):
    monkeypatch.setattr(service_module, "METHODS", table)
    svc = Service(manager, acl=Acl.from_config(RULES))
    reader = Session(trusted=False, authenticated=True, principal="CN=reader")
    viewer = Session(trusted=False, authenticated=True, principal="CN=viewer")
    want = [[b for b in (seg["base_offset"] for seg in manager.get("plain", 0).segments_info()) if b >= 0]]
    assert svc.call("segment_bases", ["plain", 0, [0]], reader) == want
    # its row's access: READ on the topic of its first param
    assert _code(svc, "segment_bases", ["plain", 0, [0]], viewer) == \
        ("UNAUTHORIZED", "CN=viewer may not read topic 'plain': no [[acl]] rule allows it")
    assert _code(svc, "segment_bases", ["large", 0, [0]], reader)[0] == "UNAUTHORIZED"
    # its params: counted and named as the other methods' are
    assert _code(svc, "segment_bases", ["plain", 0], reader) == \
        ("INVALID_ARGUMENT", "segment_bases takes 3 params (topic, partition, offsets), got 2")
    # where it runs: THREAD, never on the event loop
    assert svc.call_inline("segment_bases", ["plain", 0, [0]], reader) is NEEDS_THREAD
    # its first param is a topic: a mistyped one gets the same hint as every topic method's
    code, message = _code(Service(manager), "segment_bases", ["plian", 0, [0]], TRUSTED)
    assert code == "UNKNOWN_PARTITION" and message.endswith("; nearest topics: plain")
    # a long list of targets waits for its thread as an array, as the columnar methods' do
    params = ["plain", 0, list(range(2000))]
    compact_targets("segment_bases", params)
    assert isinstance(params[2], np.ndarray) and params[2].dtype == np.int64
    # and the methods already there are unchanged
    assert svc.call("ping", [], viewer) == "pong"


def test_the_shipped_table_is_what_the_service_serves():
    assert service_module.METHODS.keys() == methods.METHODS.keys() == methods.PARAMS.keys()
    assert all(m.spec is methods.METHODS[name] for name, m in service_module.METHODS.items())


def test_a_row_without_a_handler_or_a_handler_without_a_row_is_refused():
    rows = {**methods.METHODS, "orphan": MethodSpec((), THREAD)}
    with pytest.raises(ValueError, match=r"no handler for \['orphan'\], no row for \[\]"):
        bind(rows, HANDLERS)
    with pytest.raises(ValueError, match=r"no handler for \[\], no row for \['stray'\]"):
        bind(methods.METHODS, {**HANDLERS, "stray": _segment_bases})


def test_a_row_is_checked_when_it_is_written():
    with pytest.raises(ValueError, match="runs must be one of"):
        MethodSpec((), "sometimes")
    with pytest.raises(ValueError, match="access on the topic of the first param"):
        MethodSpec(("group",), THREAD, (Access(READ, TOPIC),))
    with pytest.raises(ValueError, match="unknown access"):
        MethodSpec(("topic",), THREAD, (Access("write", TOPIC),))
