"""Failover: a primary and a hot standby of the test's own (made by copying
the primary's data directory: the version matrix's servers have no
pg_basebackup), crashed and promoted under steady writes; the slot marker
that tells a first start from a lost slot; decoding on a standby; two
instances started at once; a standby that synchronized_standby_slots
names, down (a wait, never an exit).

What each test asserts depends on the server's major version, never
skipped: PostgreSQL 17+ has failover slots (nothing may be lost across a
promotion), 15 and 16 do not (outboxd must stop, naming the recovery, and
the recovery must publish what was lost); 16+ decodes on a standby, 15
must refuse it clearly. Every run prints its lost and duplicated counts.
"""

import datetime
import os
import re
import threading
import time
import uuid

import psycopg2
import pytest

import harness
from conftest import OUTBOX_SQL
from harness import lsn_to_int, wait_until
from test_faults import (check_delivery, collect_all, confirmed, expect_exit,
                         id_counts, make_topic, scrape, wait_confirmed)
from test_ops import http_get, wait_http

PHYSICAL_SLOT = "standby1"


def major():
    return harness.server_major()


@pytest.fixture
def pair(tmp_path):
    """A started primary (with public.outbox) and its started hot standby
    (17+: syncing failover slots, the primary waiting for it); destroyed at
    the end."""
    made = []
    primary = harness.PgCluster(str(tmp_path / "primary"))
    made.append(primary)
    try:
        primary.start()
        primary.run_file(str(OUTBOX_SQL))
        standby_conf = {}
        if major() >= 17:
            standby_conf["sync_replication_slots"] = "on"
        standby = harness.PgCluster.standby_of(
            primary, str(tmp_path / "standby"), PHYSICAL_SLOT, standby_conf)
        made.append(standby)
        standby.start()
        if major() >= 17:
            primary.sql("ALTER SYSTEM SET synchronized_standby_slots = %s",
                        (PHYSICAL_SLOT,))
            primary.sql("SELECT pg_reload_conf()")
        wait_until(lambda: primary.sql(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s",
            (PHYSICAL_SLOT,)) == [(True,)], 30, 0.2, "the standby streams")
        yield primary, standby
    finally:
        for c in made:
            c.destroy()


def both_hosts(primary, standby):
    """A multi-host conninfo that finds whichever of the two accepts
    writes."""
    return ("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=postgres "
            "user=postgres target_session_attrs=read-write connect_timeout=2"
            % (primary.port, standby.port))


def pgoutput_on(conninfo):
    """outboxd_factory overrides: pgoutput (every version has it) on
    conninfo."""
    return {"postgres": {"conninfo": conninfo, "plugin": "pgoutput",
                         "standby_retry_ms": 500}}


class Writer(threading.Thread):
    """Inserts one outbox row per transaction, every few ms, through a
    multi-host conninfo; a row counts as committed only once COMMIT
    returned. Across a crash it reconnects until the new primary answers;
    a COMMIT whose answer was lost is counted as in doubt."""

    def __init__(self, conninfo, agg, pace=0.01):
        super().__init__(daemon=True)
        self.conninfo = conninfo
        self.agg = agg
        self.pace = pace
        self.committed = []
        self.in_doubt = []
        self.stop_flag = threading.Event()

    def run(self):
        conn = None
        n = 0
        while not self.stop_flag.is_set():
            try:
                if conn is None:
                    conn = psycopg2.connect(self.conninfo)
                    conn.autocommit = True
                row_id = str(uuid.uuid4())
                n += 1
                try:
                    with conn.cursor() as cur:
                        cur.execute(
                            "INSERT INTO public.outbox (id, aggregate_type, "
                            "aggregate_id, event_type, payload) VALUES "
                            "(%s, %s, %s, 'e', jsonb_build_object('n', %s))",
                            (row_id, self.agg, "k%d" % (n % 7), n))
                    self.committed.append(row_id)
                except psycopg2.Error:
                    self.in_doubt.append(row_id)
                    raise
            except psycopg2.Error:
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.2)
                continue
            time.sleep(self.pace)
        if conn is not None:
            conn.close()

    def halt(self):
        self.stop_flag.set()
        self.join(30)


def count_delivery(consumer, topic, committed, in_doubt, timeout=90):
    """Reads topic until every committed id arrived (or timeout); returns
    (lost, duplicated, in-doubt delivered, the count of each id read)."""
    deadline = time.monotonic() + timeout
    want = set(committed)
    while True:
        records = consumer.collect([topic], len(want),
                                   timeout=max(1.0, deadline - time.monotonic()),
                                   settle=1.5)
        counts = id_counts(records)
        if want <= set(counts) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    lost = len(want - set(counts))
    dups = sum(n - 1 for i, n in counts.items() if n > 1)
    doubt = sum(1 for i in in_doubt if counts[i])
    unknown = set(counts) - want - set(in_doubt)
    assert not unknown, "ids never written: %s" % sorted(unknown)[:3]
    return lost, dups, doubt, counts


