"""Integration tests of what `outboxd inbox` refuses to get wrong (sql/README.md,
"Inbox"; issue 19): stored positions that cannot belong to the partition
the broker serves, a subscription that takes in the dead-letter topic,
the database's timeouts, libpq's parameter limit, dead letters of records
with many headers, JSON that only jsonb takes, a NOT NULL column the
inbox does not write; and its /readyz, sd_notify and rebalances while
Postgres is down.

The helpers and the inbox_env fixture are test_inbox.py's.

Also here, the attack probes of `outboxd inbox` and its CloudEvents
reading (sql/README.md, "Inbox", "CloudEvents"): JSON nested deep,
structured CloudEvents with escaped base64 or deep data, partitions not
yet started, a bad record near the size limit, binary CloudEvents whose id
header is also a member, /readyz without statistics, and records expired
during a database failure."""

import base64
import json
import os
import re
import socket
import time
import uuid

import psycopg2
import pytest

import harness
from conftest import BROKER_BIN, OUTBOXD_BIN
from harness import header, wait_until
from test_cloudevents import ce_config, insert_row, wait_slot_active
from test_inbox import (PARTITIONS, Feed, InboxEnv, assert_exactly_once,
                        http_status, inbox_env, metrics)
from test_inbox_groups import librdkafka_version

__all__ = ["inbox_env"]  # the fixture, used by name


def mismatches(port):
    """{reason: count} of outboxd_inbox_position_mismatches_total."""
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=5) as r:
        text = r.read().decode()
    return {m.group(1): int(m.group(2)) for m in re.finditer(
        r'^outboxd_inbox_position_mismatches_total\{reason="(\w+)"\} (\d+)$',
        text, re.M)}


def committed_offsets(broker, group, topic, partitions=PARTITIONS):
    """{partition: offset} the group has committed in Kafka."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": broker.bootstraps, "group.id": group,
                  "log_level": 3})
    try:
        got = c.committed([TopicPartition(topic, p)
                           for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
    finally:
        c.close()


def watermarks(broker, topic, partition):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": broker.bootstraps,
                  "group.id": "watermarks", "log_level": 3})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition),
                                       timeout=10)
    finally:
        c.close()


def consume_all(env, broker, n):
    """Starts an inbox, lets it store the n records produced so far, waits
    until Kafka has the group's committed offsets too, and stops it."""
    d = env.start()
    hw = env.wait_consumed()
    want = {p: o for p, o in hw.items() if o > 0}
    wait_until(lambda: committed_offsets(broker, env.group, env.topic)
               == want, 30, 0.5, "kafka's committed offsets")
    assert env.rows() == n
    assert d.stop() == 0
    return d


# ---------------------------------------------------------------------------
# loss: positions that cannot belong to the partition


def test_inbox_position_past_high_watermark_halts(inbox_env, broker):
    """A stored position past the partition's high watermark (what a topic
    deleted and created again looks like: its offsets start at 0 again;
    the test broker cannot delete a topic, so the positions of the former
    incarnation are written into outboxd_inbox_offsets) stops the inbox
    with exit 1, naming the partition and both positions, instead of
    skipping the new records. With inbox.on_position_mismatch = earliest
    it starts at the low watermark, stores that position (a stored
    position otherwise only moves forward) and counts the mismatch."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    ids = feed.events(40)
    feed.flush()
    consume_all(env, broker, 40)
    before = env.stored()
    env.sql("UPDATE public.outboxd_inbox_offsets SET next_offset = "
            "next_offset + 1000")
    ids += feed.events(20, prefix="new")
    feed.flush()
    d = env.start()
    assert d.wait(60) == 1, d.log_tail()
    log = d.log_text()
    part, off = next(iter(before.items()))
    assert re.search(r"position mismatch on %s \[%d\]: stored offset %d is "
                     r"past the partition's high watermark \d+"
                     % (re.escape(env.topic), part, off + 1000), log), log
    assert "inbox.on_position_mismatch = halt" in log
    assert env.rows() == 40  # nothing stored past the mismatch

    port = harness.free_port()
    d2 = env.start(inbox_on_position_mismatch="earliest",
                   http_listen="127.0.0.1:%d" % port)
    assert_exactly_once(env, ids)
    assert mismatches(port)["past_high_watermark"] == len(before)
    assert d2.stop() == 0


def test_inbox_restored_database_halts(inbox_env, broker):
    """A database restored to before the inbox's first commit: Postgres
    has no stored positions while the group has committed offsets in
    Kafka. The inbox stops with exit 1 instead of starting at Kafka's
    committed offsets (which would never store again the records the
    restore took away); with on_position_mismatch = earliest every record
    ends up in the table once."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    ids = feed.events(60)
    feed.flush()
    consume_all(env, broker, 60)
    env.sql("TRUNCATE public.inbox, public.outboxd_inbox_offsets")  # restore
    ids += feed.events(10, prefix="new")
    feed.flush()
    d = env.start()
    assert d.wait(60) == 1, d.log_tail()
    assert re.search(r"position mismatch on %s \[\d\]: postgres has no stored "
                     r"position, but the group's committed offset in kafka "
                     r"is \d+" % re.escape(env.topic), d.log_text())
    assert env.rows() == 0
    env.start(inbox_on_position_mismatch="earliest")
    assert_exactly_once(env, ids)


