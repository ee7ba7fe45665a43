"""Fault-injection tests of outboxd against real parts (deploy/README.md "Delivery guarantees":
guarantees, §5 faults and bad input): Postgres connections dropped and
servers restarted, the broker down or failing requests, a fatal producer
error, kill -9 under load, bad events (dead-letter and halt), two daemons on
one slot, operator errors, a 300,000-row transaction under a memory bound
and a long silence on the replication stream.

Every scenario counts each published `id` header: nothing may be missing,
and nothing may be duplicated except where deploy/README.md "Delivery guarantees" says at-least-once
(process crashes, a recreated producer). Tests that restart or reconfigure
Postgres use a cluster of their own so the session cluster stays
undisturbed. Each test runs with both decoders (wal2json and pgoutput).

Past defects kept here, with wal2json only and left out of the version
matrix (no_version_matrix): an event lost when the stream broke while
outboxd waited for producer queue room, memory growing with filtered
transactions while an event waits, and SIGTERM while creating the slot
waits for a running transaction."""

import collections
import json
import random
import re
import threading
import time
import urllib.error
import urllib.request
import uuid

import psycopg2
import psycopg2.extras
import pytest

import harness
from harness import header, int_to_lsn, lsn_to_int, wait_until

DECODERS = ("wal2json", "pgoutput")

PARTITIONS = 4
RECREATED = "recreating the kafka producer"
# Log lines that mean the replication connection was lost or re-made.
RECONNECT_SIGNS = ("replication stream ended", "could not read from postgres",
                   "retrying in", "streaming from slot")


# ---------------------------------------------------------------------------
# writing outbox rows


class Feed:
    """Commits outbox rows of one aggregate type (so one topic) and keeps
    what committed: ids in commit order and, per key, the sequence numbers
    carried in the payloads. A transaction whose COMMIT got no answer (the
    server went away) is looked up by its ids once the server is back."""

    def __init__(self, pg, agg, keys=7, table="public.outbox", seed=None):
        self.pg = pg
        self.agg = agg
        self.table = table
        self.keys = ["%s-%d" % (agg, i) for i in range(keys)]
        self.ids = []
        self.committed = collections.defaultdict(list)  # key -> [seq]
        self._next_seq = collections.Counter()
        self._rng = random.Random(seed if seed is not None else agg)
        self._conn = None

    def commit(self, n, before=None, after=None):
        """Commits one transaction: before(cursor) if given, then n rows in
        one INSERT, then after(cursor) if given. Returns the rows' ids, or
        [] if it did not commit."""
        rows = []
        for _ in range(n):
            key = self._rng.choice(self.keys)
            self._next_seq[key] += 1
            rows.append((str(uuid.uuid4()), self.agg, key,
                         "%s.changed" % self.agg,
                         json.dumps({"key": key,
                                     "seq": self._next_seq[key]})))
        ids = [r[0] for r in rows]
        try:
            if self._conn is None:
                self._conn = self.pg.connect()
                self._conn.autocommit = False
            with self._conn.cursor() as cur:
                if before is not None:
                    before(cur)
                if rows:
                    psycopg2.extras.execute_values(
                        cur, "INSERT INTO %s (id, aggregate_type, "
                        "aggregate_id, event_type, payload) VALUES %%s"
                        % self.table, rows,
                        template="(%s, %s, %s, %s, %s::jsonb)")
                if after is not None:
                    after(cur)
            self._conn.commit()
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            self.close()
            if not rows or not self._landed(ids):
                return []
        for _, _, key, _, payload in rows:
            self.committed[key].append(json.loads(payload)["seq"])
        self.ids += ids
        return ids

    def _landed(self, ids):
        """Whether the rows ids exist (waiting for the server to answer)."""
        def look():
            try:
                n = self.pg.sql("SELECT count(*) FROM %s WHERE id::text = "
                                "ANY(%%s)" % self.table, (ids,))[0][0]
                return "yes" if n else "no"
            except psycopg2.OperationalError:
                return None
        return wait_until(look, 90, 0.2, "postgres answers again") == "yes"

    def close(self):
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg2.Error:
                pass
            self._conn = None


class Writer(threading.Thread):
    """A thread committing transactions of `rows` rows through a Feed every
    `pause` seconds until the with-block ends (steady insert load); after
    `most` transactions, when given, one a second (bounds what a slow
    machine writes while the load goes on)."""

    def __init__(self, feed, rows=5, pause=0.02, most=None):
        super().__init__(daemon=True)
        self.feed = feed
        self.rows = rows
        self.pause = pause
        self.most = most
        self.txns = 0
        self.error = None
        self._halt = threading.Event()

    def run(self):
        try:
            while not self._halt.is_set():
                if self.feed.commit(self.rows):
                    self.txns += 1
                slow = self.most is not None and self.txns >= self.most
                self._halt.wait(1.0 if slow else self.pause)
        except BaseException as e:  # reported by __exit__
            self.error = e

    def wait_txns(self, more, timeout=60):
        """Waits until `more` further transactions have committed."""
        target = self.txns + more
        wait_until(lambda: self.error is not None or self.txns >= target,
                   timeout, 0.05, "writer committed %d transactions" % target)
        if self.error is not None:
            raise self.error

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self._halt.set()
        self.join(120)
        self.feed.close()
        assert not self.is_alive(), "writer thread hangs"
        if self.error is not None and exc[0] is None:
            raise self.error
        return False


