"""Integration tests of `outboxd inbox` (sql/README.md, "The inbox tables") against real
parts: a PostgreSQL 15 cluster holding the tables of sql/inbox.sql and
librdkafka's mock Kafka cluster. Records are produced with confluent_kafka
the way another service's outbox would publish them.

Every test uses a database of its own (with the shipped sql/inbox.sql),
topics and a consumer group of its own. The checks are the inbox's
promise: one row per event id, no record skipped, and stored positions
equal to the records consumed."""

import json
import random
import re
import subprocess
import threading
import time
import urllib.request
import uuid

import pytest

import harness
from conftest import OUTBOXD_BIN, REPO_ROOT, own_db
from harness import header, wait_until

INBOX_SQL = str(REPO_ROOT / "sql" / "inbox.sql")
PROCESSOR_SQL = str(REPO_ROOT / "sql" / "inbox_processor.sql")
PARTITIONS = 4


# ---------------------------------------------------------------------------
# helpers


def new_id():
    return str(uuid.uuid4())


class Feed:
    """Produces records to a topic with confluent_kafka: each has an `id`
    header (unless told otherwise), a `type` header, a key and a JSON
    value. Remembers the ids it sent and how many records."""

    def __init__(self, broker, topic):
        from confluent_kafka import Producer
        self.topic = topic
        self.ids = []
        self.sent = 0
        self._p = Producer({"bootstrap.servers": broker.bootstraps,
                            "linger.ms": 5, "log_level": 3,
                            "partitioner": "murmur2_random"})

    def send(self, key=None, value=b"{}", headers=None, event_id=None,
             with_id=True):
        """Produces one record; returns its id (None without one)."""
        hs = []
        if with_id:
            event_id = event_id or new_id()
            hs.append(("id", event_id.encode()))
        hs += list(headers or [])
        self._p.produce(self.topic, key=key, value=value, headers=hs)
        self._p.poll(0)
        self.sent += 1
        if with_id and event_id not in self.ids:
            self.ids.append(event_id)
        return event_id if with_id else None

    def events(self, n, prefix="k"):
        """Produces n ordinary events; returns their ids."""
        out = []
        for i in range(n):
            eid = new_id()
            out.append(self.send(
                key=("%s-%d" % (prefix, i % 17)).encode(),
                value=json.dumps({"n": i, "id": eid}).encode(),
                headers=[("type", b"order.paid")], event_id=eid))
        return out

    def flush(self):
        left = self._p.flush(60)
        assert left == 0, "%d records not acknowledged by the broker" % left


class Writer(threading.Thread):
    """Produces `per_round` events every `pause` seconds until stopped."""

    def __init__(self, feed, per_round=20, pause=0.02):
        super().__init__(daemon=True)
        self.feed, self.per_round, self.pause = feed, per_round, pause
        self._halt = threading.Event()
        self.error = None

    def run(self):
        try:
            while not self._halt.is_set():
                self.feed.events(self.per_round)
                time.sleep(self.pause)
            self.feed.flush()
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self):
        self._halt.set()
        self.join(60)
        assert self.error is None, self.error