def test_inbox_expired_records_halt(inbox_env, broker):
    """Records that expired unread: the stored position is below the
    partition's low watermark (the test broker drops a partition's oldest
    record batches past 5 MB). The inbox stops with exit 1 naming the
    records lost; on_position_mismatch = latest starts at the high
    watermark and stores it."""
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
    assert d.stop() == 0
    big = b'"' + b"x" * 900000 + b'"'
    for _ in range(8):
        feed.send(key=b"k", value=big)
        feed.flush()
    low, high = watermarks(broker, topic, 0)
    assert low > 1 and high == 9, (low, high)
    d = env.start(inbox_topics=topic)
    assert d.wait(60) == 1, d.log_tail()
    assert re.search(r"position mismatch on %s \[0\]: stored offset 1 is below "
                     r"the partition's low watermark %d: records 1 to %d "
                     r"expired" % (re.escape(topic), low, low - 1),
                     d.log_text()), d.log_tail()
    d = env.start(inbox_topics=topic, inbox_on_position_mismatch="latest")
    wait_until(lambda: env.sql("SELECT next_offset FROM "
                               "public.outboxd_inbox_offsets WHERE topic = %s",
                               (topic,)) == [(9,)], 30, 0.2)
    assert "starting at offset 9 (inbox.on_position_mismatch = latest)" \
        in d.log_text()
    assert d.stop() == 0