# ---------------------------------------------------------------------------
# reading what was published


def make_topic(broker, agg):
    topic = "outbox.event.%s" % agg
    broker.create_topic(topic, PARTITIONS)
    return topic


def id_counts(records):
    return collections.Counter(
        (header(r, "id") or b"<no id>").decode() for r in records)


def collect_all(consumer, topic, ids, timeout=90):
    """Reads topic until every id in ids was seen (re-reading from the
    beginning while some are missing) or timeout; returns the records."""
    deadline = time.monotonic() + timeout
    want = set(ids)
    while True:
        left = max(1.0, deadline - time.monotonic())
        records = consumer.collect([topic], len(want), timeout=left,
                                   settle=1.5)
        if want <= set(id_counts(records)) or time.monotonic() >= deadline:
            return records
        time.sleep(0.5)


def check_delivery(records, ids, exactly_once):
    """Every id of ids published (exactly once if exactly_once), nothing
    else."""
    counts = id_counts(records)
    missing = [i for i in ids if counts[i] == 0]
    extra = sorted(set(counts) - set(ids))
    dups = {i: n for i, n in counts.items() if n > 1}
    problems = []
    if missing:
        problems.append("%d missing (e.g. %s)" % (len(missing), missing[:3]))
    if extra:
        problems.append("%d unexpected (e.g. %s)" % (len(extra), extra[:3]))
    if exactly_once and dups:
        problems.append("%d duplicated (e.g. %s)"
                        % (len(dups), list(dups.items())[:3]))
    assert not problems, "%d records for %d committed events: %s" % (
        len(records), len(ids), "; ".join(problems))


def delivery_mode(d):
    """deploy/README.md "Delivery guarantees": no duplicates within one producer; a producer recreated
    after a fatal error republishes from the slot (at-least-once). True
    means exactly once is required."""
    return RECREATED not in d.log_text()


def check_first_deliveries_in_commit_order(records, feed):
    """Per key, the sequence numbers in order of their first appearance in
    the partition are the committed ones in commit order."""
    first = collections.defaultdict(list)
    seen = set()
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        body = json.loads(r["value"])
        if (body["key"], body["seq"]) not in seen:
            seen.add((body["key"], body["seq"]))
            first[body["key"]].append(body["seq"])
    for key, seqs in feed.committed.items():
        assert first[key] == seqs, (
            "key %s: first deliveries %s, commit order %s"
            % (key, first[key][:40], seqs[:40]))


# ---------------------------------------------------------------------------
# the slot and the daemon


def wait_streaming(pg, slot, timeout=30, other_than=None):
    """Waits until a walsender streams from slot (another than pid
    other_than); returns its pid."""
    def pid():
        s = pg.slot(slot)
        if s and s["active"] and s["active_pid"] != other_than:
            return s["active_pid"]
        return None
    return wait_until(pid, timeout, 0.1, "slot %s streamed from" % slot)


def confirmed(pg, slot):
    return pg.slot(slot)["confirmed_flush_lsn_int"]


def wait_confirmed(pg, slot, pos, timeout=20):
    """Waits until the slot's confirmed_flush_lsn reaches pos."""
    wait_until(lambda: confirmed(pg, slot) >= pos, timeout, 0.2,
               "slot %s confirmed to %s (is %s)"
               % (slot, int_to_lsn(pos), pg.slot(slot)["confirmed_flush_lsn"]))


class CommitProbe:
    """A wal2json slot of the test's own that tells where the transactions
    touching table (or emitting outbox messages) committed."""

    def __init__(self, pg, name, table):
        self.pg = pg
        self.name = name[:63]
        self.table = table
        # Servers without wal2json (the version matrix): pgoutput.
        self.pgoutput = None
        if not harness.wal2json_required():
            self.pgoutput = harness.PgoutputCommitProbe(pg, self.name, table)
            return
        pg.sql("SELECT pg_create_logical_replication_slot(%s, 'wal2json')",
               (self.name,))

    def commits(self):
        """[(commit lsn, end lsn)] in commit order since the probe was
        made."""
        if self.pgoutput:
            return [(lsn, end) for _, lsn, end, changed
                    in self.pgoutput.transactions() if changed]
        rows = self.pg.sql(
            "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, "
            "'format-version', '2', 'include-lsn', '1', 'add-tables', %s, "
            "'add-msg-prefixes', 'outbox')", (self.name, self.table))
        out, changed = [], False
        for (data,) in rows:
            rec = json.loads(data)
            if rec["action"] == "B":
                changed = False
            elif rec["action"] in ("I", "M"):
                changed = True
            elif rec["action"] == "C" and changed:
                out.append((lsn_to_int(rec["lsn"]), lsn_to_int(rec["nextlsn"])))
        return out


