"""Integration tests of CloudEvents publishing (sql/README.md, "CloudEvents"):
outbox.cloudevents = binary or structured, checked against CloudEvents 1.0,
its JSON event format and its Kafka protocol binding
(https://github.com/cloudevents/spec, cloudevents/bindings/
kafka-protocol-binding.md), and W3C Trace Context for traceparent.

Each test runs with both decoders; rows, logical messages and the backlog
must give byte-identical records. One check reads the records with
kafka-python (Debian's python3-kafka, which does not use librdkafka) as an
independent client.

Also here, with wal2json only and left to tests/run.sh's plain pass
(no_sanitizers): attack probes of a source that must be a URI-reference
and of the time of timestamps that cannot be written."""

import base64
import datetime
import json
import re
import urllib.request
import uuid

import pytest

import harness
from harness import header, wait_until

DECODERS = ("wal2json", "pgoutput")

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TS = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
CREATED = "2026-11-22 03:07:11.205762+00"
CREATED_MS = 1795316831205
# RFC 3339 (section 5.6) date-time, as the CloudEvents "time" attribute.
RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def rfc3339(ms):
    t = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (ms % 1000)


def wait_slot_active(pg, slot, timeout=30):
    def active():
        s = pg.slot(slot)
        return s is not None and s["active"]
    wait_until(active, timeout, 0.1, "slot %s active" % slot)


def insert_row(pg, eid, agg, key, payload, headers):
    """One outbox row, created at CREATED; payload and headers are JSON
    text (or None)."""
    pg.sql("INSERT INTO public.outbox (id, aggregate_type, aggregate_id, "
           "event_type, payload, headers, created_at) "
           "VALUES (%s, %s, %s, 'order.paid', %s::jsonb, %s::jsonb, %s)",
           (eid, agg, key, payload, headers, CREATED))


def emit_message(pg, text):
    pg.sql("SELECT pg_logical_emit_message(true, 'outbox', %s)", (text,))


def message_text(eid, agg, key, payload_json, headers_json):
    """A logical message's JSON object whose fields are the row's, written
    as insert_row's row renders (payload_json and headers_json are JSON
    text put in as they are)."""
    return ('{"id": "%s", "aggregate_type": "%s", "aggregate_id": "%s", '
            '"event_type": "order.paid", "payload": %s, "headers": %s, '
            '"created_at": "%s"}' % (eid, agg, key, payload_json,
                                     headers_json, CREATED))


def metric(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=5) as resp:
        body = resp.read().decode()
    m = re.search(r"^%s (\d+)$" % re.escape(name), body, re.M)
    assert m, "%s missing from /metrics" % name
    return int(m.group(1))


def ce_config(mode, port=None, **outbox):
    o = {"cloudevents": mode, "cloudevents_source": "/shop/{aggregate_type}"}
    o.update(outbox)
    cfg = {"outbox": o}
    if port is not None:
        cfg["http"] = {"listen": "127.0.0.1:%d" % port}
    return cfg


def check_binary_spec(r):
    """A binary-mode record as the Kafka binding says (3.2): every
    attribute in a ce_ header of UTF-8 text, the required ones (id, source,
    specversion 1.0, type) present and non-empty, time in RFC 3339, the
    value the event data as is with content-type as its datacontenttype."""
    ce = {k[3:]: v.decode("utf-8") for k, v in r["headers"] if k.startswith("ce_")}
    assert len(ce) == len([k for k, _ in r["headers"] if k.startswith("ce_")]), \
        "an attribute header repeats: %r" % r["headers"]
    assert ce["specversion"] == "1.0", ce
    for a in ("id", "source", "type"):
        assert ce.get(a), "required attribute %s missing or empty: %r" % (a, ce)
    assert RFC3339.match(ce["time"]), ce
    ct = [v for k, v in r["headers"] if k == "content-type"]
    assert len(ct) <= 1, r["headers"]
    return ce, (ct[0].decode() if ct else None)