def assert_failover_ready(d, port):
    """check, slot status, the metric and /readyz all say the slot is
    failover-ready, and check sees the standby's copy ready."""
    rc, out, err = d.run_cmd(["check"])
    lines = {ln.split()[0] + (" copy" if ln.startswith("standby copy") else ""):
             ln for ln in out.splitlines() if ln.strip()}
    assert rc == 0, out + err
    assert " ok " in lines["failover"] and "synchronized_standby_slots" \
        in lines["failover"], out
    assert " ok " in lines["standby copy"] and "is synced" in \
        lines["standby copy"], out
    rc, out, err = d.run_cmd(["slot", "status"])
    assert rc == 0 and "failover             true" in out and \
        "failover_ready       yes" in out and \
        "standby_copy         ready" in out, out + err
    wait_until(lambda: "outboxd_slot_failover_ready 1" in
               (http_get(port, "/metrics")[1] or ""), 20, 0.5,
               "metric outboxd_slot_failover_ready 1")
    wait_until(lambda: http_get(port, "/readyz") == (
        200, "ready\nfailover-ready\n"), 20, 0.2, "/readyz ready, "
        "failover-ready")


def sync_ready(standby, slot):
    """The standby's copy of slot is synced and persisted (not temporary),
    so it survives a promotion."""
    s = standby.slot(slot)
    return bool(s and s["synced"] and not s["temporary"])


def kill_and_promote(primary, standby, writer, before=3.0, after=3.0):
    time.sleep(before)
    primary.kill9()
    standby.promote()
    time.sleep(after)
    writer.halt()


def test_crash_and_promote_loses_nothing(pair, broker, consumer,
                                         outboxd_factory, test_id,
                                         slot_name):
    """kill -9 of the primary under steady writes, then the standby is
    promoted. 17+: outboxd created its slot with FAILOVER, the standby
    synced it, and the same process goes on from the synced slot on the
    new primary (multi-host conninfo): nothing lost. 15 and 16: no copy of
    the slot survives, and the same process recovers it from the outbox
    table (never a fresh slot at a later position): nothing lost either,
    some events published twice."""
    primary, standby = pair
    agg = "fo_%s" % test_id
    topic = make_topic(broker, agg)
    hosts = both_hosts(primary, standby)
    port = harness.free_port()
    d = outboxd_factory({**pgoutput_on(hosts),
                         "http": {"listen": "127.0.0.1:%d" % port}})
    d.wait_log(r"streaming from slot", 40)
    writer = Writer(hosts, agg)
    writer.start()
    if major() >= 17:
        assert primary.slot(slot_name)["failover"] is True
        # Synced, and no longer temporary: a copy the slot sync worker has
        # not persisted yet is dropped at promotion. It is persisted once
        # the primary's slot moves its restart_lsn past the copy's, which
        # takes a running-transactions record (every 15 s by itself;
        # pg_log_standby_snapshot() writes one at once).
        t0 = time.monotonic()
        nudger = SnapshotNudger(primary)
        nudger.start()
        try:
            wait_until(lambda: sync_ready(standby, slot_name), 60, 0.2,
                       "the standby's copy of slot %s is sync-ready"
                       % slot_name)
        finally:
            nudger.halt()
        print("pg%d: the standby's copy was sync-ready after %.1f s"
              % (major(), time.monotonic() - t0))
        assert_failover_ready(d, port)
    wait_until(lambda: len(writer.committed) > 100, 60, 0.1,
               "more than 100 rows committed before the crash")
    kill_and_promote(primary, standby, writer, before=1.0)
    if major() < 17:
        # No copy of the slot survives the promotion: the same process
        # recovers it from the outbox table (on_slot_lost = recover, the
        # default), from the recovery point the standby replicated.
        d.wait_log(r"recovered replication slot %s in " % slot_name, 120)
        assert "is missing on the promoted server: recovering it" in d.log_text()
        assert scrape(port).get(
            'outboxd_slot_recoveries_total{reason="promoted"}') == 1
    else:
        d.wait_log(r"timeline 2", 60)
        d.wait_log(r"streaming from slot", 30, since=d.log_text().rfind(
            "timeline 2"))
    # Replication to the standby is asynchronous: a commit acknowledged
    # just before the crash may never have reached it, and is then gone
    # from the database itself. What outboxd must publish is every row the
    # promoted server has; with synchronized_standby_slots (17+) it must
    # also never have published a row the promoted server lacks.
    kept = set(r[0] for r in standby.sql(
        "SELECT id::text FROM public.outbox WHERE aggregate_type = %s",
        (agg,)))
    gone = set(writer.committed) - kept
    lost, dups, _, counts = count_delivery(
        consumer, topic, sorted(kept), writer.committed + writer.in_doubt)
    ghosts = set(counts) - kept
    print("failover pg%d: %d committed, %d in doubt, %d rows on the promoted "
          "server (%d acknowledged commits lost by asynchronous replication), "
          "%d lost, %d duplicated, %d published but not on the promoted server"
          % (major(), len(writer.committed), len(writer.in_doubt), len(kept),
             len(gone), lost, dups, len(ghosts)))
    assert len(writer.committed) > 100
    assert lost == 0, "%d of %d rows not published; log:\n%s" % (
        lost, len(kept), d.log_tail())
    if major() >= 17:
        assert not ghosts, "published, but not on the promoted server: %s" \
            % sorted(ghosts)[:3]
        # A new process on the promoted server alone takes the synced
        # slot too (no marker complaint: the slot is there).
        assert d.stop() == 0, d.log_tail()
        again = outboxd_factory(pgoutput_on(standby.conninfo()))
        again.wait_log(r"streaming from slot", 30)
        assert again.stop() == 0, again.log_tail()