@pytest.fixture
def probe(pg, slot_name):
    """probe(table='public.outbox') -> a CommitProbe, dropped at the end."""
    made = []

    def make(table="public.outbox"):
        p = CommitProbe(pg, "probe%d_%s" % (len(made), slot_name), table)
        made.append(p)
        return p
    yield make
    for p in made:
        if p.pgoutput:
            p.pgoutput.drop()
        else:
            p.pg.drop_slot(p.name)


def on_cluster(cluster, **settings):
    """Overrides for outboxd_factory: connect to cluster, plus
    section_key=value settings (postgres_standby_retry_ms=500)."""
    out = {"postgres": {"conninfo": cluster.conninfo()}}
    for name, value in settings.items():
        section, key = name.split("_", 1)
        out.setdefault(section, {})[key] = value
    return out


def expect_exit(d, code, *needles, timeout=60):
    """Waits for outboxd to exit; asserts its exit code and that its log
    names every needle (case-insensitive)."""
    try:
        rc = d.wait(timeout)
    except Exception:
        raise AssertionError("outboxd did not exit in %ds; log:\n%s"
                             % (timeout, d.log_tail()))
    log = d.log_text()
    assert rc == code, "outboxd exited %s, expected %s; log:\n%s" % (
        rc, code, d.log_tail())
    for n in needles:
        assert n.lower() in log.lower(), "log does not name %r:\n%s" % (
            n, d.log_tail())
    return log


def http_get(port, path):
    """(status, body) of GET http://127.0.0.1:port/path."""
    url = "http://127.0.0.1:%d%s" % (port, path)
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


def scrape(port):
    """{'name{labels}': value} from /metrics."""
    status, body = http_get(port, "/metrics")
    assert status == 200, (status, body)
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def vm_hwm_kb(pid):
    """Peak resident set size of pid (VmHWM) in kB."""
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M).group(1))


# ---------------------------------------------------------------------------
# 1-2. Postgres connection dropped, server restarted


def test_replication_connection_terminated_resumes_exactly_once(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """pg_terminate_backend on the walsender three times while rows are
    being inserted: outboxd reconnects each time and, inside one process,
    publishes every event exactly once (deploy/README.md, "Delivery guarantees" and "Failure modes")."""
    agg = "drop_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory()
    pid = wait_streaming(pg, slot_name)
    feed = Feed(pg, agg)
    with Writer(feed, rows=25, pause=0.01) as w:
        for _ in range(3):
            w.wait_txns(15)
            pg.sql("SELECT pg_terminate_backend(active_pid) FROM "
                   "pg_replication_slots WHERE slot_name = %s", (slot_name,))
            pid = wait_streaming(pg, slot_name, 30, other_than=pid)
        w.wait_txns(15)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids,
                   exactly_once=True)
    assert d.running(), d.log_tail()
    assert d.log_text().count("streaming from slot") >= 4, d.log_tail()


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restart_resumes_without_duplicates(
        own_cluster, mode, broker, consumer, outboxd_factory, slot_name,
        test_id):
    """pg_ctl restart -m fast / -m immediate while rows are being inserted:
    outboxd reconnects, and every event arrives once even though the slot's
    confirmed position may go back (already handed-over transactions are
    skipped by their end LSN)."""
    cluster = own_cluster()
    agg = "restart_%s_%s" % (mode, test_id)
    topic = make_topic(broker, agg)
    d = outboxd_factory(on_cluster(cluster))
    wait_streaming(cluster, slot_name)
    feed = Feed(cluster, agg)
    with Writer(feed, rows=20, pause=0.01) as w:
        w.wait_txns(30)
        cluster.restart(mode)
        wait_streaming(cluster, slot_name, 60)
        w.wait_txns(30)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids,
                   exactly_once=True)
    assert d.running(), d.log_tail()
    # A routine restart is no operator's error: its lines are warnings.
    errors = [line for line in d.log_text().splitlines() if " error: " in line]
    assert not errors, errors


def test_broker_outage_holds_slot_then_delivers(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, probe):
    """Every broker down for 8 s while rows are being inserted: the slot is
    never confirmed up to the end of the first transaction committed during
    the outage; after `up all` every event arrives once, the slot moves past
    the last one and the daemon is still running."""
    agg = "outage_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory()
    wait_streaming(pg, slot_name)
    feed = Feed(pg, agg)
    feed.commit(5)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)
    wait_confirmed(pg, slot_name, pg.wal_lsn())

    p = probe()
    broker.cmd("down all")
    down_at = time.monotonic()
    try:
        with Writer(feed, rows=5, pause=0.05) as w:
            first_end = wait_until(p.commits, 15, 0.1,
                                   "a commit during the outage")[0][1]
            while time.monotonic() - down_at < 8:
                s = pg.slot(slot_name)
                assert s["confirmed_flush_lsn_int"] < first_end, (
                    "slot confirmed %s with every broker down; the first "
                    "unacknowledged transaction ends at %s"
                    % (s["confirmed_flush_lsn"], int_to_lsn(first_end)))
                assert d.running(), d.log_tail()
                time.sleep(0.2)
            broker.cmd("up all")
            w.wait_txns(10)
    finally:
        broker.cmd("up all")
    check_delivery(collect_all(consumer, topic, feed.ids, timeout=120),
                   feed.ids, exactly_once=delivery_mode(d))
    wait_confirmed(pg, slot_name, p.commits()[-1][1], timeout=30)
    assert d.running(), d.log_tail()
    # A broker outage outboxd rides out is logged as warnings, all brokers
    # down once, and the brokers' return is logged too.
    log = d.log_text()
    assert not [line for line in log.splitlines() if " error: " in line], d.log_tail()
    assert log.count("all brokers are down") == 1, d.log_tail()
    assert "broker(s) up again" in log, d.log_tail()