def check_structured_spec(r):
    """A structured-mode record (Kafka binding 3.3 and the JSON event
    format): content-type application/cloudevents+json, a value that is one
    JSON object with the required attributes as strings, time in RFC 3339,
    at most one of data and data_base64 (the latter valid base64)."""
    assert header(r, "content-type") == b"application/cloudevents+json", r
    assert not [k for k, _ in r["headers"] if k.startswith("ce_")], r
    env = json.loads(r["value"].decode("utf-8"))
    assert env["specversion"] == "1.0", env
    for a in ("id", "source", "type"):
        assert isinstance(env.get(a), str) and env[a], (a, env)
    for a in ("subject", "time", "datacontenttype", "traceparent",
              "tracestate", "data_base64"):
        assert a not in env or (isinstance(env[a], str) and env[a]), (a, env)
    assert RFC3339.match(env["time"]), env
    assert not ("data" in env and "data_base64" in env), env
    if "data_base64" in env:
        base64.b64decode(env["data_base64"], validate=True)
    return env


def by_id(records, ce_id):
    """The records whose CloudEvents id is ce_id (binary or structured)."""
    out = []
    for r in records:
        v = header(r, "ce_id")
        if v is None and header(r, "content-type") == \
                b"application/cloudevents+json":
            v = json.loads(r["value"])["id"].encode()
        if v == ce_id.encode():
            out.append(r)
    return out


def same_record(a, b):
    for f in ("topic", "key", "value", "headers", "timestamp"):
        assert a[f] == b[f], (f, a[f], b[f])


def kafka_python_records(bootstraps, topic, n, timeout=30):
    """Reads topic from the beginning with kafka-python: [(key, value,
    [(name, bytes)])]."""
    import kafka
    c = kafka.KafkaConsumer(bootstrap_servers=bootstraps.split(","),
                            auto_offset_reset="earliest",
                            enable_auto_commit=False, group_id=None,
                            consumer_timeout_ms=1000)
    try:
        parts = wait_until(lambda: c.partitions_for_topic(topic), timeout, 0.2,
                           "kafka-python sees %s" % topic)
        c.assign([kafka.TopicPartition(topic, p) for p in parts])
        c.seek_to_beginning()
        out = []
        deadline = __import__("time").monotonic() + timeout
        while len(out) < n and __import__("time").monotonic() < deadline:
            for batch in c.poll(timeout_ms=500).values():
                for m in batch:
                    out.append((m.key, m.value, list(m.headers)))
        return out
    finally:
        c.close()