def test_inbox_other_cluster_halts(inbox_env, broker, tmp_path):
    """The same topic name on another Kafka cluster: the positions are
    stored with the cluster id, and a position of another cluster stops
    the inbox with exit 1 naming both clusters, even where the offsets
    would fit."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    feed.events(20)
    feed.flush()
    consume_all(env, broker, 20)
    clusters = env.sql("SELECT DISTINCT cluster_id FROM "
                       "public.outboxd_inbox_offsets")
    assert len(clusters) == 1 and clusters[0][0], clusters
    other = harness.MockBroker(BROKER_BIN, brokers=1,
                               logfile=str(tmp_path / "other-broker.log"))
    try:
        other.create_topic(env.topic, PARTITIONS)
        other_feed = Feed(other, env.topic)
        other_feed.events(200)
        other_feed.flush()
        d = env.start(**{"kafka_bootstrap.servers": other.bootstraps})
        assert d.wait(60) == 1, d.log_tail()
        m = re.search(r"position mismatch on %s \[\d\]: stored offset \d+ "
                      r"belongs to kafka cluster (\S+), but the broker is "
                      r"cluster (\S+) " % re.escape(env.topic), d.log_text())
        assert m and m.group(1) == clusters[0][0] and m.group(2) != m.group(1), \
            d.log_tail()
        assert env.rows() == 20
    finally:
        other.stop()


@pytest.fixture
def topic_ids_env(request, pg, topic_ids_broker, test_id, tmp_path):
    """An inbox (test_inbox.py's InboxEnv) of the broker that gives topic
    ids. The tests marked topic_ids also need outboxd linked with
    librdkafka 2.3.0 or later, the first to show them: they fail
    otherwise."""
    assert librdkafka_version() >= (2, 3), \
        "outboxd is linked with librdkafka %d.%d: topic ids need 2.3.0" \
        % librdkafka_version()
    env = InboxEnv(pg, topic_ids_broker, test_id, tmp_path)
    request.node._outboxd_instances = env.instances
    try:
        yield env
    finally:
        env.stop_all()


@pytest.mark.topic_ids
def test_inbox_recreated_topic_told_by_its_id(topic_ids_env):
    """A topic deleted and created again that already holds more records
    than the stored positions, so that none lies past a high watermark:
    only the topic's id tells it apart. The positions are stored
    with the topic id; against the new topic the inbox stops with exit 1,
    naming both ids, without storing anything; with
    inbox.on_position_mismatch = earliest it stores every record of the
    new topic once (the rows of the old one stay), counts the mismatch
    (reason other_topic_id) and stores the new id, which the next start
    finds in place. Needs outboxd with librdkafka 2.3.0 or later and a
    broker that gives topic ids (the topic_ids mark: tests/rdkafka.sh)."""
    env = topic_ids_env
    broker = env.broker
    feed = Feed(broker, env.topic)
    old = feed.events(40)
    feed.flush()
    consume_all(env, broker, 40)
    stored = env.stored()
    ids = env.sql("SELECT DISTINCT topic_id FROM "
                  "public.outboxd_inbox_offsets")
    assert len(ids) == 1 and re.fullmatch(r"[A-Za-z0-9+/_-]{22}",
                                          ids[0][0] or ""), ids
    old_id = ids[0][0]

    assert broker.cmd("deletetopic %s" % env.topic) == "ok"
    broker.create_topic(env.topic, PARTITIONS)
    feed = Feed(broker, env.topic)
    new = feed.events(400, prefix="new")
    feed.flush()
    hw = env.high_watermarks()
    assert all(hw[p] >= off for p, off in stored.items()), (hw, stored)

    d = env.start()
    assert d.wait(60) == 1, d.log_tail()
    log = d.log_text()
    new_ids = set()
    for part, off in stored.items():
        m = re.search(r"position mismatch on %s \[%d\]: stored offset %d "
                      r"belongs to topic id %s, but the topic now has id "
                      r"(\S+) \(it was deleted and created again\) and "
                      r"holds offsets 0 to %d; stopping"
                      % (re.escape(env.topic), part, off, re.escape(old_id),
                         hw[part]), log)
        assert m, log
        new_ids.add(m.group(1))
    assert len(new_ids) == 1 and old_id not in new_ids, new_ids
    assert "inbox.on_position_mismatch = halt" in log
    assert env.rows() == 40 and env.stored() == stored

    port = harness.free_port()
    d = env.start(inbox_on_position_mismatch="earliest",
                  http_listen="127.0.0.1:%d" % port)
    env.wait_consumed()
    have = set(r[0] for r in env.sql("SELECT id FROM public.inbox"))
    assert have == set(old + new), (len(have), len(old + new))
    # Each record of the new topic once.
    where = env.sql("SELECT count(DISTINCT (partition, kafka_offset)), "
                    "count(*) FROM public.inbox WHERE id = ANY(%s)",
                    (new,))[0]
    assert where == (400, 400), where
    assert mismatches(port)["other_topic_id"] == len(stored)
    assert env.sql("SELECT DISTINCT topic_id FROM "
                   "public.outboxd_inbox_offsets") == [(new_ids.pop(),)]
    assert d.stop() == 0

    d = env.start()
    for part, off in env.stored().items():
        d.wait_log(r"assigned %s \[%d\] at stored offset %d"
                   % (re.escape(env.topic), part, off), 60)
    assert "position mismatch" not in d.log_text(), d.log_tail()
    assert d.stop() == 0


@pytest.mark.topic_ids
def test_inbox_broker_without_topic_ids(topic_ids_env):
    """A broker that gives no topic ids (Metadata v9 at most, as Kafka
    before 2.8: DescribeTopics answers with the zero UUID): nothing is
    compared, the positions are stored with topic_id NULL, the inbox says
    so once, and every record is stored once."""
    env = topic_ids_env
    assert env.broker.cmd("apiversion 3 0 9") == "ok"
    feed = Feed(env.broker, env.topic)
    ids = feed.events(40)
    feed.flush()
    d = env.start()
    assert_exactly_once(env, ids)
    assert env.sql("SELECT count(*), count(topic_id) FROM "
                   "public.outboxd_inbox_offsets")[0][1] == 0
    log = d.log_text()
    assert log.count("the kafka brokers give no topic ids") == 1, log
    assert "could not read the kafka topic id" not in log, log
    assert d.stop() == 0


# ---------------------------------------------------------------------------
# loops, stalls, wrong results


def test_inbox_subscription_taking_dlq_refused(inbox_env):
    """A subscription that takes in the dead-letter topic (a regular
    expression matching it, or its name) would consume its own dead
    letters forever: exit 2 naming both keys."""
    env = inbox_env()
    for topics in (r"^%s\..*" % env.topic.split(".")[0], env.dlq_topic):
        d = env.start(inbox_topics=topics)
        assert d.wait(30) == 2, d.log_tail()
        log = d.log_text()
        assert "inbox.topics" in log and "outbox.dlq_topic (%s)" \
            % env.dlq_topic in log, log


def _pinned_sql(env, query):
    conn = psycopg2.connect(
        env.pg.conninfo(env.db), connect_timeout=10,
        options="-c statement_timeout=0 -c idle_session_timeout=0 "
                "-c idle_in_transaction_session_timeout=0")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(query)
            return cur.fetchall()
    finally:
        conn.close()


def test_inbox_pins_session_timeouts(inbox_env, broker):
    """The database sets statement_timeout, idle_session_timeout and
    idle_in_transaction_session_timeout to 1 ms: the inbox's connection
    pins them off (as the publisher's do) and stores every record."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    ids = feed.events(2000)
    feed.flush()
    for setting in ("statement_timeout", "idle_session_timeout",
                    "idle_in_transaction_session_timeout"):
        env.pg.sql("ALTER DATABASE %s SET %s = '1ms'" % (env.db, setting))
    try:
        d = env.start(inbox_batch_max=500)
        wait_until(lambda: _pinned_sql(
            env, "SELECT count(*) FROM public.inbox")[0][0] == 2000, 60, 0.5,
            "2000 rows")
        assert d.running(), d.log_tail()
    finally:
        env.pg.sql("ALTER DATABASE %s RESET ALL" % env.db)
    assert_exactly_once(env, ids)


def test_inbox_refuses_cooperative_sticky_on_librdkafka_2_0(inbox_env):
    """librdkafka before 2.3.0 aborts (an assertion in the sticky assignor)
    when a cooperative-sticky consumer is destroyed before its first
    assignment, as a SIGTERM right after start does (found by chaos seed
    100066): outboxd inbox refuses that assignor there, exit 2 naming the
    key."""
    env = inbox_env()
    d = env.start(**{"kafka_partition.assignment.strategy": "cooperative-sticky"})
    assert d.wait(30) == 2, d.log_tail()
    assert "kafka.partition.assignment.strategy" in d.log_text(), d.log_tail()


def test_inbox_batch_max_bounded(inbox_env, broker):
    """inbox.batch_max above 7281 would need more than libpq's 65,535
    parameters in one statement: exit 2 naming the key. 7281 works."""
    env = inbox_env()
    d = env.start(inbox_batch_max=7282)
    assert d.wait(30) == 2, d.log_tail()
    assert "inbox.batch_max" in d.log_text() and "7281" in d.log_text()
    feed = Feed(broker, env.topic)
    ids = feed.events(7600)
    feed.flush()
    d = env.start(inbox_batch_max=7281)
    assert_exactly_once(env, ids)
    assert d.stop() == 0


def test_inbox_many_headers_dead_letter_keeps_headers(inbox_env, broker,
                                                      consumer):
    """A record with more than 64 headers is a bad record; its dead letter
    carries its id header and as many of its other headers as the record
    holds (64 in all)."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    hs = [("h%02d" % i, b"v%d" % i) for i in range(70)]
    feed.send(key=b"many", value=b"{}", headers=hs[:10], event_id="ok-1")
    # The id header last: it must survive the cut all the same.
    feed._p.produce(env.topic, key=b"many", value=b"{}",
                    headers=hs + [("id", b"many-1")])
    feed.flush()
    d = env.start()
    dlq = consumer.collect(env.dlq_topic, min_count=1, timeout=30)
    assert len(dlq) == 1
    r = dlq[0]
    assert header(r, "id") == b"many-1", r["headers"]
    assert header(r, "error").startswith(b"bad-header: more than 64 headers")
    names = [h[0] for h in r["headers"]]
    assert len(names) == 64, names
    assert names[5:] == ["h%02d" % i for i in range(59)], names
    assert d.running()


def test_inbox_json_as_jsonb_takes_it(inbox_env, broker):
    """Values jsonb accepts are payload, whatever a double holds: a number
    of 30 digits, an exponent of 400; text jsonb refuses is payload_raw."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    cases = {
        "big": b'{"amount": 123456789012345678901234567890}',
        "exp": b'{"x": 1e400}',
        "deep": b'{"a": [1.50, {"b": -0.0e-7}], "c": "\\ud83d\\ude00"}',
        "nul": b'{"a": "\\u0000"}',
        "lead0": b'{"a": 01}',
    }
    for name, value in cases.items():
        feed.send(key=b"j", value=value, event_id=name)
    feed.flush()
    env.start()
    wait_until(lambda: env.rows() == len(cases), 30, 0.2)
    for name in ("big", "exp", "deep"):
        same = env.sql("SELECT payload = %s::jsonb, payload_raw IS NULL FROM "
                       "public.inbox WHERE id = %s",
                       (cases[name].decode(), name))[0]
        assert same == (True, True), name
    for name in ("nul", "lead0"):
        raw = env.sql("SELECT payload IS NULL, payload_raw FROM public.inbox "
                      "WHERE id = %s", (name,))[0]
        assert raw[0] and bytes(raw[1]) == cases[name], name


def test_inbox_not_null_column_halts(inbox_env, broker, consumer):
    """An inbox table with a NOT NULL column the inbox does not write: no
    record can ever be stored, so that is the table's fault, not the
    records'. The inbox stops with exit 1 naming the column, dead-letters
    nothing and stores no position."""
    env = inbox_env()
    env.sql("ALTER TABLE public.inbox ADD COLUMN tenant text NOT NULL")
    feed = Feed(broker, env.topic)
    feed.events(30)
    feed.flush()
    d = env.start()
    assert d.wait(60) == 1, d.log_tail()
    assert re.search(r'column "tenant" of inbox is NOT NULL', d.log_text()), \
        d.log_tail()
    assert env.stored() == {}
    assert consumer.collect(env.dlq_topic, timeout=3) == []


# ---------------------------------------------------------------------------
# operations left untested before


def test_inbox_readyz_during_broker_outage(inbox_env, broker):
    """/readyz answers 503 kafka-down while every broker is down and 200
    again once they are back; the inbox keeps running."""
    env = inbox_env()
    port = harness.free_port()
    d = env.start(http_listen="127.0.0.1:%d" % port)
    d.wait_log(r"serving /metrics", 15)
    wait_until(lambda: http_status(port, "/readyz") == 200, 30, 0.2)
    broker.cmd("down all")
    try:
        wait_until(lambda: http_status(port, "/readyz") == 503, 30, 0.2)
        import urllib.request
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port,
                                   timeout=5)
        except urllib.error.HTTPError as e:
            assert b"kafka-down" in e.read()
    finally:
        broker.cmd("up all")
    wait_until(lambda: http_status(port, "/readyz") == 200, 60, 0.2)
    feed = Feed(broker, env.topic)
    ids = feed.events(50)
    feed.flush()
    assert_exactly_once(env, ids)
    assert d.running()