# ---------------------------------------------------------------------------
# a standby that synchronized_standby_slots waits for, down

STALL_MS = 3000
WAIT_LINE = (r"(\S+) warning: logical replication is waiting for the standby "
             r"of replication slot %s, which the primary's "
             r"synchronized_standby_slots names" % PHYSICAL_SLOT)


def write_events(cluster, agg, n, per_txn=100):
    """Commits n outbox rows of aggregate type agg, per_txn a transaction;
    returns their ids."""
    ids = []
    conn = cluster.connect()
    conn.autocommit = False
    try:
        for first in range(0, n, per_txn):
            with conn, conn.cursor() as cur:
                cur.execute(
                    "INSERT INTO public.outbox (aggregate_type, aggregate_id, "
                    "event_type, payload) SELECT %s, 'k' || (g %% 7), 'e', "
                    "jsonb_build_object('n', g) FROM generate_series(%s, %s) "
                    "g RETURNING id::text",
                    (agg, first, min(first + per_txn, n) - 1))
                ids += [r[0] for r in cur.fetchall()]
    finally:
        conn.close()
    return ids


def log_age(match):
    """Seconds since the log line whose timestamp match.group(1) holds."""
    stamp = datetime.datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%fZ")
    return time.time() - stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


@pytest.mark.parametrize("until", ["standby-back", "parameter-amended"])
def test_standby_down_is_a_wait_never_an_exit(pair, broker, consumer,
                                              outboxd_factory, test_id,
                                              slot_name, until):
    """17+: the primary's synchronized_standby_slots names the standby's
    physical slot, and the standby stops (while outboxd streams, or before
    it starts). The walsender then sends nothing past what the standby has
    and warns that the slot "does not have active_pid", with SQLSTATE
    55000, the same as 18's "skipped loading publication". outboxd took
    every such warning for that one: it ended the stream, and after five
    tries exited 1 advising to drop the slot, none of the events written
    meanwhile published. Now the stream waits: outboxd keeps running,
    /readyz says ready until http.stall_after_ms has passed since the wait
    began, then waiting-for-standby, outboxd_standby_waits_total counts
    one wait, and the log names the slot and the fix, never dropping the
    slot. Once the standby streams again (or the parameter is amended and
    reloaded) every event written meanwhile is published exactly once and
    the slot confirms past them. 15 and 16 have no such parameter: the
    events are published while the standby is down."""
    primary, standby = pair
    agg = "sbw_%s" % test_id
    topic = make_topic(broker, agg)
    port = harness.free_port()
    overrides = pgoutput_on(primary.conninfo())
    overrides["postgres"]["reconnect_max_backoff_ms"] = 200
    overrides["http"] = {"listen": "127.0.0.1:%d" % port,
                         "stall_after_ms": STALL_MS}
    before = []
    if until == "parameter-amended":
        standby.stop()
    d = outboxd_factory(overrides)
    d.wait_log(r"streaming from slot", 40)
    if until == "standby-back":
        before = write_events(primary, agg, 200)
        check_delivery(collect_all(consumer, topic, before), before, True)
        standby.stop()
    during = write_events(primary, agg, 1000)
    written = primary.wal_lsn()
    if major() < 17:
        check_delivery(collect_all(consumer, topic, before + during),
                       before + during, True)
        wait_confirmed(primary, slot_name, written, 30)
        assert scrape(port)["outboxd_standby_waits_total"] == 0
        assert http_get(port, "/readyz")[1].split()[0] == "ready"
        assert d.stop() == 0, d.log_tail()
        return
    line = d.wait_log(WAIT_LINE, 30)
    ready, age = http_get(port, "/readyz"), log_age(line)
    if age < STALL_MS / 1000.0 - 1.0:
        # Not yet: the word it would say otherwise (kafka-down, when
        # outboxd started during the wait and has produced nothing yet).
        assert ready[1].split()[0] == ("ready" if before else "kafka-down"),\
            (ready, age)
    wait_http(port, "/readyz", 503, "waiting-for-standby", 30, daemon=d)
    assert http_get(port, "/readyz")[1] == "waiting-for-standby\n"
    # Waiting, not failing: no stream ends, the slot stays where it was,
    # nothing written meanwhile is published.
    time.sleep(3)
    assert d.running(), d.log_tail()
    assert scrape(port)["outboxd_standby_waits_total"] == 1
    assert confirmed(primary, slot_name) < written
    published = id_counts(consumer.collect([topic], 0, timeout=2, settle=1))
    assert not set(published) & set(during), "published while withheld"
    log = d.log_text()
    assert "replication stream ended" not in log, d.log_tail()
    if until == "standby-back":
        standby.start()
    else:
        primary.sql("ALTER SYSTEM RESET synchronized_standby_slots")
        primary.sql("SELECT pg_reload_conf()")
    records = collect_all(consumer, topic, before + during)
    check_delivery(records, before + during, True)
    wait_confirmed(primary, slot_name, written, 30)
    d.wait_log(r"waits for no standby any more", 10)
    wait_http(port, "/readyz", 200, "ready", 20, daemon=d)
    assert scrape(port)["outboxd_standby_waits_total"] == 1
    log = d.log_text()
    assert len(re.findall(WAIT_LINE, log)) == 1, d.log_tail()
    assert "drop the slot" not in log and "cannot get past it" not in log, \
        d.log_tail()
    print("standby wait pg%d (%s): %d events written while it was down, "
          "/readyz answered %r %.1f s after the wait began, all published "
          "once" % (major(), until, len(during), ready, age))
    assert d.stop() == 0, d.log_tail()