class InboxEnv:
    """One test's inbox: a database with sql/inbox.sql, a topic, a group,
    and the outboxd inbox processes started for them."""

    def __init__(self, pg, broker, test_id, tmpdir, cluster=None):
        self.pg = cluster or pg
        self.broker = broker
        self.db = "inbox_%s" % test_id
        self.pg.create_db(self.db)
        self.pg.run_file(INBOX_SQL, self.db)
        self.topic = "%s.inbox.event" % test_id
        self.dlq_topic = "%s.inbox.dlq" % test_id
        self.group = "%s-inbox" % test_id
        broker.create_topic(self.topic, PARTITIONS)
        broker.create_topic(self.dlq_topic, 1)
        self.tmpdir = tmpdir
        self.instances = []

    def config(self, **settings):
        cfg = {
            "inbox": {
                "conninfo": self.pg.conninfo(self.db),
                "topics": self.topic,
                "group": self.group,
                "batch_max": 100,
            },
            "outbox": {"dlq_topic": self.dlq_topic},
            "postgres": {"reconnect_max_backoff_ms": 1000},
            "kafka": {
                "bootstrap.servers": self.broker.bootstraps,
                "topic.metadata.refresh.interval.ms": 1000,
                "fetch.wait.max.ms": 100,
                # A member killed with -9 leaves the group when its
                # session times out: keep that short for the restarts.
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            },
            "http": {"listen": ""},
            "log": {"level": "debug"},
        }
        for name, value in settings.items():
            section, key = name.split("_", 1)
            cfg.setdefault(section, {})[key] = value
        return cfg

    def start(self, **settings):
        d = harness.Outboxd(OUTBOXD_BIN, self.config(**settings),
                            str(self.tmpdir / "inbox"), command="inbox")
        self.instances.append(d)
        return d

    def sql(self, query, params=None):
        return self.pg.sql(query, params, dbname=self.db)

    def rows(self):
        return self.sql("SELECT count(*) FROM public.inbox")[0][0]

    def stored(self):
        """{partition: next_offset} stored for the group."""
        return dict(self.sql(
            "SELECT partition, next_offset FROM public.outboxd_inbox_offsets "
            "WHERE group_id = %s AND topic = %s", (self.group, self.topic)))

    def high_watermarks(self):
        """{partition: high watermark} of the topic: the records in it."""
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": self.broker.bootstraps,
                      "group.id": "watermarks", "log_level": 3})
        try:
            return {p: c.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
        finally:
            c.close()

    def wait_consumed(self, timeout=60):
        """Waits until the stored positions reach the end of every
        partition; returns the high watermarks."""
        hw = self.high_watermarks()
        want = {p: n for p, n in hw.items() if n > 0}
        wait_until(lambda: all(self.stored().get(p) == n
                               for p, n in want.items()),
                   timeout, 0.2, "stored positions reach %s (stored %s)"
                   % (want, self.stored()))
        return hw

    def stop_all(self):
        for d in self.instances:
            d.stop(40)


@pytest.fixture
def inbox_env(request, pg, broker, test_id, tmp_path):
    made = []

    def make(cluster=None):
        env = InboxEnv(pg, broker, test_id, tmp_path, cluster)
        made.append(env)
        request.node._outboxd_instances = env.instances
        return env
    yield make
    for env in made:
        env.stop_all()


def assert_exactly_once(env, ids):
    """Every id has its row (ids are unique by the primary key), nothing
    else is in the table, and the stored positions equal the records in
    the topic: each record consumed once, none skipped."""
    hw = env.wait_consumed()
    have = set(r[0] for r in env.sql("SELECT id FROM public.inbox"))
    missing = set(ids) - have
    extra = have - set(ids)
    assert not missing and not extra, (
        "%d missing (e.g. %s), %d unexpected (e.g. %s)"
        % (len(missing), list(missing)[:3], len(extra), list(extra)[:3]))
    assert env.stored() == {p: n for p, n in hw.items() if n > 0}
    # Each row names the record it came from, and no two rows name one.
    where = env.sql("SELECT count(DISTINCT (partition, kafka_offset)), "
                    "count(*) FROM public.inbox")[0]
    assert where[0] == where[1], where


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(outboxd_inbox_\S+) (\d+)$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def http_status(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path),
                                    timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


# ---------------------------------------------------------------------------
# the row, duplicates, operations


def test_inbox_rows_duplicates_and_metrics(inbox_env, broker):
    """Every record becomes one row holding its id, topic, partition,
    offset, key, type, JSON payload and headers; the same ids republished
    make no second row; a non-JSON value lands in payload_raw, a tombstone
    with both payloads NULL. /metrics counts inserted and duplicate
    records; /healthz and /readyz answer 200; the processor's query
    (sql/inbox_processor.sql) marks rows processed."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    ids = feed.events(300)
    for i, eid in enumerate(ids[:60]):  # republished: at-least-once
        feed.send(key=("k-%d" % (i % 17)).encode(), value=b'{"again": 1}',
                  event_id=eid)
    raw_id = feed.send(key=b"raw", value=b"\x00\xffnot json",
                       headers=[("traceparent", b"00-abc-01")])
    tomb_id = feed.send(key=b"gone", value=None)
    feed.flush()
    port = harness.free_port()
    d = env.start(http_listen="127.0.0.1:%d" % port, log_format="json")
    assert_exactly_once(env, ids + [raw_id, tomb_id])

    row = env.sql("SELECT topic, partition, kafka_offset, key, type, "
                  "payload, payload_raw, headers FROM public.inbox "
                  "WHERE id = %s", (ids[5],))[0]
    assert row[0] == env.topic
    assert row[3] == "k-5" and row[4] == "order.paid"
    assert row[5] == {"n": 5, "id": ids[5]}  # the first copy wins
    assert row[6] is None
    assert row[7] == {"id": ids[5], "type": "order.paid"}
    assert harness.murmur2_partition(b"k-5", PARTITIONS) == row[1]
    raw = env.sql("SELECT payload, payload_raw, headers, type FROM "
                  "public.inbox WHERE id = %s", (raw_id,))[0]
    assert raw[0] is None and bytes(raw[1]) == b"\x00\xffnot json"
    assert raw[2] == {"id": raw_id, "traceparent": "00-abc-01"}
    assert raw[3] is None
    tomb = env.sql("SELECT payload, payload_raw, key FROM public.inbox "
                   "WHERE id = %s", (tomb_id,))[0]
    assert tomb == (None, None, "gone")

    # The test broker, built against librdkafka 2.0.2, gives no topic ids
    # (nor names a controller, where DescribeTopics is sent), and outboxd
    # built against 2.0.2 asks for none: topic_id stays NULL.
    assert env.sql("SELECT count(*), count(topic_id) FROM "
                   "public.outboxd_inbox_offsets")[0] == (PARTITIONS, 0)
    m = wait_until(lambda: (lambda v: v if v.get(
        'outboxd_inbox_records_total{result="duplicate"}') == 60 else None)(
        metrics(port)), 10, 0.2, "duplicate counter")
    assert m['outboxd_inbox_records_total{result="inserted"}'] == 302
    assert m['outboxd_inbox_records_total{result="dead_lettered"}'] == 0
    wait_until(lambda: metrics(port)["outboxd_inbox_lag_records"] == 0, 10)
    assert http_status(port, "/healthz") == 200
    # The inbox shows its own families, not the publisher's.
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        text = r.read().decode()
    for family in ("outboxd_events_published_total", "outboxd_transactions_total",
                   "outboxd_confirmed_lsn", "outboxd_slot_wal_status"):
        assert "# TYPE %s " % family not in text, family
    assert "# TYPE outboxd_ready gauge" in text
    wait_until(lambda: http_status(port, "/readyz") == 200, 10)
    lines = [json.loads(x) for x in d.log_text().splitlines()
             if x.startswith("{")]
    assert any("assigned" in x["msg"] for x in lines), d.log_tail()

    env.pg.run_file(PROCESSOR_SQL, env.db)
    left = env.sql("SELECT count(*) FROM public.inbox "
                   "WHERE processed_at IS NULL")[0][0]
    assert left == 302 - 100
    assert d.stop() == 0


def test_inbox_bad_records_are_dead_lettered(inbox_env, broker, consumer):
    """A record without the id header, one with a header that is not
    UTF-8, and one whose value the table refuses (a CHECK constraint the
    service added) go to the dead-letter topic with an error header; the
    records around them are stored and the positions move past all of
    them, so no partition is blocked."""
    env = inbox_env()
    env.sql("ALTER TABLE public.inbox ADD CONSTRAINT no_poison CHECK "
            "(payload IS NULL OR NOT payload ? 'poison')")
    feed = Feed(broker, env.topic)
    ids = feed.events(50, prefix="a")
    feed.send(key=b"a-1", value=b'{"no": "id"}', with_id=False)
    feed.send(key=b"a-2", value=b"{}", headers=[("bin", b"\xff\xfe")],
              event_id="bad-header-1")
    feed.send(key=b"a-3", value=b'{"poison": 1}', event_id="poison-1")
    ids += feed.events(50, prefix="b")
    feed.flush()
    d = env.start()
    assert_exactly_once(env, ids)
    dlq = consumer.collect(env.dlq_topic, min_count=3, timeout=30)
    errors = sorted(header(r, "error").decode() for r in dlq)
    assert len(dlq) == 3, errors
    assert errors[0].startswith("bad-header: header \"bin\""), errors
    assert errors[1].startswith("missing-id: record has no \"id\" header")
    assert errors[2].startswith("unstorable: ") and "no_poison" in errors[2]
    poison = [r for r in dlq if header(r, "id") == b"poison-1"][0]
    assert poison["value"] == b'{"poison": 1}' and poison["key"] == "a-3"
    assert header(poison, "source-topic") == env.topic.encode()
    assert d.running(), d.log_tail()


def test_inbox_halts_on_bad_record(inbox_env, broker):
    """on_bad_event = halt: a record without an id stops outboxd inbox
    with exit 1, the records before it stored and its position not."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    feed.send(key=b"h", value=b"{}", event_id="first")
    feed.send(key=b"h", value=b"{}", with_id=False)
    feed.send(key=b"h", value=b"{}", event_id="after")
    feed.flush()
    d = env.start(outbox_on_bad_event="halt", inbox_batch_max=1)
    assert d.wait(60) == 1, d.log_tail()
    assert "on_bad_event = halt" in d.log_text()
    part = harness.murmur2_partition(b"h", PARTITIONS)
    assert env.stored() == {part: 1}
    assert [r[0] for r in env.sql("SELECT id FROM public.inbox")] == ["first"]


def test_inbox_missing_tables_exit_1(pg, broker, inbox_env):
    """Without the offsets table outboxd inbox exits 1 naming
    sql/inbox.sql; `check` reports it too."""
    env = inbox_env()
    env.sql("DROP TABLE public.outboxd_inbox_offsets")
    d = env.start()
    assert d.wait(60) == 1, d.log_tail()
    assert "sql/inbox.sql" in d.log_text()
    assert "outboxd_inbox_offsets" in d.log_text()
    rc, out, _ = d.run_cmd(["check"])
    assert rc == 2
    assert re.search(r"inbox tables\s+FAIL.*sql/inbox.sql", out), out


def test_inbox_only_check_passes(pg, broker, inbox_env):
    """A receiving service's config (an [inbox], no publisher keys):
    `check` checks the inbox and the broker, not an outbox it does not
    have, and passes."""
    env = inbox_env()
    d = harness.Outboxd(OUTBOXD_BIN, env.config(), str(env.tmpdir / "inbox"),
                        command="inbox", start=False)
    rc, out, _ = d.run_cmd(["check"])
    assert rc == 0, out
    assert re.search(r"publisher\s+ok.*not configured", out, re.I), out
    assert re.search(r"inbox tables\s+ok", out, re.I), out
    assert "replication role" not in out, out


def test_inbox_runs_as_the_shipped_least_privilege_role(pg, broker, inbox_env):
    """sql/inbox_role.sql grants what `outboxd inbox` needs: connected as
    outboxd_inbox, `check` passes and every record is stored once."""
    env = inbox_env()
    pg.run_file(str(REPO_ROOT / "sql" / "inbox_role.sql"), env.db)
    feed = Feed(broker, env.topic)
    ids = feed.events(50)
    feed.flush()
    conninfo = pg.conninfo(env.db, user="outboxd_inbox")
    d = harness.Outboxd(OUTBOXD_BIN, env.config(inbox_conninfo=conninfo),
                        str(env.tmpdir / "inbox-role"), command="inbox", start=False)
    rc, out, err = d.run_cmd(["check"])
    assert re.search(r"inbox tables\s+ok", out), (out, err)
    d = env.start(inbox_conninfo=conninfo)
    assert_exactly_once(env, ids)
    assert d.running(), d.log_tail()


def test_inbox_without_grants_fails_check_and_inbox_alike(pg, broker, inbox_env):
    """A role without the grants the inbox's statements need: `check`
    fails its `inbox tables` line with the GRANT to run, and `outboxd
    inbox` exits 1 with the same words before /readyz could say ready (it
    used to connect, say ready and loop on "permission denied"). One case
    per table: the rows', then the positions'."""
    env = inbox_env()
    env.sql("DROP ROLE IF EXISTS inbox_nogrant")
    env.sql("CREATE ROLE inbox_nogrant LOGIN")
    conninfo = pg.conninfo(env.db, user="inbox_nogrant")
    cases = [
        ("GRANT SELECT, INSERT ON TABLE public.inbox TO inbox_nogrant",
         None),
        ("GRANT SELECT, INSERT, UPDATE ON TABLE public.outboxd_inbox_offsets TO inbox_nogrant",
         "GRANT SELECT, INSERT ON TABLE public.inbox TO inbox_nogrant"),
    ]
    for want, grant_first in cases:
        if grant_first:
            env.sql(grant_first)
        d = harness.Outboxd(OUTBOXD_BIN, env.config(inbox_conninfo=conninfo),
                            str(env.tmpdir / "inbox-nogrant"), command="inbox",
                            start=False)
        rc, out, err = d.run_cmd(["check"])
        assert rc == 2, (out, err)
        assert re.search(r"inbox tables\s+FAIL.*" + re.escape(want), out), (out, err)
        # check of an inbox-only file tags its lines with the group
        assert "slot=" not in err and "group=" in err, err
        d = env.start(inbox_conninfo=conninfo)
        assert d.wait(60) == 1, d.log_tail()
        assert want in d.log_text(), d.log_tail()
        assert "connected to the inbox database" not in d.log_text(), d.log_tail()
    env.sql("GRANT SELECT, INSERT, UPDATE ON TABLE public.outboxd_inbox_offsets "
            "TO inbox_nogrant")
    rc, out, err = d.run_cmd(["check"])
    assert re.search(r"inbox tables\s+ok", out), (out, err)


def test_inbox_check_changes_nothing_and_inbox_adds_columns(pg, broker, inbox_env):
    """An offsets table made before outboxd kept the cluster and topic ids:
    `check` reports the missing columns with the ALTER TABLE and leaves the
    table as it is; `outboxd inbox` adds them when it starts. A table
    lacking only topic_id gets it the same way."""
    env = inbox_env()
    has_columns = ("SELECT count(*) FROM pg_attribute WHERE attrelid = "
                   "'public.outboxd_inbox_offsets'::regclass AND attname IN "
                   "('cluster_id', 'topic_id') AND NOT attisdropped")
    for dropped in ("cluster_id, DROP COLUMN topic_id", "topic_id"):
        env.sql("ALTER TABLE public.outboxd_inbox_offsets DROP COLUMN %s"
                % dropped)
        lacks = "cluster_id, topic_id" if "cluster_id" in dropped else "topic_id"
        d = harness.Outboxd(OUTBOXD_BIN, env.config(), str(env.tmpdir / "inbox"),
                            command="inbox", start=False)
        rc, out, _ = d.run_cmd(["check"])
        assert rc == 2, out
        assert re.search(r"inbox tables\s+FAIL.* lacks the column\(s\) %s: .*"
                         r"ALTER TABLE \S+ ADD COLUMN IF "
                         r"NOT EXISTS cluster_id text, ADD COLUMN IF NOT EXISTS "
                         r"topic_id text" % lacks, out), out
        assert env.sql(has_columns)[0][0] == 2 - len(lacks.split(", "))
        d = env.start()
        d.wait_log(r"added the column\(s\) %s to \S+outboxd_inbox_offsets"
                   % lacks, 30)
        assert env.sql(has_columns)[0][0] == 2
        assert d.stop() == 0


# ---------------------------------------------------------------------------
# faults


def test_inbox_kill9_twice_exactly_once(inbox_env, broker):
    """kill -9 twice while records are being consumed (small batches, so
    many transactions): after each restart the consumer resumes from the
    positions stored in Postgres; in the end every id has one row and the
    stored positions equal the records in the topic. No record was
    offered to the table twice: the duplicate counter of the last
    instance is 0. Each row takes the table at least 1 ms (a trigger), so
    the 3,500 rows past the last kill's threshold take seconds on any
    machine: the kills come before the end."""
    env = inbox_env()
    env.sql("CREATE FUNCTION pace() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN PERFORM pg_sleep(0.001); RETURN NEW; END$$")
    env.sql("CREATE TRIGGER pace BEFORE INSERT ON public.inbox "
            "FOR EACH ROW EXECUTE FUNCTION pace()")
    feed = Feed(broker, env.topic)
    ids = feed.events(6000)
    feed.flush()
    port = harness.free_port()
    d = env.start(inbox_batch_max=5, http_listen="127.0.0.1:%d" % port)
    stored_at_kill = []
    for threshold in (800, 2500):
        wait_until(lambda: env.rows() >= threshold, 60, 0.02,
                   "%d rows" % threshold)
        d.kill9()
        before = env.rows()
        assert before < 6000, "consumed everything before the kill"
        stored_at_kill.append(env.stored())
        d.start()
    assert_exactly_once(env, ids)
    # Each restart resumed every partition that had a stored position at
    # that position (a partition not yet stored to starts at its first
    # record, which exactly-once above covers). The first restart may be
    # killed before its assignment came (when the second threshold was
    # passed already): then it logged none, and only the last is checked.
    starts = d.log_text().split("=== start")[2:]
    assert len(starts) == 2, d.log_tail()
    assert "assigned" in starts[1], starts[1][-3000:]
    for log, stored in zip(starts, stored_at_kill):
        assert stored, "nothing stored before the kill"
        if "assigned" not in log:
            continue
        for part, offset in stored.items():
            # At least what was stored when the kill was seen: a commit
            # the dying process had sent may still land after it.
            m = re.search(r"%s \[%d\] at stored offset (\d+)"
                          % (re.escape(env.topic), part), log)
            assert m and int(m.group(1)) >= offset, (part, offset,
                                                     log[-3000:])
    m = metrics(port)
    assert m['outboxd_inbox_records_total{result="duplicate"}'] == 0, m
    assert d.stop() == 0


def test_inbox_broker_outage(inbox_env, broker):
    """All brokers down for 5 s while records arrive: the inbox waits,
    then stores every record once; the daemon never exits."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    d = env.start()
    d.wait_log(r"assigned %s \[" % re.escape(env.topic), 30)
    w = Writer(feed)
    w.start()
    wait_until(lambda: env.rows() >= 200, 30, 0.05)
    broker.cmd("down all")
    time.sleep(5)
    broker.cmd("up all")
    wait_until(lambda: env.rows() >= len(feed.ids) - 50, 60, 0.1)
    w.stop()
    assert_exactly_once(env, feed.ids)
    assert d.running(), d.log_tail()


def test_inbox_postgres_restart_under_load(inbox_env, broker, tmp_path):
    """pg_ctl restart -m immediate while records stream in: outboxd inbox
    reconnects with backoff, seeks back to the stored positions, and
    stores every record once."""
    cluster = harness.PgCluster(str(tmp_path / "pg-own")).start()
    try:
        env = inbox_env(cluster)
        feed = Feed(broker, env.topic)
        d = env.start(inbox_batch_max=20)
        d.wait_log(r"assigned %s \[" % re.escape(env.topic), 30)
        w = Writer(feed)
        w.start()
        wait_until(lambda: env.rows() >= 300, 30, 0.05)
        cluster.restart("immediate")
        wait_until(lambda: env.rows() >= len(feed.ids) - 100, 60, 0.2)
        w.stop()
        assert_exactly_once(env, feed.ids)
        assert d.running(), d.log_tail()
        assert "resumed" in d.log_text(), d.log_tail()
        d.stop()
    finally:
        cluster.destroy()


def test_inbox_two_instances_share_the_group(inbox_env, broker):
    """Two outboxd inbox processes in one consumer group: the second
    joins (the test broker's rebalance takes up to ~45 s), both store
    records, and in the end every id has one row and the stored positions
    equal the records in the topic."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    a = env.start(inbox_batch_max=20)
    a.wait_log(r"assigned %s \[" % re.escape(env.topic), 30)
    w = Writer(feed, per_round=10, pause=0.05)
    w.start()
    wait_until(lambda: env.rows() >= 100, 30, 0.05)
    b = env.start(inbox_batch_max=20)
    b.wait_log(r"assigned %s \[" % re.escape(env.topic), 90)
    n = env.rows()
    wait_until(lambda: env.rows() >= n + 200, 30, 0.1)
    w.stop()
    assert_exactly_once(env, feed.ids)
    assert a.running() and b.running()
    assert a.stop() == 0 and b.stop() == 0


# ---------------------------------------------------------------------------
# the processing order


def processor_rounds(env):
    """Runs sql/inbox_processor.sql with psql until a round takes no row;
    returns the rows the rounds handed out, in order, as dicts of the
    query's columns (text)."""
    handed = []
    while True:
        r = subprocess.run(
            [harness._pg_client_bin("psql"), "-X", "-q", "-A", "-F", "\x1f",
             "-P", "footer=off", "-v", "ON_ERROR_STOP=1",
             "-d", env.pg.conninfo(env.db), "-f", PROCESSOR_SQL],
            capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        names = lines[0].split("\x1f")
        rows = [dict(zip(names, line.split("\x1f"))) for line in lines[1:]]
        if not rows:
            return handed
        handed += rows


def processor_order():
    """The ORDER BY list of sql/inbox_processor.sql's first query."""
    with open(PROCESSOR_SQL) as f:
        m = re.search(r"^ORDER BY (.+)$", f.read(), re.M)
    assert m, "no ORDER BY in %s" % PROCESSOR_SQL
    return m.group(1).strip()


def assert_no_ties_within_a_key(env):
    """The processor's order places every row of a key: no two rows of one
    key share its sort key, so their order is the server's choice
    nowhere."""
    order = processor_order()
    ties = env.sql("SELECT key, %s, count(*) FROM public.inbox "
                   "GROUP BY key, %s HAVING count(*) > 1" % (order, order))
    assert ties == [], "ORDER BY %s ties within a key: %s" % (order,
                                                             ties[:5])


def assert_commit_order(handed, committed):
    """Each key's events were handed out in the order they were
    committed, every one once."""
    seen = {}
    for row in handed:
        body = json.loads(row["payload"])
        seen.setdefault(row["key"], []).append(body["n"])
    assert seen == committed, {
        k: (seen.get(k), committed[k]) for k in committed
        if seen.get(k) != committed[k]}


def test_inbox_table_made_before_seq_still_works(inbox_env, broker):
    """An inbox table made before seq existed (no seq, its queue index on
    received_at): outboxd inbox neither writes nor reads seq, and stores
    every record into it as before; `check` passes."""
    env = inbox_env()
    env.sql("ALTER TABLE public.inbox DROP COLUMN seq")
    env.sql("CREATE INDEX inbox_unprocessed ON public.inbox (received_at) "
            "WHERE processed_at IS NULL AND error IS NULL")
    feed = Feed(broker, env.topic)
    ids = feed.events(20)
    feed.flush()
    d = env.start()
    assert_exactly_once(env, ids)
    rc, out, err = d.run_cmd(["check"])
    assert rc == 0, (rc, out, err)
    assert d.stop() == 0, d.log_tail()


def test_inbox_processor_order_follows_each_keys_commit_order(
        inbox_env, broker, pg, outboxd_factory, test_id):
    """outboxd publishes the events of six keys, committed a few at a
    time in mixed order; outboxd inbox stores them in batches of at most
    25 (several keys in a batch, several batches). The rounds of
    sql/inbox_processor.sql hand out each key's events in commit order,
    and its ORDER BY leaves no tie between two rows of a key (the order
    never rests on the rows' storage order).
    Then, as a service does now and then, half the processed rows are
    deleted and the table vacuumed, so new rows fill room in earlier pages
    (their storage order is no longer their insert order), and the next
    events come out in commit order as well."""
    env = inbox_env()
    db = own_db(pg, "inbox_order_%s" % test_id)
    outboxd_factory({"postgres": {"conninfo": pg.conninfo(db)},
                     "outbox": {"topic": env.topic}})
    d = env.start(inbox_batch_max=25)
    d.wait_log(r"assigned %s \[" % re.escape(env.topic), 30)
    keys = ["key-%d" % i for i in range(6)]
    rng = random.Random(7)
    committed = {k: [] for k in keys}
    conn = pg.connect(db)

    def commit_events(transactions):
        """transactions, each of 3 to 8 events of random keys; returns
        {key: [n, ...]} of the events written."""
        written = {k: [] for k in keys}
        for _ in range(transactions):
            with conn.cursor() as cur:
                cur.execute("BEGIN")
                for _ in range(rng.randint(3, 8)):
                    k = rng.choice(keys)
                    n = len(committed[k])
                    committed[k].append(n)
                    written[k].append(n)
                    cur.execute(
                        "INSERT INTO public.outbox (aggregate_type, "
                        "aggregate_id, event_type, payload) VALUES "
                        "('order', %s, 'noted', %s)",
                        (k, json.dumps({"key": k, "n": n})))
                cur.execute("COMMIT")
        return written

    try:
        for phase in (1, 2):
            written = commit_events(60)
            total = sum(len(v) for v in written.values())
            wait_until(lambda: env.sql(
                "SELECT count(*) FROM public.inbox WHERE processed_at IS "
                "NULL")[0][0] == total, 60, 0.2,
                "%d new rows stored" % total)
            batches = env.sql(
                "SELECT received_at, count(DISTINCT key) FROM public.inbox "
                "WHERE processed_at IS NULL GROUP BY received_at")
            assert len(batches) > 1 and max(n for _, n in batches) > 1, \
                batches
            assert_no_ties_within_a_key(env)
            assert_commit_order(processor_rounds(env), written)
            # Half the processed rows go; vacuum leaves their room.
            env.sql("DELETE FROM public.inbox WHERE kafka_offset % 2 = 0")
            env.sql("VACUUM public.inbox")
    finally:
        conn.close()
    assert d.stop() == 0, d.log_tail()