def test_inbox_sd_notify(inbox_env, broker, tmp_path):
    """With NOTIFY_SOCKET set, the inbox says READY=1 once its database is
    connected, sends WATCHDOG=1 while WATCHDOG_USEC asks for it, and
    STOPPING=1 on SIGTERM."""
    env = inbox_env()
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(1)
    try:
        d = harness.Outboxd(OUTBOXD_BIN, env.config(),
                            str(env.tmpdir / "inbox"), command="inbox",
                            env={"NOTIFY_SOCKET": path,
                                 "WATCHDOG_USEC": "2000000"})
        env.instances.append(d)
        got = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
                any("READY=1" in g for g in got)
                and any("WATCHDOG=1" in g for g in got)):
            try:
                got.append(sock.recv(4096).decode())
            except socket.timeout:
                pass
        assert any("READY=1" in g for g in got), got
        assert any("WATCHDOG=1" in g for g in got), got
        assert d.stop() == 0
        rest = []
        try:
            while True:
                rest.append(sock.recv(4096).decode())
        except socket.timeout:
            pass
        assert any("STOPPING=1" in g for g in rest), rest
    finally:
        sock.close()
        os.unlink(path)


def test_inbox_rebalance_while_postgres_down(inbox_env, broker, tmp_path):
    """A rebalance (the regular expression subscription takes in a new
    topic) while Postgres is down for longer than max.poll.interval.ms:
    the rebalance callback does not wait for the database, so the consumer
    is not thrown out of its group; once Postgres is back, the new
    topic's partitions start and every record is stored once."""
    cluster = harness.PgCluster(str(tmp_path / "pg-own")).start()
    try:
        env = inbox_env(cluster)
        prefix = env.topic.split(".")[0]
        feed = Feed(broker, env.topic)
        ids = feed.events(50)
        feed.flush()
        d = env.start(inbox_topics=r"^%s\.inbox\.ev.*" % prefix,
                      **{"kafka_max.poll.interval.ms": 7000})
        d.wait_log(r"assigned %s \[" % re.escape(env.topic), 30)
        wait_until(lambda: env.rows() == 50, 30, 0.2)
        cluster.stop("immediate")
        broker.create_topic("%s.inbox.event2" % prefix, 2)
        # The metadata refresh (1 s) finds the topic and the rebalance
        # starts; Postgres stays down for longer than max.poll.interval.ms.
        time.sleep(15)
        cluster.start()
        other = Feed(broker, "%s.inbox.event2" % prefix)
        ids2 = other.events(30)
        other.flush()
        ids += feed.events(20, prefix="after")
        feed.flush()
        wait_until(lambda: env.rows() == 100, 60, 0.3, "100 rows")
        log = d.log_text()
        assert "maximum poll interval" not in log.lower(), log[-4000:]
        have = set(r[0] for r in env.sql("SELECT id FROM public.inbox"))
        assert have == set(ids + ids2)
        assert d.running()
        d.stop()
    finally:
        cluster.destroy()


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
        # Records wait and none is stored: stalled once stall_after_ms
        # passed (waited for up to 30 s), and the lag counts them.
        wait_until(lambda: _readyz(port) == (503, "stalled"), 30, 0.2,
                   "/readyz says stalled")
        wait_until(lambda: (metrics(port).get("outboxd_inbox_lag_records")
                            or 0) > 0, 30, 0.2, "the lag counts the records")
        assert env.rows() == 0 and env.stored() == {}
    finally:
        broker.cmd("clear 9")
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
    # Both records taken (stored with their rows, or counted duplicates).
    wait_until(lambda: env.sql(
        "SELECT coalesce(sum(next_offset), 0) FROM "
        "public.outboxd_inbox_offsets WHERE topic = %s", (topic,))[0][0] >= 2,
        60, 0.2, "both records stored")
    rows = sorted(env.sql("SELECT id, type FROM public.inbox"))
    assert rows == sorted((eid, "order.paid") for eid in ids), rows


def test_inbox_readyz_without_statistics(inbox_env, broker):
    """[kafka] statistics.interval.ms is one of outboxd's overridable
    defaults (deploy/README.md, "Configuration reference"); 0 is librdkafka's own
    default. With it the inbox stores every record, yet /readyz must not
    claim `kafka-down` (nor outboxd_kafka_connected 0) while it consumes
    from a healthy broker."""
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
