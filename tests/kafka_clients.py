"""Real Kafka clients against lookupd's Kafka listener, one process per call (tests/test_kafka_*.py run it).

    python kafka_clients.py CLIENT BOOTSTRAP COMMAND ARGS...

CLIENT is confluent (librdkafka), kafka-python or aiokafka; the answer is one JSON document on stdout.
Records are compared by digest: sha256 over a JSON list of [offset, timestamp, key hex, value hex,
[[header key, value hex]...]] in consumption order (`digest`, shared with the tests' own reader).

Commands:
  consume ISOLATION TOPIC:PARTITION:START:END...  every record from START (the log start) until the position reaches END
  times TOPIC PARTITION TS,TS,...            offsets_for_times for each timestamp
  produce TOPIC                              one produce; the error the client reports
  follow TOPIC PARTITION COUNT SECONDS       consume from the earliest until COUNT records or SECONDS pass
  group GROUP TOPIC COUNT SECONDS            subscribe in GROUP for SECONDS, consuming COUNT records at most;
                                             commit; report the partitions assigned, the records' (partition,
                                             offset) and (confluent) the offsets committed
Options (after COMMAND's arguments): ssl CAFILE CERT KEY, sasl USER PASSWORD.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time


def canonical(offset, timestamp, key, value, headers) -> list:
    timestamp = -1 if timestamp is None else timestamp  # no timestamp (magic 0): None in kafka-python and aiokafka
    return [offset, timestamp, None if key is None else bytes(key).hex(), None if value is None else bytes(value).hex(),
            [[k if isinstance(k, str) else k.decode(), None if v is None else bytes(v).hex()] for k, v in (headers or ())]]


def digest(records: list) -> str:
    return hashlib.sha256(json.dumps(records, separators=(",", ":")).encode()).hexdigest()


def _confluent_record(m) -> list:
    kind, ts = m.timestamp()
    return canonical(m.offset(), -1 if kind == 0 else ts, m.key(), m.value(), m.headers())  # 0: not available


def _summary(records: list) -> dict:
    return {"count": len(records), "digest": digest(records), "head": records[:3], "tail": records[-3:]}


def _options(args: list[str]) -> dict:
    out = {}
    while args:
        kind = args.pop(0)
        if kind == "ssl":
            out["ssl"] = (args.pop(0), args.pop(0), args.pop(0))
        elif kind == "sasl":
            out["sasl"] = (args.pop(0), args.pop(0))
    return out


# ---------------------------------------------------------------------- confluent-kafka (librdkafka)


def _confluent_config(bootstrap: str, opts: dict, **extra) -> dict:
    conf = {"bootstrap.servers": bootstrap, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "group.id": extra.pop("group", "lookupd-tests")}
    if "ssl" in opts:
        ca, cert, key = opts["ssl"]
        conf.update({"security.protocol": "SASL_SSL" if "sasl" in opts else "SSL", "ssl.ca.location": ca,
                     "ssl.endpoint.identification.algorithm": "none"})
        if cert != "-":
            conf.update({"ssl.certificate.location": cert, "ssl.key.location": key})
    if "sasl" in opts:
        if "ssl" not in opts:
            conf["security.protocol"] = "SASL_PLAINTEXT"
        conf.update({"sasl.mechanism": "PLAIN", "sasl.username": opts["sasl"][0], "sasl.password": opts["sasl"][1]})
    conf.update(extra)
    return conf


def confluent(bootstrap: str, command: str, args: list[str]) -> object:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    if command == "produce":
        topic, opts = args[0], _options(args[1:])
        conf = {k: v for k, v in _confluent_config(bootstrap, opts).items()
                if not k.startswith(("enable.auto", "auto.offset", "group."))}
        p = Producer({**conf, "message.timeout.ms": 10000})
        errors = []
        p.produce(topic, b"value", on_delivery=lambda err, msg: errors.append(str(err)))
        p.flush(15)
        return {"errors": errors}
    if command == "consume":
        isolation, rest = args[0], args[1:]
        targets = [a for a in rest if a.count(":") == 3]
        opts = _options([a for a in rest if a not in targets])
        reported = []  # errors librdkafka reports outside messages (a topic Metadata refused, a failed login)
        c = Consumer(_confluent_config(bootstrap, opts, **{"isolation.level": isolation,
                                                           "error_cb": lambda err: reported.append(str(err))}))
        out = {}
        try:
            for target in targets:
                topic, part, start, end = target.split(":")
                tp = TopicPartition(topic, int(part), -2)  # OFFSET_BEGINNING
                c.assign([tp])
                records, deadline = [], time.monotonic() + 60
                while int(start) < int(end) and time.monotonic() < deadline and not reported:
                    pos = c.position([TopicPartition(topic, int(part))])[0].offset
                    if pos >= int(end):
                        break
                    for m in c.consume(10000, timeout=0.5):
                        if m.error():
                            raise KafkaException(m.error())
                        records.append(_confluent_record(m))
                out[target] = _summary(records)
        except KafkaException as err:
            reported.append(str(err))
        finally:
            c.close()
        if reported:
            out["error"] = "; ".join(reported)
        return out
    if command == "times":
        topic, part, stamps = args[0], int(args[1]), [int(x) for x in args[2].split(",")]
        c = Consumer(_confluent_config(bootstrap, _options(args[3:])))
        try:
            out = []
            for ts in stamps:  # one partition once a request: the same partition twice is not a question Kafka takes
                found = c.offsets_for_times([TopicPartition(topic, part, ts)], timeout=20)[0]
                if found.error:
                    raise KafkaException(found.error)
                out.append(found.offset)
            return out
        finally:
            c.close()
    if command == "follow":
        topic, part, count, seconds = args[0], int(args[1]), int(args[2]), float(args[3])
        c = Consumer(_confluent_config(bootstrap, _options(args[4:]), **{"fetch.wait.max.ms": 200}))
        c.assign([TopicPartition(topic, part, -2)])
        records, deadline = [], time.monotonic() + seconds
        try:
            while len(records) < count and time.monotonic() < deadline:
                for m in c.consume(1000, timeout=0.2):
                    if not m.error():
                        records.append(_confluent_record(m))
        finally:
            c.close()
        return _summary(records)
    if command == "group":
        group, topic, count, seconds = args[0], args[1], int(args[2]), float(args[3])
        errors: list[str] = []
        c = Consumer(_confluent_config(bootstrap, _options(args[4:]), group=group, **{
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range",
            "enable.auto.offset.store": False, "error_cb": lambda err: errors.append(str(err))}))
        c.subscribe([topic])
        seen, deadline, done = [], time.monotonic() + seconds, None

        def settle() -> dict:  # commit what was counted under the assignment it was counted in
            if seen:
                c.commit(asynchronous=False)
            return {"assigned": sorted(tp.partition for tp in c.assignment()),
                    "committed": {tp.partition: tp.offset for tp in c.committed(c.assignment(), timeout=10)}}
        try:
            # Members stay for the whole time, so the others' assignment holds; each settles as soon as it has
            # counted `count` records, before a member leaving first revokes its partitions (and its stored offsets).
            while time.monotonic() < deadline:
                if len(seen) >= count:
                    c.pause(c.assignment())
                    if done is None:
                        done = settle()
                for m in c.consume(100, timeout=0.2):
                    if m.error():
                        errors.append(str(m.error()))
                    elif len(seen) < count:
                        seen.append([m.partition(), m.offset()])
                        c.store_offsets(m)  # what is committed is what was counted
            if done is None:
                done = settle()
        finally:
            c.close()
        return {**done, "seen": seen, "errors": errors}
    raise SystemExit(f"unknown command {command}")


# ---------------------------------------------------------------------- kafka-python


def kafka_python(bootstrap: str, command: str, args: list[str]) -> object:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError

    def consumer(opts: dict, **extra):
        kw = {"bootstrap_servers": bootstrap, "enable_auto_commit": False, "auto_offset_reset": "earliest"}
        if "ssl" in opts:
            ca, cert, key = opts["ssl"]
            kw.update(security_protocol="SSL", ssl_cafile=ca, ssl_check_hostname=False)
            if cert != "-":
                kw.update(ssl_certfile=cert, ssl_keyfile=key)
        if "sasl" in opts:
            kw.update(security_protocol="SASL_SSL" if "ssl" in opts else "SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                      sasl_plain_username=opts["sasl"][0], sasl_plain_password=opts["sasl"][1])
        kw.update(extra)
        return KafkaConsumer(**kw)

    if command == "produce":
        p = KafkaProducer(bootstrap_servers=bootstrap, retries=0, request_timeout_ms=10000)
        try:
            p.send(args[0], b"value").get(timeout=15)
            return {"errors": []}
        except KafkaError as err:
            return {"errors": [f"{type(err).__name__}: {err}"]}
        finally:
            p.close(timeout=5)
    if command == "consume":
        isolation, rest = args[0], args[1:]
        targets = [a for a in rest if a.count(":") == 3]
        c = consumer(_options([a for a in rest if a not in targets]), isolation_level=isolation)
        out = {}
        for target in targets:
            topic, part, start, end = target.split(":")
            tp = TopicPartition(topic, int(part))
            c.assign([tp])
            c.seek_to_beginning(tp)
            records, deadline = [], time.monotonic() + 60
            while int(start) < int(end) and c.position(tp) < int(end) and time.monotonic() < deadline:
                for batch in c.poll(timeout_ms=500, max_records=10000).values():
                    records.extend(canonical(m.offset, m.timestamp, m.key, m.value, m.headers) for m in batch)
            out[target] = _summary(records)
        c.close()
        return out
    if command == "times":
        topic, part, stamps = args[0], int(args[1]), [int(x) for x in args[2].split(",")]
        c = consumer(_options(args[3:]))
        tp = TopicPartition(topic, part)
        answers = [c.offsets_for_times({tp: ts})[tp] for ts in stamps]
        c.close()
        return [-1 if a is None else a.offset for a in answers]
    if command == "group":
        group, topic, count, seconds = args[0], args[1], int(args[2]), float(args[3])
        c = consumer(_options(args[4:]), group_id=group, session_timeout_ms=6000, heartbeat_interval_ms=500)
        c.subscribe([topic])
        seen, deadline = [], time.monotonic() + seconds
        while len(seen) < count and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=200, max_records=100).values():
                seen.extend([m.partition, m.offset] for m in batch)
        assigned = sorted(tp.partition for tp in c.assignment())
        if seen:
            c.commit()
        c.close()
        return {"assigned": assigned, "seen": seen}
    raise SystemExit(f"unknown command {command}")


# ---------------------------------------------------------------------- aiokafka


def aiokafka(bootstrap: str, command: str, args: list[str]) -> object:
    return asyncio.run(_aiokafka(bootstrap, command, args))


async def _aiokafka(bootstrap: str, command: str, args: list[str]) -> object:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.errors import KafkaError

    if command == "produce":
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        await p.start()
        try:
            await p.send_and_wait(args[0], b"value")
            return {"errors": []}
        except KafkaError as err:
            return {"errors": [f"{type(err).__name__}: {err}"]}
        finally:
            await p.stop()
    if command == "consume":
        isolation, targets = args[0], args[1:]
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                             isolation_level=isolation)
        await c.start()
        out = {}
        try:
            for target in targets:
                topic, part, start, end = target.split(":")
                tp = TopicPartition(topic, int(part))
                c.assign([tp])
                await c.seek_to_beginning(tp)
                records, deadline = [], time.monotonic() + 60
                while int(start) < int(end) and await c.position(tp) < int(end) and time.monotonic() < deadline:
                    for batch in (await c.getmany(tp, timeout_ms=500, max_records=10000)).values():
                        records.extend(canonical(m.offset, m.timestamp, m.key, m.value, m.headers) for m in batch)
                out[target] = _summary(records)
        finally:
            await c.stop()
        return out
    if command == "times":
        topic, part, stamps = args[0], int(args[1]), [int(x) for x in args[2].split(",")]
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        tp = TopicPartition(topic, part)
        try:
            answers = [(await c.offsets_for_times({tp: ts}))[tp] for ts in stamps]
        finally:
            await c.stop()
        return [-1 if a is None else a.offset for a in answers]
    if command == "group":
        group, topic, count, seconds = args[0], args[1], int(args[2]), float(args[3])
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
        await c.start()
        seen, deadline = [], time.monotonic() + seconds
        try:
            while len(seen) < count and time.monotonic() < deadline:
                for batch in (await c.getmany(timeout_ms=200, max_records=100)).values():
                    seen.extend([m.partition, m.offset] for m in batch)
            assigned = sorted(tp.partition for tp in c.assignment())
            if seen:
                await c.commit()
        finally:
            await c.stop()
        return {"assigned": assigned, "seen": seen}
    raise SystemExit(f"unknown command {command}")


CLIENTS = {"confluent": confluent, "kafka-python": kafka_python, "aiokafka": aiokafka}

if __name__ == "__main__":
    client, bootstrap, command, *rest = sys.argv[1:]
    print(json.dumps(CLIENTS[client](bootstrap, command, rest)))