def test_binary_records_follow_the_kafka_binding(pg, broker, consumer,
                                                 outboxd_factory, slot_name,
                                                 test_id):
    """binary: the value is the payload as it is, the key the aggregate id,
    the attributes ce_ headers before the user's headers (traceparent and
    tracestate among them, as W3C headers); a logical message with the
    row's fields gives the same record; a string payload has no
    content-type; a malformed traceparent stays a header and is counted; a
    user header named ce_* or content-type dead-letters the event."""
    agg = "ce_bin_%s" % test_id
    topic = "outbox.event.%s" % agg
    broker.create_topic(topic, 4)
    port = harness.free_port()
    outboxd_factory(ce_config("binary", port))
    wait_slot_active(pg, slot_name)

    row_id, msg_id, text_id, bad_tp_id, clash_id = (
        str(uuid.uuid4()) for _ in range(5))
    key = "o-42"
    # jsonb renders keys shorter first: the message writes them that way.
    hdrs = '{"tenant": "acme", "tracestate": "%s", "traceparent": "%s"}' % (
        TS, TP)
    payload = '{"note": "\u00e9 \\"q\\"", "amount": 99.5}'
    insert_row(pg, row_id, agg, key, payload, hdrs)
    emit_message(pg, message_text(msg_id, agg, key, payload, hdrs))
    emit_message(pg, message_text(text_id, agg, key, '"plain words"', "null"))
    insert_row(pg, bad_tp_id, agg, key, '{"n": 1}',
               '{"traceparent": "00-garbage"}')
    insert_row(pg, clash_id, agg, key, '{"n": 2}', '{"ce_id": "mine"}')

    records = consumer.collect(topic, 4, timeout=40)
    assert len(records) == 4, records
    for r in records:
        check_binary_spec(r)
        assert r["key"] == key
        assert header(r, "id") is None and header(r, "type") is None, r
    row_value = pg.sql("SELECT payload::text FROM public.outbox WHERE id = %s",
                       (row_id,))[0][0].encode()

    (row,) = by_id(records, row_id)
    assert row["headers"] == [
        ("ce_specversion", b"1.0"), ("ce_id", row_id.encode()),
        ("ce_type", b"order.paid"), ("ce_source", ("/shop/" + agg).encode()),
        ("ce_subject", key.encode()), ("ce_time", rfc3339(CREATED_MS).encode()),
        ("content-type", b"application/json"), ("tenant", b"acme"),
        ("tracestate", TS.encode()), ("traceparent", TP.encode())], row
    assert row["value"] == row_value
    assert row["timestamp"] == CREATED_MS

    # The message with the row's fields: the same record but for ce_id.
    (msg,) = by_id(records, msg_id)
    msg_as_row = dict(msg, headers=[
        (k, row_id.encode() if k == "ce_id" else v) for k, v in msg["headers"]])
    for f in ("topic", "key", "value", "headers", "timestamp"):
        assert msg_as_row[f] == row[f], (f, msg_as_row[f], row[f])

    (text,) = by_id(records, text_id)
    ce, ct = check_binary_spec(text)
    assert ct is None and text["value"] == b"plain words", text

    (bad_tp,) = by_id(records, bad_tp_id)
    assert header(bad_tp, "traceparent") == b"00-garbage"
    assert metric(port, "outboxd_traceparent_malformed_total") == 1

    dlq = consumer.collect("%s.outbox.dlq" % test_id, 1, timeout=20)
    assert len(dlq) == 1, dlq
    assert header(dlq[0], "id") == clash_id.encode()
    assert b"collides" in header(dlq[0], "error")
    assert header(dlq[0], "ce_id") == b"mine"
    assert dlq[0]["value"] == b'{"n": 2}'

    # An independent client (kafka-python, no librdkafka) reads the same
    # key, value and headers.
    seen = kafka_python_records(broker.bootstraps, topic, 4)
    assert sorted((k, v, h) for k, v, h in seen) == sorted(
        (r["key"].encode(), r["value"], r["headers"]) for r in records)