def test_check_names_each_missing_failover_setting(pg, outboxd_factory):
    """On the session's server (a primary without a standby): 17+ warns
    that synchronized_standby_slots is not set, naming the fix; 15 and 16
    warn that the server has no failover slots. Neither fails check; with
    postgres.slot_failover = false nothing is checked; the metric is absent
    and /readyz has one line."""
    port = harness.free_port()
    d = outboxd_factory({"http": {"listen": "127.0.0.1:%d" % port}})
    rc, out, err = d.run_cmd(["check"])
    assert rc == 0, out + err
    line = [ln for ln in out.splitlines() if ln.startswith("failover ")]
    assert len(line) == 1 and " warn " in line[0], out
    if major() >= 17:
        assert "synchronized_standby_slots is not set" in line[0] and \
            "ALTER SYSTEM SET synchronized_standby_slots" in line[0], out
    else:
        assert "has no failover slots" in line[0], out
    d.wait_log(r"streaming from slot", 30)
    if major() >= 17:
        d.wait_log(r"is not failover-ready: synchronized_standby_slots", 20)
        wait_until(lambda: "outboxd_slot_failover_ready 0" in
                   (http_get(port, "/metrics")[1] or ""), 20, 0.5,
                   "metric outboxd_slot_failover_ready 0")
        wait_until(lambda: http_get(port, "/readyz")[1].split() == [
            "ready", "failover-not-ready"], 20, 0.2, "/readyz ready, "
            "failover-not-ready")
    else:
        assert "outboxd_slot_failover_ready" not in http_get(
            port, "/metrics")[1]
    off = outboxd_factory({"postgres": {"slot_failover": False}},
                          start=False)
    rc, out, err = off.run_cmd(["check"])
    assert rc == 0 and "not checked: postgres.slot_failover is false" in \
        out, out + err


def test_failover_flag_on_existing_and_copied_slots(pg, outboxd_factory,
                                                   test_id, slot_name):
    """17+: a slot made by hand without FAILOVER gets it when outboxd takes
    it, and so does the slot copied from the backlog's temporary slot
    (which loses the flag); with slot_failover = false an existing slot is
    left as it is. 15 and 16: the log says once that the setting does
    nothing there."""
    pub = "pub_%s" % test_id
    pg.sql("CREATE PUBLICATION %s FOR TABLE public.outbox WITH (publish = "
           "'insert', publish_via_partition_root = true)" % pub)
    pg.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
           (slot_name,))
    conf = {"postgres": {"plugin": "pgoutput"}}
    off = outboxd_factory({"postgres": {"plugin": "pgoutput",
                                        "slot_failover": False}})
    off.wait_log(r"streaming from slot", 30)
    assert off.stop() == 0, off.log_tail()
    if major() >= 17:
        assert pg.slot(slot_name)["failover"] is False
    d = outboxd_factory(conf)
    d.wait_log(r"streaming from slot", 30)
    if major() >= 17:
        assert "has FAILOVER now" in d.log_text(), d.log_tail()
        assert pg.slot(slot_name)["failover"] is True
    else:
        assert "has no failover slots" in d.log_text(), d.log_tail()
    assert d.stop() == 0, d.log_tail()
    pg.drop_slot(slot_name)
    pg.sql("DELETE FROM public.outboxd_slots WHERE slot_name = %s",
           (slot_name,))
    copied = outboxd_factory({"postgres": {"plugin": "pgoutput"},
                              "outbox": {"backlog_where": "false"}})
    copied.wait_log(r"streaming from slot", 30)
    assert marker_rows(pg, slot_name) == 1
    if major() >= 17:
        assert pg.slot(slot_name)["failover"] is True, copied.log_tail()
    assert copied.stop() == 0, copied.log_tail()