def test_request_errors_are_retried(pg, broker, consumer, outboxd_factory,
                                    slot_name, test_id):
    """InitProducerId fails three times before the producer gets its id,
    then Produce requests fail with NOT_LEADER_FOR_PARTITION and
    REQUEST_TIMED_OUT: all retried, every event arrives once."""
    agg = "reqerr_%s" % test_id
    topic = make_topic(broker, agg)
    broker.cmd("error 22 COORDINATOR_NOT_AVAILABLE 3")
    d = outboxd_factory({"kafka": {"debug": "eos"}})
    wait_streaming(pg, slot_name)
    feed = Feed(pg, agg)
    for _ in range(5):
        feed.commit(20)
    for err in ("NOT_LEADER_FOR_PARTITION", "REQUEST_TIMED_OUT"):
        broker.cmd("error 0 %s 4" % err)
        for _ in range(5):
            feed.commit(20)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids,
                   exactly_once=delivery_mode(d))
    assert re.search(r"(?i)coordinator.not.available", d.log_text()), (
        "the InitProducerId errors never reached the producer:\n"
        + d.log_tail())
    wait_confirmed(pg, slot_name, pg.wal_lsn())
    assert d.running(), d.log_tail()


def test_producer_fatal_error_recreates_producer(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A real librdkafka fatal error after the 50th record
    (OUTBOXD_TEST_FATAL_AFTER) while a backlog streams: the producer is
    recreated once, every event
    arrives at least once, the process keeps running and the slot ends
    confirmed past every event."""
    agg = "fatal_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory(env={"OUTBOXD_TEST_FATAL_AFTER": "50"}, start=False)
    rc, out, err = d.run_cmd(["slot", "create"])
    assert rc == 0, (rc, out, err)
    # A backlog, so that records are produced back to back when the
    # fatal error strikes (as under load): the 51st follows the 50th
    # before any delivery report or error callback is served.
    feed = Feed(pg, agg)
    for _ in range(10):
        feed.commit(20)
    d.start()
    d.wait_log(RECREATED, 30)
    for _ in range(5):
        feed.commit(20)
    end = pg.wal_lsn()
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids,
                   exactly_once=False)
    wait_confirmed(pg, slot_name, end)
    assert d.running(), d.log_tail()
    assert d.log_text().count(RECREATED) == 1, d.log_tail()


# ---------------------------------------------------------------------------
# 6. crashes under load


def test_kill9_five_times_under_load(pg, broker, consumer, outboxd_factory,
                                     slot_name, test_id):
    """A writer commits small transactions for ~15 s while outboxd is
    killed with SIGKILL five times at random moments and restarted: every
    event arrives at least once and, per key, first deliveries follow
    commit order."""
    agg = "crash_%s" % test_id
    topic = make_topic(broker, agg)
    broker.cmd("rtt all 10")  # keep records in flight at the kills
    d = outboxd_factory({"postgres": {"standby_retry_ms": 500}})
    pid = wait_streaming(pg, slot_name)
    rng = random.Random(test_id)
    feed = Feed(pg, agg, keys=11)
    started = time.monotonic()
    with Writer(feed, rows=4, pause=0.005):
        for _ in range(5):
            time.sleep(rng.uniform(0.5, 2.0))
            d.kill9()
            time.sleep(rng.uniform(0.0, 0.3))
            d.start()
            pid = wait_streaming(pg, slot_name, 30, other_than=pid)
        time.sleep(max(0.0, 15 - (time.monotonic() - started)))
    broker.cmd("rtt all 0")
    end = pg.wal_lsn()
    records = collect_all(consumer, topic, feed.ids, timeout=120)
    check_delivery(records, feed.ids, exactly_once=False)
    check_first_deliveries_in_commit_order(records, feed)
    wait_confirmed(pg, slot_name, end, timeout=30)
    assert d.running(), d.log_tail()


# ---------------------------------------------------------------------------
# 6b. a clean stop, then a PostgreSQL restart


def test_clean_stop_then_postgres_restart_publishes_nothing_again(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """outboxd streams events for a few seconds and is stopped with
    SIGTERM (it confirms everything); then PostgreSQL restarts cleanly (a
    maintenance window, a reboot) and outboxd starts again: the slot
    starts where outboxd confirmed, and nothing is published twice.
    Before PostgreSQL 17 a logical slot's confirmed position reaches disk
    only when its restart_lsn moves, not at a clean shutdown's checkpoint:
    before outboxd marked it at its stop (slotsave.h), the slot went back
    to its last save and all 12,740 events of such a run came again
    (PostgreSQL 15). PostgreSQL 17 saves it at that checkpoint itself."""
    agg = "cleanstop_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory()
    wait_streaming(pg, slot_name)
    feed = Feed(pg, agg, keys=5)
    for _ in range(40):
        feed.commit(10)
        time.sleep(0.02)
    feed.close()
    records = collect_all(consumer, topic, feed.ids)
    check_delivery(records, feed.ids, exactly_once=True)
    d.stop()
    confirmed = pg.slot(slot_name)["confirmed_flush_lsn_int"]
    pg.restart("fast")
    assert pg.slot(slot_name)["confirmed_flush_lsn_int"] == confirmed
    d.start()
    wait_streaming(pg, slot_name)
    feed.commit(1)
    feed.close()
    records = collect_all(consumer, topic, feed.ids)
    check_delivery(records, feed.ids, exactly_once=True)


# ---------------------------------------------------------------------------
# 7-8. bad events


def nullable_outbox(pg, name):
    """An outbox table whose columns may all be NULL."""
    pg.sql("CREATE TABLE public.%s (id text, aggregate_type text, "
           "aggregate_id text, event_type text, payload jsonb, headers jsonb, "
           "created_at timestamptz NOT NULL DEFAULT now())" % name)
    return "public." + name


def emit(transactional, content):
    """A before= step for Feed.commit: pg_logical_emit_message."""
    return lambda cur: cur.execute(
        "SELECT pg_logical_emit_message(%s, 'outbox', %s)",
        (transactional, json.dumps(content)))


def test_bad_events_are_dead_lettered(pg, broker, consumer, outboxd_factory,
                                      slot_name, test_id):
    """on_bad_event=dlq: a NULL key, a NULL id, a headers value that is not
    an object, a message without the topic's column, a non-transactional
    message and a 3 MB payload each become one dead-letter record (headers
    `error` and `source-lsn`; the too-large one headers only with
    `payload-size`), counted by reason in /metrics; the good events around
    them arrive once, the daemon keeps running and the slot moves past."""
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "bad_%s" % test_id
    topic = make_topic(broker, agg)
    port = harness.free_port()
    d = outboxd_factory({"outbox": {"table": table},
                         "http": {"listen": "127.0.0.1:%d" % port}})
    dlq = d.config["outbox"]["dlq_topic"]
    broker.create_topic(dlq, PARTITIONS)
    wait_streaming(pg, slot_name)
    start = pg.wal_lsn()

    def row(id_, key, payload="{}", headers=None):
        return lambda cur: cur.execute(
            "INSERT INTO %s (id, aggregate_type, aggregate_id, event_type, "
            "payload, headers) VALUES (%%s, %%s, %%s, 'bad.x', %%s::jsonb, "
            "%%s::jsonb)" % table, (id_, agg, key, payload, headers))

    big = "x" * (3 * 1024 * 1024)
    bad_steps = [
        row("nokey-%s" % test_id, None),
        row(None, "noid-%s" % test_id),
        row("hdr-%s" % test_id, "k-hdr", headers="[1, 2]"),
        emit(True, {"id": "notype-%s" % test_id, "aggregate_id": "k",
                    "payload": {}}),
        None,  # the non-transactional message, on its own below
        row("big-%s" % test_id, "k-big", json.dumps({"blob": big})),
    ]
    feed = Feed(pg, agg, table=table)
    feed.commit(5)
    for step in bad_steps:
        if step is None:
            feed.commit(0, emit(False, {"id": "nontx-%s" % test_id,
                                        "aggregate_type": agg,
                                        "aggregate_id": "k", "payload": {}}))
        else:
            feed.commit(3, step)
    feed.commit(5)
    end = pg.wal_lsn()

    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)
    dead = consumer.collect([dlq], len(bad_steps), timeout=60, settle=1.5)
    by_tag = {}
    for r in dead:
        hid = (header(r, "id") or b"").decode()
        if r["key"] == "noid-%s" % test_id:
            tag = "noid"
        elif r["value"] and b"nontx-" in r["value"]:
            tag = "nontx"
        else:
            tag = hid.split("-")[0]
        assert tag not in by_tag, "two dead-letter records for %s" % tag
        by_tag[tag] = r
        assert header(r, "error"), r["headers"]
        src = lsn_to_int(header(r, "source-lsn").decode())
        assert start <= src <= end, (int_to_lsn(src), r["headers"])
    assert sorted(by_tag) == sorted(["nokey", "noid", "hdr", "notype",
                                     "nontx", "big"]), by_tag.keys()
    for tag, word in (("nokey", "aggregate_id"), ("noid", "id"),
                      ("hdr", "headers"), ("notype", "aggregate_type")):
        assert word in header(by_tag[tag], "error").decode(), (
            tag, by_tag[tag]["headers"])
    size = pg.sql("SELECT octet_length(payload::text) FROM %s WHERE id = %%s"
                  % table, ("big-%s" % test_id,))[0][0]
    assert by_tag["big"]["value"] is None
    assert header(by_tag["big"], "payload-size") == str(size).encode(), (
        by_tag["big"]["headers"])

    reasons = {"missing-key": 1, "missing-id": 1, "bad-headers": 1,
               "missing-topic-column": 1, "non-transactional-message": 1,
               "too-large": 1}
    name = 'outboxd_events_dead_lettered_total{reason="%s"}'
    wait_until(lambda: all(scrape(port).get(name % k) == v
                           for k, v in reasons.items()), 10, 0.3,
               "dead-letter counters by reason")
    wait_confirmed(pg, slot_name, end, timeout=15)
    assert d.running(), d.log_tail()


def test_bad_event_halt_exits_without_confirming(
        pg, broker, consumer, outboxd_factory, slot_name, test_id, probe):
    """on_bad_event=halt: exit 1 at a bad event, the slot confirmed before
    the end of its transaction (so a restart halts on it again), the good
    events before it published."""
    agg = "halt_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory({"outbox": {"on_bad_event": "halt"}})
    wait_streaming(pg, slot_name)
    p = probe()
    feed = Feed(pg, agg)
    for _ in range(3):
        feed.commit(10)
    good = list(feed.ids)
    feed.commit(0, emit(True, {"id": "notype-%s" % test_id,
                               "aggregate_id": "k", "payload": {}}))
    bad_end = p.commits()[-1][1]
    expect_exit(d, 1, "halt")
    assert confirmed(pg, slot_name) < bad_end, (
        pg.slot(slot_name)["confirmed_flush_lsn"], int_to_lsn(bad_end))
    check_delivery(collect_all(consumer, topic, good), good, True)
    d.start()
    expect_exit(d, 1, "halt")
    assert confirmed(pg, slot_name) < bad_end


def test_halt_during_sigterm_flush_exits_1(
        pg, broker, outboxd_factory, slot_name, test_id, probe):
    """on_bad_event=halt and a SIGTERM while the flush still waits for a
    record that the broker then refuses alone: the daemon halted, so it
    exits 1 (a clean 0 would hide the halt from systemd), without
    confirming the record's transaction."""
    agg = "haltflush_%s" % test_id
    make_topic(broker, agg)
    d = outboxd_factory({"outbox": {"on_bad_event": "halt"}})
    wait_streaming(pg, slot_name)
    p = probe()
    # The first refusal makes the record a suspect; the second, when it is
    # produced alone, is its own. Slow responses keep it in flight while
    # the SIGTERM arrives.
    broker.cmd("error 0 INVALID_RECORD 2")
    broker.cmd("rtt all 500")
    feed = Feed(pg, agg)
    feed.commit(1)
    end = p.commits()[-1][1]
    d.wait_log("alone", 30)
    d.terminate()
    expect_exit(d, 1, "halt")
    assert confirmed(pg, slot_name) < end, (
        pg.slot(slot_name)["confirmed_flush_lsn"], int_to_lsn(end))


# ---------------------------------------------------------------------------
# 9. two daemons on one slot


def test_standby_takes_over_after_kill9(pg, broker, consumer,
                                        outboxd_factory, slot_name, test_id):
    """A second outboxd on a held slot waits as a standby (/readyz 503
    `standby`); after the active one is killed it takes over within 10 s
    and publishes what is inserted after the kill."""
    agg = "standby_%s" % test_id
    topic = make_topic(broker, agg)
    port = harness.free_port()
    active = outboxd_factory({"postgres": {"standby_retry_ms": 500}})
    pid = wait_streaming(pg, slot_name)
    standby = outboxd_factory({"postgres": {"standby_retry_ms": 500},
                               "http": {"listen": "127.0.0.1:%d" % port}})
    standby.wait_log("as a standby", 20)
    wait_until(lambda: (lambda s, b: s == 503 and b.strip() == "standby")(
        *http_get(port, "/readyz")), 10, 0.2, "/readyz 503 standby")
    feed = Feed(pg, agg)
    feed.commit(10)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)

    mark = standby.log_size()
    active.kill9()
    standby.wait_log("streaming from slot", 10, since=mark)
    wait_streaming(pg, slot_name, 10, other_than=pid)
    after = feed.commit(10)
    records = collect_all(consumer, topic, feed.ids)
    check_delivery(records, feed.ids, exactly_once=False)
    assert all(n == 1 for i, n in id_counts(records).items() if i in after)
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, 10, 0.2,
               "/readyz 200 after the take-over")


