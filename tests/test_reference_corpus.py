"""The reference corpus ships in the repository: its archive unpacks to every partition and answer the tests use."""

from __future__ import annotations

import os

import reference as R


def test_the_archive_unpacks_to_the_whole_corpus(tmp_path):
    dest = R.unpack(R.ARCHIVE, tmp_path / "kafka-reference")
    assert sorted(os.listdir(dest / "logs")) == sorted(R.PARTITIONS)
    assert sorted(os.listdir(dest / "answers")) == sorted([f"{p}.json" for p in R.PARTITIONS] + ["_run.json"])
    for partition in R.PARTITIONS:
        assert any(name.endswith(".log") for name in os.listdir(dest / "logs" / partition)), partition
    # The active segments keep Kafka's preallocated index length (a zero-filled tail), as a broker leaves them.
    active = max(n for n in os.listdir(dest / "logs" / "plain-0") if n.endswith(".index"))
    with open(dest / "logs" / "plain-0" / active, "rb") as f:
        index = f.read()
    assert len(index) % 8 == 0 and index.endswith(bytes(4096)), len(index)


def test_unpacking_again_keeps_what_is_there_and_a_changed_corpus_is_replaced(tmp_path):
    dest = R.unpack(R.ARCHIVE, tmp_path / "kafka-reference")
    marker = dest / "logs" / "kept"
    marker.write_text("")
    R.unpack.cache_clear()
    R.unpack(R.ARCHIVE, dest)
    assert marker.exists()  # same archive: nothing unpacked again
    (dest / R.STAMP).write_text("another archive")
    R.unpack.cache_clear()
    R.unpack(R.ARCHIVE, dest)
    assert not marker.exists() and (dest / "logs" / "plain-0").is_dir()
    assert [n for n in os.listdir(tmp_path) if n != "kafka-reference"] == []  # no temporary dirs left behind


def test_the_tests_use_the_repositorys_copy_unless_told_otherwise():
    if not os.environ.get("KAFKA_REFERENCE"):
        assert R.ROOT == R.UNPACKED and (R.LOGS / "plain-0").is_dir()