def test_slot_create_if_not_exists_turns_on_failover(pg, outboxd_factory,
                                                     test_id, slot_name):
    """`slot create --if-not-exists` on a slot made by hand without
    FAILOVER: on 17+ it turns FAILOVER on (as `run` does when it takes the
    slot), so a deployment script that runs it every time leaves the slot
    failover-ready; with slot_failover = false the slot is left as it is.
    15 and 16: it exits 0 and says the setting does nothing there."""
    pub = "pub_%s" % test_id
    pg.sql("CREATE PUBLICATION %s FOR TABLE public.outbox WITH (publish = "
           "'insert', publish_via_partition_root = true)" % pub)
    pg.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
           (slot_name,))
    d = outboxd_factory({"postgres": {"plugin": "pgoutput"}}, start=False)
    rc, out, err = d.run_cmd(["slot", "create", "--if-not-exists",
                              "-s", "postgres.slot_failover=false"], timeout=30)
    assert rc == 0, err
    assert "exists already; nothing to do" in err, err
    if major() >= 17:
        assert pg.slot(slot_name)["failover"] is False
    rc, out, err = d.run_cmd(["slot", "create", "--if-not-exists"], timeout=30)
    assert rc == 0, err
    if major() >= 17:
        assert "has FAILOVER now" in err, err
        assert pg.slot(slot_name)["failover"] is True
        rc, out, err = d.run_cmd(["slot", "create", "--if-not-exists"],
                                 timeout=30)
        assert rc == 0 and "exists already; nothing to do" in err, err
    else:
        assert "has no failover slots" in err, err


def test_slot_create_if_not_exists_leaves_a_held_slot(pg, outboxd_factory,
                                                      test_id, slot_name):
    """17+: `slot create --if-not-exists` while another outboxd streams
    the slot (without FAILOVER, slot_failover = false there): the server's
    ALTER_REPLICATION_SLOT would wait until the slot is released (the
    command hung), so the command leaves it, exits 0 saying the holder
    turns FAILOVER on when it next takes the slot, and the stream goes on.
    15 and 16: nothing to alter, exit 0."""
    pub = "pub_%s" % test_id
    pg.sql("CREATE PUBLICATION %s FOR TABLE public.outbox WITH (publish = "
           "'insert', publish_via_partition_root = true)" % pub)
    held = outboxd_factory({"postgres": {"plugin": "pgoutput",
                                         "slot_failover": False}})
    held.wait_log(r"streaming from slot", 30)
    rc, out, err = held.run_cmd(["slot", "create", "--if-not-exists",
                                 "-s", "postgres.slot_failover=true"],
                                timeout=30)
    assert rc == 0, err
    if major() >= 17:
        assert "holds it, and outboxd turns FAILOVER on" in err, err
        assert pg.slot(slot_name)["failover"] is False
    assert held.running(), held.log_tail()
    assert held.stop() == 0, held.log_tail()


# ---------------------------------------------------------------------------
# the marker: a first start or a lost slot


def marker_rows(cluster, slot):
    return cluster.sql("SELECT count(*) FROM public.outboxd_slots WHERE "
                       "slot_name = %s", (slot,))[0][0]


def test_lost_slot_is_never_replaced_silently(pg, broker, consumer,
                                              outboxd_factory, test_id,
                                              slot_name):
    """outboxd writes a row for the slot it creates (public.outboxd_slots);
    with on_slot_lost = halt (test_slot_recovery.py recovers by itself),
    a new process that finds the slot gone but its row there exits 1
    naming outbox.backlog_where instead of creating a slot at a later
    position; started with backlog_where it publishes the rows the loss
    left out. `outboxd slot create --accept-gap` is the operator's
    explicit fresh start (it warns; without the flag it exits 1 and
    creates nothing), and `outboxd slot drop` deletes the row with the
    slot, so the next start is a first start again."""
    agg = "mark_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory()
    d.wait_log(r"streaming from slot", 30)
    assert marker_rows(pg, slot_name) == 1
    assert d.stop() == 0, d.log_tail()
    before = pg.sql("SELECT now()")[0][0]
    pg.drop_slot(slot_name)
    ids = [r[0] for r in pg.sql(
        "INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, "
        "payload) SELECT %s, 'k', 'e', '{}' FROM generate_series(1, 5) "
        "RETURNING id::text", (agg,))]
    halt = {"postgres": {"on_slot_lost": "halt"}}
    again = outboxd_factory(halt)
    expect_exit(again, 1, "does not exist, but outboxd created it",
                "backlog_where", "DELETE FROM public.outboxd_slots")
    assert pg.slot(slot_name) is None
    recovery = outboxd_factory(
        {**halt, "outbox": {"backlog_where": "created_at >= '%s'" % before}})
    recovery.wait_log(r"streaming from slot", 30)
    assert "was lost" in recovery.log_text()
    got = id_counts(consumer.collect([topic], len(ids), timeout=30))
    assert set(ids) <= set(got), got
    assert recovery.stop() == 0, recovery.log_tail()
    rc, _, err = recovery.run_cmd(["slot", "drop"])
    assert rc == 0, err
    assert marker_rows(pg, slot_name) == 0 and pg.slot(slot_name) is None
    fresh = outboxd_factory()
    fresh.wait_log(r"streaming from slot", 30)
    assert marker_rows(pg, slot_name) == 1
    assert fresh.stop() == 0, fresh.log_tail()
    pg.drop_slot(slot_name)
    rc, _, err = fresh.run_cmd(["slot", "create"])
    assert rc == 1 and "--accept-gap" in err, err
    assert pg.slot(slot_name) is None
    rc, _, err = fresh.run_cmd(["slot", "create", "--accept-gap"])
    assert rc == 0 and "was lost" in err, err
    assert pg.slot(slot_name) is not None