# ---------------------------------------------------------------------------
# 10. operator errors


def other_plugin_slot(pg, slot):
    pg.sql("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')",
           (slot,))


@pytest.mark.parametrize("overrides,args,prepare,code,needles", [
    ({}, ["-s", "outbox.table=public.nope"], None, 1, ["public.nope"]),
    ({}, ["-s", "outbox.key_column=nope"], None, 1, ["column nope"]),
    ({}, ["-s", "outbox.no_such_key=1"], None, 2, ["outbox.no_such_key"]),
    ({"kafka2": {"x": "1"}}, [], None, 2, ["kafka2"]),
    ({"postgres": {"bogus_key": "1"}}, [], None, 2, ["postgres.bogus_key"]),
    ({}, [], other_plugin_slot, 1, ["test_decoding"]),
], ids=["table-missing", "column-missing", "unknown-key-flag",
        "unknown-section", "unknown-key-file", "other-plugin"])
def test_operator_errors(pg, outboxd_factory, slot_name, overrides, args,
                         prepare, code, needles):
    """Problems only an operator can fix end the daemon with exit 1 (or 2
    for configuration) and a message naming the cause."""
    if prepare is not None:
        prepare(pg, slot_name)
    d = outboxd_factory(overrides, extra_args=args)
    expect_exit(d, code, *needles)


