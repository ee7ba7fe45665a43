"""Attack probes of `outboxd inbox` and its CloudEvents reading (sql/README.md,
"Inbox", "CloudEvents"): inputs the other suites do not send.

The helpers and the inbox_env fixture are test_inbox.py's."""

import base64
import json
import time

from harness import wait_until
from test_inbox import Feed, inbox_env

__all__ = ["inbox_env"]  # the fixture, used by name

CT = ("content-type", b"application/cloudevents+json")


def _nested(depth):
    return b"[" * depth + b"1" + b"]" * depth


def test_inbox_deep_json_is_payload(inbox_env, broker):
    """README ("JSON is what jsonb takes"): nesting up to 10000 deep is
    payload (jsonb); only deeper goes to payload_raw. A value 3000 deep
    (jsonb takes it) must be payload."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    value = _nested(3000)
    feed.send(key=b"d", value=value, event_id="deep-3000")
    feed.flush()
    env.start()
    wait_until(lambda: env.rows() == 1, 30, 0.2)
    got = env.sql("SELECT payload IS NOT NULL, payload_raw IS NULL FROM "
                  "public.inbox WHERE id = 'deep-3000'")[0]
    # jsonb itself takes the value:
    env.sql("SELECT %s::jsonb IS NOT NULL", (value.decode(),))
    assert got == (True, True), "3000-deep JSON stored in payload_raw"


def _envelope(eid, **extra):
    e = {"specversion": "1.0", "id": eid, "source": "/shop/order",
         "type": "order.paid"}
    e.update(extra)
    return e


def test_inbox_structured_cloudevent_escaped_base64_is_stored(inbox_env,
                                                              broker):
    """A structured CloudEvent whose data_base64 string writes '/' as the
    JSON escape '\\/' (PHP's json_encode, Jackson with ESCAPE_FORWARD_SLASHES
    and others do) is the same JSON string: a valid event, to be stored
    with its decoded bytes, not dead-lettered as bad-cloudevent."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    raw = b"\xff\xff\xff\x00"           # base64 "////AA=="
    b64 = base64.b64encode(raw).decode()
    assert "/" in b64
    text = json.dumps(_envelope("esc-b64", data_base64=b64))
    text = text.replace("/", "\\/")     # valid JSON, same strings
    assert json.loads(text)["data_base64"] == b64
    feed.send(key=b"e", value=text.encode(), headers=[CT], with_id=False)
    feed.flush()
    d = env.start()
    env.wait_consumed()
    rows = env.sql("SELECT id, type, payload_raw FROM public.inbox")
    assert d.running()
    assert len(rows) == 1, ("valid structured CloudEvent dead-lettered",
                            d.log_tail())
    assert rows[0][0] == "esc-b64" and rows[0][1] == "order.paid"
    assert bytes(rows[0][2]) == raw