def test_no_slot_without_its_marker(pg, outboxd_factory, test_id, slot_name):
    """A role that may not write the marker table gets no slot: exit 1
    naming the GRANT to run (what sql/role.sql grants); `check` fails its
    `slot marker` line with the same statement."""
    role = "mk_%s" % test_id
    pg.sql("CREATE ROLE %s LOGIN REPLICATION" % role)
    pg.sql("GRANT SELECT ON public.outbox TO %s" % role)
    # (pgoutput: the publication is the table owner's to make.)
    pg.sql("CREATE PUBLICATION pub_%s FOR TABLE public.outbox WITH (publish "
           "= 'insert', publish_via_partition_root = true)" % test_id)
    d = outboxd_factory({"postgres": {"conninfo": pg.conninfo(user=role)}})
    expect_exit(d, 1, "GRANT SELECT, INSERT, UPDATE, DELETE ON \"public\".outboxd_slots",
                "creates no slot without it")
    assert pg.slot(slot_name) is None
    rc, out, _ = d.run_cmd(["check"])
    line = [ln for ln in out.splitlines() if ln.startswith("slot marker")]
    assert rc == 2 and len(line) == 1 and " FAIL " in line[0] and \
        "is not writable by this role" in line[0] and \
        'GRANT SELECT, INSERT, UPDATE, DELETE ON "public".outboxd_slots' in line[0], out
    pg.sql("GRANT SELECT, INSERT, UPDATE, DELETE ON public.outboxd_slots TO %s"
           % role)
    rc, out, _ = d.run_cmd(["check"])
    assert "slot marker" in out and '"public".outboxd_slots is writable' in \
        out, out


# ---------------------------------------------------------------------------
# two instances started at once


def test_two_instances_started_at_once(pg, broker, outboxd_factory, test_id,
                                       slot_name):
    """Started at the same moment on a database with neither the
    publication nor the slot, both instances stay up: one creates and
    streams, the other waits as a standby, whoever wins each race. Three
    rounds, each with a publication and a slot of its own."""
    for round_ in range(3):
        slot = "%s_%d" % (slot_name[:55], round_)
        conf = {"postgres": {"plugin": "pgoutput", "slot": slot,
                             "publication": "pub_%s_%d" % (test_id, round_),
                             "standby_retry_ms": 500}}
        a = outboxd_factory(conf, start=False)
        b = outboxd_factory(conf, start=False)
        a.start()
        b.start()
        wait_until(lambda: (pg.slot(slot) or {}).get("active"), 30, 0.1,
                   "slot %s streamed from" % slot)
        time.sleep(1.5)
        for d in (a, b):
            assert d.running(), "round %d: exited (rc %s):\n%s" % (
                round_, d.proc.returncode, d.log_tail())
        streaming = [d for d in (a, b) if "streaming from slot" in
                     d.log_text()]
        assert len(streaming) == 1, [d.log_tail() for d in (a, b)]
        other = b if streaming[0] is a else a
        assert "as a standby" in other.log_text(), other.log_tail()
        for d in (a, b):
            assert d.stop() == 0, d.log_tail()
        pg.drop_slot(slot)


# ---------------------------------------------------------------------------
# decoding on a hot standby


class SnapshotNudger(threading.Thread):
    """Calls pg_log_standby_snapshot() on the primary every 0.5 s, so a
    slot created on the standby need not wait for the next
    running-transactions record (up to 15 s)."""

    def __init__(self, primary):
        super().__init__(daemon=True)
        self.primary = primary
        self.stop_flag = threading.Event()

    def run(self):
        while not self.stop_flag.wait(0.5):
            self.primary.sql("SELECT pg_log_standby_snapshot()")

    def halt(self):
        self.stop_flag.set()
        self.join(10)