def test_invalidated_slot_exits_1(own_cluster, outboxd_factory, slot_name):
    """A slot invalidated by max_slot_wal_keep_size (wal_status lost),
    with on_slot_lost = halt: exit 1 saying so (test_slot_recovery.py
    recovers one)."""
    cluster = own_cluster(max_slot_wal_keep_size="'1MB'")
    d = outboxd_factory(on_cluster(cluster, postgres_on_slot_lost="halt"))
    wait_streaming(cluster, slot_name)
    assert d.stop() == 0, d.log_tail()
    invalidate_slot(cluster, slot_name)
    d.start()
    expect_exit(d, 1, "invalidated")


def invalidate_slot(cluster, slot):
    """Writes and checkpoints WAL on cluster (which must have a small
    max_slot_wal_keep_size) until slot is invalidated (wal_status lost)."""
    cluster.sql("CREATE TABLE IF NOT EXISTS filler (t text)")

    def lost():
        cluster.sql("INSERT INTO filler SELECT repeat(md5(g::text), 8) "
                    "FROM generate_series(1, 25000) g")
        cluster.sql("SELECT pg_switch_wal()")
        cluster.sql("CHECKPOINT")
        return cluster.slot(slot)["wal_status"] == "lost"
    wait_until(lost, 120, 0, "slot %s invalidated" % slot)