def test_inbox_structured_cloudevent_deep_data_is_stored(inbox_env, broker):
    """A structured CloudEvent whose data is JSON 300 deep (well within
    what jsonb and the README's 10000 take) is a valid event: stored with
    data as payload, not dead-lettered as bad-cloudevent."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    data = json.loads(_nested(300))
    value = json.dumps(_envelope("deep-ce", data=data)).encode()
    feed.send(key=b"e", value=value, headers=[CT], with_id=False)
    feed.flush()
    d = env.start()
    env.wait_consumed()
    rows = env.sql("SELECT id, payload IS NOT NULL FROM public.inbox")
    assert d.running()
    assert rows == [("deep-ce", True)], ("deep data dead-lettered",
                                          d.log_tail())


def _readyz(port):
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port,
                                    timeout=5) as r:
            return r.status, r.read().decode().strip()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode().strip()


def test_inbox_unstarted_partitions_are_not_ready(inbox_env, broker):
    """Records wait in Kafka but the inbox cannot start its partitions
    (the group coordinator keeps failing OffsetFetch, so the position check
    at assignment never completes): nothing is stored. README: /readyz says
    `stalled` when records wait and none was stored for
    http.stall_after_ms, and outboxd_inbox_lag_records counts the records
    past the stored positions. Neither may claim all is well."""
    import harness
    from test_inbox import metrics
    env = inbox_env()
    feed = Feed(broker, env.topic)
    feed.events(40)
    feed.flush()
    port = harness.free_port()
    broker.cmd("error 9 COORDINATOR_LOAD_IN_PROGRESS 100000")
    try:
        d = env.start(http_listen="127.0.0.1:%d" % port,
                      http_stall_after_ms=1500)
        d.wait_log(r"could not read the group's committed offsets", 60)
        time.sleep(6)
        assert env.rows() == 0 and env.stored() == {}
        status, word = _readyz(port)
        lag = metrics(port).get("outboxd_inbox_lag_records")
    finally:
        broker.cmd("clear 9")
    assert (status, word) == (503, "stalled"), (status, word, lag)
    assert lag and lag > 0, lag
    env.wait_consumed()  # and it catches up once the coordinator answers


def test_inbox_bad_record_near_size_limit_does_not_block(inbox_env, broker,
                                                         consumer):
    """A bad record (no id header) whose value is just under the client's
    message.max.bytes (1000000) was accepted by the broker; its dead letter
    adds the error and source-* headers and so no longer fits. README:
    "Bad records never block a partition" -- outboxd must not exit (and
    crash-loop on the same record at every start); the publisher sends such
    a dead letter in its headers-only form, the inbox should too. The good
    record after it must be stored."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    feed.send(key=b"big", value=b"x" * 999900, with_id=False)
    ids = [feed.send(key=b"big", value=b"{}")]   # same key: same partition
    feed.flush()
    d = env.start()
    deadline = time.time() + 40
    while time.time() < deadline and d.running() and env.rows() < 1:
        time.sleep(0.2)
    assert d.running(), ("inbox exited on a bad record too large to "
                         "dead-letter", d.log_tail())
    wait_until(lambda: env.rows() == 1, 30, 0.2)
    assert [r[0] for r in env.sql("SELECT id FROM public.inbox")] == ids
    dlq = consumer.collect(env.dlq_topic, min_count=1, timeout=30)
    assert len(dlq) == 1


def test_binary_cloudevents_with_id_header_member_reach_the_inbox(
        pg, broker, consumer, outboxd_factory, slot_name, test_id,
        inbox_env):
    """outboxd run (cloudevents = binary) into outboxd inbox: every event
    must become its own row under its CloudEvents id. In binary mode the
    plain `id` and `type` headers give way to ce_id/ce_type, but a
    headers-object member named `id` (allowed: in plain mode it follows
    outboxd's own id header, which the inbox reads first) is still
    published as an `id` header; the inbox then takes that header for the
    row id instead of ce_id. Two events whose headers say {"id": "corr-1"}
    become one row: the second is counted a duplicate and lost."""
    import uuid
    from test_cloudevents import ce_config, insert_row, wait_slot_active
    agg = "ce_idhdr_%s" % test_id
    topic = "outbox.event.%s" % agg
    broker.create_topic(topic, 4)
    outboxd_factory(ce_config("binary"))
    wait_slot_active(pg, slot_name)
    ids = [str(uuid.uuid4()) for _ in range(2)]
    for i, eid in enumerate(ids):
        insert_row(pg, eid, agg, "o-%d" % i, '{"n": %d}' % i,
                   '{"id": "corr-1", "type": "audit"}')
    records = consumer.collect(topic, 2, timeout=40)
    assert len(records) == 2, records
    env = inbox_env()
    env.start(inbox_topics=topic)
    deadline = time.time() + 40
    while time.time() < deadline and env.rows() < 2:
        time.sleep(0.3)
    time.sleep(2)
    rows = sorted(env.sql("SELECT id, type FROM public.inbox"))
    assert rows == sorted((eid, "order.paid") for eid in ids), rows