def test_decoding_on_a_standby(pair, broker, consumer, outboxd_factory,
                               test_id, slot_name):
    """postgres.conninfo names the hot standby. 16+: outboxd says that the
    slot waits for the primary's next running-transactions record, decodes
    there, and every row written on the primary is published; a missing
    publication is an exit 1 naming the statement to run on the primary.
    15 cannot decode on a standby: exit 1 saying so."""
    primary, standby = pair
    agg = "sb_%s" % test_id
    topic = make_topic(broker, agg)
    on_standby = pgoutput_on(standby.conninfo())
    if major() < 16:
        d = outboxd_factory(on_standby)
        expect_exit(d, 1, "cannot decode there", "primary")
        return
    nopub = outboxd_factory(on_standby)
    expect_exit(nopub, 1, "hot standby, where it cannot be created",
                "CREATE PUBLICATION pub_%s" % test_id)
    primary.sql("CREATE PUBLICATION pub_%s FOR TABLE public.outbox WITH "
                "(publish = 'insert', publish_via_partition_root = true)"
                % test_id)
    nudger = SnapshotNudger(primary)
    nudger.start()
    try:
        d = outboxd_factory(on_standby)
        d.wait_log(r"waits for the primary's next running-transactions", 30)
        d.wait_log(r"streaming from slot", 30)
    finally:
        nudger.halt()
    ids = [r[0] for r in primary.sql(
        "INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, "
        "payload) SELECT %s, 'k' || g, 'e', '{}' FROM generate_series(1, 50) "
        "g RETURNING id::text", (agg,))]
    ids += [primary.sql(
        "INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, "
        "payload) VALUES (%s, 'one', 'e', '{}') RETURNING id::text",
        (agg,))[0][0] for _ in range(20)]
    lost, dups, _, _ = count_delivery(consumer, topic, ids, [], timeout=40)
    print("standby decoding pg%d: %d written, %d lost, %d duplicated"
          % (major(), len(ids), lost, dups))
    assert lost == 0 and dups == 0
    # The standby's WAL position is read in recovery: the slot is
    # confirmed as the stream goes (no query failing forever).
    wait_until(lambda: standby.slot(slot_name)["confirmed_flush_lsn_int"]
               >= lsn_to_int(primary.sql(
                   "SELECT pg_current_wal_lsn()")[0][0]) - 1024 * 1024,
               20, 0.2, "the standby's slot confirmed")
    assert "recovery is in progress" not in d.log_text(), d.log_tail()
    assert d.stop() == 0, d.log_tail()
    if major() >= 17:
        # check, with both hosts, on a slot the standby has no copy of:
        # the standby's missing settings are named.
        standby.sql("ALTER SYSTEM SET sync_replication_slots = off")
        standby.sql("SELECT pg_reload_conf()")
        other = outboxd_factory(
            {"postgres": {"conninfo": both_hosts(primary, standby),
                          "plugin": "pgoutput", "slot": slot_name + "_c"}},
            start=False)
        rc, out, err = other.run_cmd(["check"])
        line = [ln for ln in out.splitlines()
                if ln.startswith("standby copy")]
        assert len(line) == 1 and " warn " in line[0] and \
            "has no copy of slot" in line[0] and \
            "sync_replication_slots = on" in line[0], out + err


def metric_value(port, name):
    """The value of the unlabelled metric name on /metrics, None if
    absent."""
    body = http_get(port, "/metrics")[1] or ""
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def write_events(cluster, agg, n, size=0, prefix="e"):
    """n outbox rows of agg (keys k0..k6), each with a payload of about
    size bytes, one transaction each; returns their ids."""
    ids = []
    conn = psycopg2.connect(cluster.conninfo())
    conn.autocommit = True
    with conn.cursor() as cur:
        for i in range(n):
            row_id = str(uuid.uuid4())
            cur.execute("INSERT INTO public.outbox (id, aggregate_type, "
                        "aggregate_id, event_type, payload) VALUES (%s, %s, "
                        "%s, %s, jsonb_build_object('n', %s, 'pad', "
                        "repeat('x', %s)))",
                        (row_id, agg, "k%d" % (i % 7), prefix, i, size))
            ids.append(row_id)
    conn.close()
    return ids


def give_standby_the_slot(primary, standby, slot):
    """The standby gets a copy of the primary's logical slot that survives
    its promotion, at a position it has received: 17+ by slot sync (the
    pair's standby syncs failover slots), before 17 as Patroni gives its
    replicas one: the slot's files, copied while the standby is stopped
    (after a checkpoint wrote them), with the snapshots logical decoding
    serialized (without the one at the slot's restart_lsn, decoding there
    would start by building one, and skip the commits meanwhile). The
    standby is left stopped."""
    if major() >= 17:
        nudger = SnapshotNudger(primary)
        nudger.start()
        try:
            wait_until(lambda: sync_ready(standby, slot), 60, 0.2,
                       "the standby's copy of slot %s is sync-ready" % slot)
        finally:
            nudger.halt()
        standby.stop("fast")
        return
    standby.stop("fast")
    primary.sql("CHECKPOINT")
    copy_slot_files(primary, standby, slot)