def test_wal_level_replica(own_cluster, outboxd_factory, slot_name):
    """wal_level=replica: `outboxd run` exits 1 naming wal_level; `outboxd
    check` exits 2 and lists every problem, wal_level among them."""
    cluster = own_cluster(wal_level="replica")
    d = outboxd_factory(on_cluster(cluster), start=False)
    rc, out, err = d.run_cmd(["check", "-s", "outbox.table=public.nope"])
    failed = [line for line in out.splitlines() if " FAIL " in line]
    assert rc == 2, (rc, out, err)
    assert any("wal_level" in line for line in failed), out
    assert any("public.nope" in line for line in failed), out
    d.start()
    expect_exit(d, 1, "wal_level")


# ---------------------------------------------------------------------------
# 11-12. volume


def test_300k_row_transaction_in_bounded_memory(pg, broker, consumer,
                                                outboxd_factory, slot_name,
                                                test_id):
    """One transaction of 300,000 rows (~200-byte payloads) streams through
    with peak RSS under 64 MB, and every row arrives once."""
    n = 300000
    agg = "bulk_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory()
    wait_streaming(pg, slot_name)
    peak = [vm_hwm_kb(d.pid)]
    halt = threading.Event()

    def sample():
        while not halt.wait(0.25) and d.running():
            try:
                peak.append(vm_hwm_kb(d.pid))
            except OSError:
                return
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        pg.sql("INSERT INTO public.outbox (aggregate_type, aggregate_id, "
               "event_type, payload) SELECT %s, 'k' || (g %% 1000), 'bulk', "
               "jsonb_build_object('n', g, 'pad', repeat('p', 170)) "
               "FROM generate_series(1, %s) g", (agg, n))
        ids = [r[0] for r in pg.sql("SELECT id::text FROM public.outbox "
                                    "WHERE aggregate_type = %s", (agg,))]
        assert len(ids) == n
        records = collect_all(consumer, topic, ids, timeout=300)
        peak.append(vm_hwm_kb(d.pid))
    finally:
        halt.set()
        sampler.join(5)
    check_delivery(records, ids, exactly_once=True)
    print("300,000 rows: peak RSS %d kB" % max(peak))
    assert max(peak) < 64 * 1024, "peak RSS %d kB" % max(peak)
    assert d.running(), d.log_tail()