def test_structured_records_follow_the_json_format(pg, broker, consumer,
                                                   outboxd_factory, slot_name,
                                                   test_id):
    """structured: the value is the JSON envelope (data the payload's JSON
    text, data_base64 for a string payload, no data for a NULL payload),
    content-type application/cloudevents+json, the key the aggregate id, the
    user's headers kept and traceparent/tracestate also envelope attributes;
    the backlog's record of a row is byte-identical to the stream's."""
    agg = "ce_st_%s" % test_id
    topic = "outbox.event.%s" % agg
    broker.create_topic(topic, 4)
    d = outboxd_factory(ce_config("structured"))
    wait_slot_active(pg, slot_name)

    row_id, text_id, tomb_id = (str(uuid.uuid4()) for _ in range(3))
    key = "c-7"
    hdrs = '{"tenant": "acme", "tracestate": "%s", "traceparent": "%s"}' % (
        TS, TP)
    insert_row(pg, row_id, agg, key, '{"amount": 99.5, "items": [1, 2]}', hdrs)
    emit_message(pg, message_text(text_id, agg, key, '"caf\u00e9 \\u0001"',
                                  "null"))
    insert_row(pg, tomb_id, agg, key, None, None)

    records = consumer.collect(topic, 3, timeout=40)
    assert len(records) == 3, records
    for r in records:
        check_structured_spec(r)
        assert r["key"] == key and r["timestamp"] == CREATED_MS

    (row,) = by_id(records, row_id)
    env = json.loads(row["value"])
    assert list(env) == ["specversion", "id", "source", "type", "subject",
                         "time", "traceparent", "tracestate",
                         "datacontenttype", "data"], env
    assert env == {
        "specversion": "1.0", "id": row_id, "source": "/shop/" + agg,
        "type": "order.paid", "subject": key, "time": rfc3339(CREATED_MS),
        "traceparent": TP, "tracestate": TS,
        "datacontenttype": "application/json",
        "data": {"amount": 99.5, "items": [1, 2]}}
    assert row["headers"] == [
        ("content-type", b"application/cloudevents+json"),
        ("tenant", b"acme"), ("tracestate", TS.encode()),
        ("traceparent", TP.encode())]

    (text,) = by_id(records, text_id)
    env = json.loads(text["value"])
    assert "data" not in env and "datacontenttype" not in env, env
    assert base64.b64decode(env["data_base64"]) == "café \x01".encode()

    (tomb,) = by_id(records, tomb_id)
    env = json.loads(tomb["value"])
    assert "data" not in env and "data_base64" not in env, env

    # The backlog maps the same row to the same bytes. With the slot
    # dropped under its marker row, on_slot_lost = halt lets the operator's
    # backlog run (recover would judge the loss, and halt on the message).
    d.stop()
    pg.drop_slot(slot_name)
    cfg = ce_config("structured", backlog_where="id = '%s'" % row_id)
    cfg["postgres"] = {"on_slot_lost": "halt"}
    outboxd_factory(cfg)
    again = consumer.collect(topic, 4, timeout=40)
    copies = by_id(again, row_id)
    assert len(copies) == 2, again
    same_record(copies[0], copies[1])


def test_inbox_stores_cloudevents_like_plain_records(request, pg, broker,
                                                     consumer, test_id,
                                                     tmp_path):
    """`outboxd inbox` stores CloudEvents records, produced as the Kafka
    binding says by another client, in the columns of a plain record: a
    binary one's ce_id and ce_type stand in for the id and type headers, a
    structured one gives id, type and payload from its envelope (data as
    JSON, data_base64 decoded); an envelope that does not read is
    dead-lettered."""
    from confluent_kafka import Producer
    from test_inbox import InboxEnv

    env = InboxEnv(pg, broker, test_id, tmp_path)
    request.node._outboxd_instances = env.instances
    p = Producer({"bootstrap.servers": broker.bootstraps, "log_level": 3})
    ids = [str(uuid.uuid4()) for _ in range(4)]
    ct = ("content-type", b"application/cloudevents+json")

    def envelope(eid, **data):
        e = {"specversion": "1.0", "id": eid, "source": "/shop/order",
             "type": "order.paid", "time": rfc3339(CREATED_MS)}
        e.update(data)
        return json.dumps(e).encode()

    p.produce(env.topic, key=b"o-1", value=b'{"amount": 1}', headers=[
        ("ce_specversion", b"1.0"), ("ce_id", ids[0].encode()),
        ("ce_type", b"order.paid"), ("ce_source", b"/shop/order"),
        ("content-type", b"application/json"), ("traceparent", TP.encode())])
    p.produce(env.topic, key=b"o-2", headers=[ct, ("tenant", b"acme")],
              value=envelope(ids[1], datacontenttype="application/json",
                             data={"amount": 2}))
    p.produce(env.topic, key=b"o-3", headers=[ct], value=envelope(
        ids[2], data_base64=base64.b64encode(b"\x00\xffraw").decode()))
    p.produce(env.topic, key=b"o-4", headers=[ct], value=envelope(ids[3]))
    p.produce(env.topic, key=b"o-5", headers=[ct], value=b'{"id": 5}')
    p.flush(10)
    try:
        env.start()
        env.wait_consumed()
        rows = {r[0]: r[1:] for r in env.sql(
            "SELECT id, key, type, payload, payload_raw, headers "
            "FROM public.inbox")}
    finally:
        env.stop_all()
    assert set(rows) == set(ids), rows
    assert rows[ids[0]][:4] == ("o-1", "order.paid", {"amount": 1}, None)
    assert rows[ids[0]][4]["ce_id"] == ids[0]
    assert rows[ids[1]][:4] == ("o-2", "order.paid", {"amount": 2}, None)
    assert rows[ids[1]][4] == {
        "content-type": "application/cloudevents+json", "tenant": "acme"}
    assert rows[ids[2]][2] is None
    assert bytes(rows[ids[2]][3]) == b"\x00\xffraw"
    assert rows[ids[3]][2:4] == (None, None)
    dlq = consumer.collect(env.dlq_topic, 1, timeout=20)
    assert len(dlq) == 1 and b"bad-cloudevent" in header(dlq[0], "error"), dlq