def test_inbox_readyz_without_statistics(inbox_env, broker):
    """[kafka] statistics.interval.ms is one of outboxd's overridable
    defaults (deploy/README.md, "Configuration reference"); 0 is librdkafka's own
    default. With it the inbox stores every record, yet /readyz must not
    claim `kafka-down` (nor outboxd_kafka_connected 0) while it consumes
    from a healthy broker."""
    import harness
    env = inbox_env()
    feed = Feed(broker, env.topic)
    ids = feed.events(20)
    feed.flush()
    port = harness.free_port()
    env.start(http_listen="127.0.0.1:%d" % port,
              **{"kafka_statistics.interval.ms": 0})
    env.wait_consumed()
    assert env.rows() == len(ids)
    time.sleep(2)
    assert _readyz(port) == (200, "ready")


# RFC 3986 URI-reference characters: unreserved, reserved, and %HH.
_URI_REF = __import__("re").compile(
    r"^(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})+$")


def test_cloudevents_source_is_a_uri_reference(pg, broker, consumer,
                                               outboxd_factory, slot_name,
                                               test_id):
    """CloudEvents 1.0: source MUST be a non-empty URI-reference (RFC
    3986). The README calls cloudevents_source "a URI-reference template";
    a {column} whose text holds a space, a '%' or a '"' is put in as it is,
    so the published ce_source is not a URI-reference. The substituted text
    must be percent-encoded (or the event made bad), never published as an
    invalid source."""
    import uuid
    from test_cloudevents import ce_config, insert_row, wait_slot_active
    from harness import header
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
    import uuid
    from test_cloudevents import ce_config, wait_slot_active
    from harness import header
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


def test_inbox_records_expired_during_a_database_failure_are_not_skipped(
        inbox_env, broker):
    """The database fails every transaction for a while (a trigger raising
    an exception: retried, not a bad record). Meanwhile records expire (the
    test broker drops a partition's oldest batches past 5 MB) so that the
    stored position falls below the low watermark. After the failure the
    inbox seeks back to the stored position, which the broker no longer
    holds, and auto.offset.reset silently moves it to the low watermark:
    the expired records are skipped without the check that runs at
    assignment (README: "no record is skipped without the operator being
    told"; a stored position below the low watermark is a mismatch, halt
    by default). The inbox must stop with the mismatch (or store every
    record), not move on as if nothing was lost."""
    import re
    env = inbox_env()
    topic = "%s.one" % env.topic
    broker.create_topic(topic, 1)
    feed = Feed(broker, topic)
    feed.send(key=b"k", value=b"{}")
    feed.flush()
    d = env.start(inbox_topics=topic)
    wait_until(lambda: env.sql("SELECT next_offset FROM "
                               "public.outboxd_inbox_offsets WHERE topic = %s",
                               (topic,)) == [(1,)], 30, 0.2)
    env.sql("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN RAISE EXCEPTION 'not now'; END$$")
    env.sql("CREATE TRIGGER refuse BEFORE INSERT ON public.inbox "
            "FOR EACH ROW EXECUTE FUNCTION refuse()")
    big = b'"' + b"x" * 900000 + b'"'
    for _ in range(8):
        feed.send(key=b"k", value=big)
        feed.flush()
    from test_inbox_guards import watermarks
    low, high = watermarks(broker, topic, 0)
    assert low > 1 and high == 9, (low, high)
    time.sleep(3)  # a few failed attempts, each seeking back to offset 1
    env.sql("DROP TRIGGER refuse ON public.inbox")
    deadline = time.time() + 40
    stored = None
    while time.time() < deadline and d.running():
        stored = env.sql("SELECT next_offset FROM public.outboxd_inbox_offsets"
                         " WHERE topic = %s", (topic,))
        if stored == [(9,)]:
            break
        time.sleep(0.3)
    if d.running():
        offsets = sorted(r[0] for r in env.sql(
            "SELECT kafka_offset FROM public.inbox WHERE topic = %s",
            (topic,)))
        assert offsets == list(range(9)), (
            "records skipped silently: stored %s, rows at offsets %s, "
            "low watermark %d" % (stored, offsets, low))
    else:
        assert d.wait(5) == 1
        assert re.search(r"below the partition's low watermark",
                         d.log_text()), d.log_tail()