def test_long_silence_is_not_death(pg, broker, consumer, outboxd_factory,
                                   slot_name, test_id):
    """A 3-million-row transaction on another table (filtered out; PG15
    sends nothing for it until its commit is decoded): outboxd keeps its
    connection, and an event committed after it arrives."""
    agg = "silence_%s" % test_id
    topic = make_topic(broker, agg)
    filler = "filler_%s" % test_id
    pg.sql("CREATE TABLE %s (n int)" % filler)
    d = outboxd_factory()
    pid = wait_streaming(pg, slot_name)
    feed = Feed(pg, agg)
    feed.commit(1)
    check_delivery(collect_all(consumer, topic, feed.ids), feed.ids, True)
    mark = d.log_size()
    started = time.monotonic()
    pg.sql("INSERT INTO %s SELECT g FROM generate_series(1, 3000000) g"
           % filler)
    feed.commit(1)
    check_delivery(collect_all(consumer, topic, feed.ids, timeout=240),
                   feed.ids, True)
    took = time.monotonic() - started
    log = d.log_text()[mark:]
    for sign in RECONNECT_SIGNS:
        assert sign not in log, "%r in the log during the silence:\n%s" % (
            sign, log[-4000:])
    assert pg.slot(slot_name)["active_pid"] == pid
    assert d.running(), d.log_tail()
    print("3M-row transaction and the event after it: %.1fs" % took)
    pg.sql("DROP TABLE %s" % filler)


@pytest.mark.decoders("wal2json")
@pytest.mark.no_version_matrix
def test_stream_broken_while_queue_full_loses_nothing(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The walsender is killed while outboxd waits for producer queue room
    in the middle of a transaction: after the reconnect every event
    arrives exactly once (the one waiting for room is not skipped)."""
    topic = make_topic(broker, "rq_%s" % test_id)
    port = harness.free_port()
    d = outboxd_factory({"postgres": {"status_interval_ms": 200},
                         "kafka": {"queue.buffering.max.messages": "5"},
                         "http": {"listen": "127.0.0.1:%d" % port}})
    pid = wait_streaming(pg, slot_name)
    feed = Feed(pg, "rq_%s" % test_id)
    broker.cmd("down all")
    try:
        feed.commit(30)
        # outboxd now waits for queue room: 5 of the 30 are in flight.
        wait_until(lambda: scrape(port).get("outboxd_inflight_events", 0)
                   >= 5, 30, 0.1, "the producer's queue full")
        pg.sql("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
               "WHERE slot_name = %s", (slot_name,))
        wait_streaming(pg, slot_name, 30, other_than=pid)
        time.sleep(1.0)
    finally:
        broker.cmd("up all")
    recs = collect_all(consumer, topic, feed.ids, timeout=60)
    check_delivery(recs, feed.ids, exactly_once=True)
    assert d.running(), d.log_tail()


def _rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


@pytest.mark.decoders("wal2json")
@pytest.mark.no_version_matrix
def test_filtered_transactions_take_no_memory_while_events_wait(
        pg, broker, outboxd_factory, slot_name, test_id):
    """100,000 transactions on another table while an outbox event waits
    for a down broker: outboxd's memory does not grow with them."""
    agg = "mem_%s" % test_id
    make_topic(broker, agg)
    port = harness.free_port()
    d = outboxd_factory({"http": {"listen": "127.0.0.1:%d" % port}})
    wait_streaming(pg, slot_name)
    pg.sql("CREATE TABLE IF NOT EXISTS filtered_%s (i int)" % test_id)
    pg.sql("CREATE OR REPLACE PROCEDURE many_%s(n int) LANGUAGE plpgsql AS $$ BEGIN "
           "FOR i IN 1..n LOOP INSERT INTO filtered_%s VALUES (i); COMMIT; END LOOP; "
           "END $$" % (test_id, test_id))
    broker.cmd("down all")
    try:
        pg.sql("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
               "VALUES (%s, 'k1', 'e', '{}')", (agg,))
        wait_until(lambda: scrape(port).get("outboxd_inflight_events", 0)
                   == 1, 30, 0.1, "the event waits in flight")
        before = _rss_kb(d.pid)
        pg.sql("CALL many_%s(100000)" % test_id)
        # outboxd reads the 100,000 B/C pairs, and one more after them.
        mark = pg.wal_lsn()
        pg.sql("INSERT INTO filtered_%s VALUES (0)" % test_id)
        wait_until(lambda: scrape(port).get("outboxd_received_lsn", 0)
                   >= mark, 120, 0.2, "the filtered transactions read")
        after = _rss_kb(d.pid)
    finally:
        broker.cmd("up all")
    assert after - before < 2048, (before, after)
    assert d.running(), d.log_tail()


@pytest.mark.decoders("wal2json")
@pytest.mark.no_version_matrix
def test_sigterm_while_slot_creation_waits_for_a_transaction(
        pg, outboxd_factory, slot_name, test_id):
    """Creating a slot waits for every running transaction to end. Meanwhile
    outboxd says what it waits for, stays alive, and SIGTERM stops it at
    once (the creation is cancelled) with exit 0."""
    conn = pg.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS held_%s (i int)" % test_id)
    conn.autocommit = False
    with conn.cursor() as cur:
        cur.execute("INSERT INTO held_%s VALUES (1)" % test_id)  # holds an xid
    try:
        d = outboxd_factory()
        d.wait_log(r"still waiting for the server.*running transactions", timeout=20)
        assert d.running(), d.log_tail()
        d.terminate()
        # The held transaction never ends: an outboxd waiting for it
        # would not exit at all.
        assert d.wait(30) == 0, d.log_tail()
    finally:
        conn.rollback()
        conn.close()