# RFC 3986 URI-reference characters: unreserved, reserved, and %HH.
_URI_REF = re.compile(
    r"^(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})+$")


@pytest.mark.decoders("wal2json")
@pytest.mark.no_sanitizers
def test_cloudevents_source_is_a_uri_reference(pg, broker, consumer,
                                               outboxd_factory, slot_name,
                                               test_id):
    """CloudEvents 1.0: source MUST be a non-empty URI-reference (RFC
    3986). The README calls cloudevents_source "a URI-reference template";
    a {column} whose text holds a space, a '%' or a '"' is put in as it is,
    so the published ce_source is not a URI-reference. The substituted text
    must be percent-encoded (or the event made bad), never published as an
    invalid source."""
    agg = "ce_src_%s" % test_id
    topic = "outbox.event.%s" % agg
    broker.create_topic(topic, 4)
    outboxd_factory(ce_config("binary",
                              cloudevents_source="/shop/{aggregate_id}"))
    wait_slot_active(pg, slot_name)
    eid = str(uuid.uuid4())
    insert_row(pg, eid, agg, 'order 42 "50%"', '{"n": 1}', None)
    records = consumer.collect(topic, 1, timeout=40)
    if records:
        src = header(records[0], "ce_source").decode()
        assert _URI_REF.match(src), "ce_source %r is not a URI-reference" % src
    else:  # made bad instead: it must be dead-lettered, not lost
        dlq = consumer.collect("%s.outbox.dlq" % test_id, 1, timeout=20)
        assert [header(r, "id") for r in dlq] == [eid.encode()], dlq


@pytest.mark.decoders("wal2json")
@pytest.mark.no_sanitizers
def test_cloudevents_time_of_unwritable_timestamps(pg, broker, consumer,
                                                   outboxd_factory, slot_name,
                                                   test_id):
    """README: the CloudEvents `time` is the record timestamp, from
    timestamp_column (created_at), and only without one the commit time.
    A created_at RFC 3339 cannot write ('infinity', year 12000) makes a
    bigint timestamp a bad event (bad-cloudevent), but a timestamptz one is
    silently replaced by the commit time: the published ce_time states a
    time the event does not have. Such an event must be dead-lettered (as
    for a bigint), not published with another time."""
    agg = "ce_time_%s" % test_id
    topic = "outbox.event.%s" % agg
    broker.create_topic(topic, 4)
    outboxd_factory(ce_config("binary"))
    wait_slot_active(pg, slot_name)
    ids = [str(uuid.uuid4()) for _ in range(2)]
    for eid, when in zip(ids, ("infinity", "12000-01-01 00:00:00+00")):
        pg.sql("INSERT INTO public.outbox (id, aggregate_type, aggregate_id, "
               "event_type, payload, headers, created_at) VALUES "
               "(%s, %s, 'o-1', 'order.paid', '{}', NULL, %s)",
               (eid, agg, when))
    published = consumer.collect(topic, 2, timeout=20)
    assert published == [], [(header(r, "ce_id"), header(r, "ce_time"))
                             for r in published]
    dlq = consumer.collect("%s.outbox.dlq" % test_id, 2, timeout=20)
    assert sorted(header(r, "id") for r in dlq) == sorted(
        e.encode() for e in ids), dlq