def copy_slot_files(primary, standby, slot):
    """The stopped standby gets the primary's files of slot, as the last
    checkpoint wrote them, and the snapshots logical decoding serialized
    (give_standby_the_slot says why)."""
    standby._run_server_cmd(["cp", "-a", os.path.join(
        primary.datadir, "pg_replslot", slot), os.path.join(
        standby.datadir, "pg_replslot", slot)])
    standby._run_server_cmd(["sh", "-c", "cp -a %s/. %s/" % (
        os.path.join(primary.datadir, "pg_logical", "snapshots"),
        os.path.join(standby.datadir, "pg_logical", "snapshots"))])


def start_on_pair(pair, broker, consumer, outboxd_factory, agg):
    """outboxd on both hosts of pair, the primary waiting for no standby
    (17+: what a fresh install has, so the slot may confirm WAL the
    standby never got), 10 events of agg published: (daemon, topic, http
    port, their ids)."""
    primary, standby = pair
    if major() >= 17:
        primary.sql("ALTER SYSTEM RESET synchronized_standby_slots")
        primary.sql("SELECT pg_reload_conf()")
    topic = make_topic(broker, agg)
    port = harness.free_port()
    d = outboxd_factory({"postgres": {"conninfo": both_hosts(primary, standby),
                                      "standby_retry_ms": 500},
                         "http": {"listen": "127.0.0.1:%d" % port}})
    d.wait_log(r"streaming from slot", 40)
    warm = write_events(primary, agg, 10, prefix="warm")
    wait_until(lambda: len(id_counts(consumer.collect(
        [topic], 10, timeout=2, settle=0.5))) >= 10, 30, 0.2,
        "the warm-up events published")
    return d, topic, port, warm


def test_promotion_of_a_standby_that_lagged_loses_nothing(
        pair, broker, consumer, outboxd_factory, test_id, slot_name):
    """The standby stops receiving WAL (down, or simply behind), the
    primary goes on: outboxd publishes and confirms 200 events the standby
    never gets. Then the primary dies and the standby is promoted: its
    timeline 2 starts at a switch point below everything outboxd read.
    With a copy of the slot on the standby (slot sync on 17+ without
    synchronized_standby_slots; on 15 and 16 the copy Patroni makes), the
    same outboxd process reconnects through its multi-host conninfo. The
    100 events written on the new primary take positions outboxd had
    already read on timeline 1: it must read them, not skip them by
    position (before: every one of them lost, the slot confirmed past
    them). The 200 events of timeline 1 past the switch point were
    published and cannot be taken back: the log names them and
    outboxd_events_beyond_fork_total counts them, exactly."""
    primary, standby = pair
    agg = "lag_%s" % test_id
    d, topic, port, warm = start_on_pair(pair, broker, consumer,
                                         outboxd_factory, agg)
    give_standby_the_slot(primary, standby, slot_name)
    # Timeline 1 only: the standby is down.
    lagged = write_events(primary, agg, 200, size=1000, prefix="lagged")
    end = primary.wal_lsn()
    wait_until(lambda: (primary.slot(slot_name) or {}).get(
        "confirmed_flush_lsn_int", 0) >= end, 60, 0.1,
        "the primary's slot confirmed past the events the standby lacks")
    primary.kill9()
    standby.start()
    standby.promote()
    fresh = write_events(standby, agg, 100, prefix="fresh")
    lost, dups, _, counts = count_delivery(
        consumer, topic, warm + fresh, lagged)
    beyond = sum(1 for i in lagged if counts[i])
    print("lagging standby pg%d: %d of %d events of the new primary lost, "
          "%d duplicated, %d of %d published from timeline 1 past the fork"
          % (major(), lost, len(fresh), dups, beyond, len(lagged)))
    assert lost == 0, "%d of the new primary's %d events never published; " \
        "log:\n%s" % (lost, len(fresh), d.log_tail())
    assert beyond == len(lagged)
    d.wait_log(r"which left timeline 1 at .* before outboxd's position", 10)
    d.wait_log(r"200 events handed to Kafka from timeline 1 past the "
               r"switch point", 1)
    assert metric_value(port, "outboxd_events_beyond_fork_total") == 200
    assert metric_value(port, "outboxd_timeline_switches_total") == 1
    # Every event of the new primary's, in commit order per key.
    records = consumer.collect([topic], len(warm) + len(fresh) + 200,
                               timeout=5, settle=1)
    order = {i: n for n, i in enumerate(fresh)}
    last = {}
    seen = set()
    for r in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        i = dict(r["headers"]).get("id")
        i = i.decode() if isinstance(i, bytes) else i
        if i in order and i not in seen:
            seen.add(i)
            assert order[i] > last.get(r["key"], -1), "key %s reordered" \
                % r["key"]
            last[r["key"]] = order[i]
    assert d.running()
