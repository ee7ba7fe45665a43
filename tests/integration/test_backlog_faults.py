"""Integration tests of the backlog under faults and hostile input (sql/README.md,
"Migrating from a polling outbox processor"): kill -9 while the backlog is
published and once it is acknowledged but the permanent slot cannot be
made yet, a restart with the slot present, a predicate that tries to add a
statement or to write, a slow predicate, and memory on a large backlog.

Every test uses an outbox table of its own (test_backlog.make_table) and
topics of its own.

Also here (marked no_sanitizers): a backlog that completes although the
role's idle timeouts are 1 s and the broker acknowledges slowly."""

import collections
import re
import time

import pytest

from harness import free_port, header, wait_until
from test_backlog import config, ids_where, insert_range, make_table
from test_faults import expect_exit, vm_hwm_kb
from test_ops import http_get, scrape

KB_PER_MB = 1024  # /proc counts kB
PREDICATE = "processed_on_utc IS NULL"


def on(cluster, table, where=PREDICATE, **outbox):
    """Overrides: the backlog of table, on cluster (None: the session's)."""
    out = config(table, where, **outbox)
    if cluster is not None:
        out["postgres"] = {"conninfo": cluster.conninfo()}
    return out


def with_http(overrides, port):
    overrides["http"] = {"listen": "127.0.0.1:%d" % port}
    return overrides


def id_counts(records):
    return collections.Counter(header(r, "id").decode() for r in records)


def only_blocker_left(pg):
    """Waits until the killed daemon's temporary slot is gone."""
    wait_until(lambda: [r[0] for r in pg.sql(
        "SELECT slot_name FROM pg_replication_slots")] == ["blocker"],
        10, 0.1, "only the blocker slot left")


def test_backlog_kill9_mid_publish_and_before_copy_loses_nothing(
        own_cluster, broker, consumer, outboxd_factory, test_id):
    """kill -9 while the backlog is published (acknowledgements held back),
    then again once it is acknowledged but the permanent slot cannot be
    copied (no replication slot free): no slot is left behind either time.
    The third start publishes the backlog, keeps retrying the copy without
    publishing it again, and creates the slot once one is freed; then it
    streams. Nothing is missing; a row is published at most once per
    attempt that read it, and streamed rows exactly once."""
    pg = own_cluster(max_replication_slots=2)
    table = make_table(pg, test_id)
    atype = test_id + "_cut"
    topic = "outbox.event." + atype
    broker.create_topic(topic, 4)
    # One slot taken: the backlog's temporary slot takes the other, and
    # the copy into the permanent one finds none free.
    pg.sql("SELECT pg_create_logical_replication_slot('blocker', 'wal2json')")
    insert_range(pg, table, atype, 1, 2000, processed=True)
    insert_range(pg, table, atype, 2001, 5000)
    try:
        broker.cmd("rtt all 1000")
        d1 = outboxd_factory(on(pg, table))
        slot = d1.config["postgres"]["slot"]
        d1.wait_log(r"publishing the backlog", 30)
        time.sleep(0.3)
        d1.kill9()
        assert "backlog published" not in d1.log_text()
        broker.cmd("rtt all 0")
        only_blocker_left(pg)
        insert_range(pg, table, atype, 5001, 5100)

        d2 = outboxd_factory(on(pg, table))
        d2.wait_log(r"retrying the copy", 40)
        assert "backlog published: 3100 rows acknowledged" in d2.log_text()
        assert "max_replication_slots" in d2.log_text(), d2.log_tail()
        d2.kill9()
        only_blocker_left(pg)
        insert_range(pg, table, atype, 5101, 5200)

        d3 = outboxd_factory(on(pg, table))
        d3.wait_log(r"retrying the copy", 40)
        time.sleep(1)
        pg.sql("SELECT pg_drop_replication_slot('blocker')")
        d3.wait_log(r"streaming from slot", 40)
        insert_range(pg, table, atype, 5201, 5300,
                     created="clock_timestamp()")
    finally:
        broker.cmd("rtt all 0")
    log3 = d3.log_text()
    assert len(re.findall(r"publishing the backlog:", log3)) == 1, log3
    assert "backlog published: 3200 rows acknowledged" in log3, log3

    want = ids_where(pg, table, PREDICATE)
    assert len(want) == 3300
    recs = consumer.collect(topic, len(want), timeout=60, settle=1.5)
    counts = id_counts(recs)
    assert set(counts) == want, "missing: %d" % len(want - set(counts))
    # Attempts that read each row: rows 1-5000 d1 (killed mid-publish), d2
    # (killed before the copy) and d3; rows 5001-5100 d2 and d3; rows
    # 5101-5200 d3 alone. Rows 5201-5300 came by the stream.
    for cond, most in (("<= 5000", 3), ("BETWEEN 5001 AND 5100", 2),
                       ("> 5100", 1)):
        ids = ids_where(pg, table, "(payload->>'n')::int %s" % cond)
        over = [i for i in ids if counts[i] > most]
        assert not over, "%d rows n %s published more than %d times" % (
            len(over), cond, most)
    assert pg.slot(slot) is not None


def test_backlog_not_published_again_when_the_slot_exists(
        pg, broker, consumer, outboxd_factory, test_id):
    """After a cutover, a restart (SIGTERM, start) finds the slot and only
    streams: every row, backlog and streamed, exactly once."""
    table = make_table(pg, test_id)
    atype = test_id + "_again"
    topic = "outbox.event." + atype
    insert_range(pg, table, atype, 1, 300)
    d = outboxd_factory(on(None, table))
    d.wait_log(r"streaming from slot", 40)
    insert_range(pg, table, atype, 301, 320, created="clock_timestamp()")
    assert len(consumer.collect(topic, 320, timeout=30, settle=0.5)) == 320
    d.terminate()
    assert d.wait(40) == 0, d.log_tail()
    insert_range(pg, table, atype, 321, 340, created="clock_timestamp()")
    since = d.log_size()
    d.start()
    d.wait_log(r"streaming from slot", 40, since=since)
    insert_range(pg, table, atype, 341, 360, created="clock_timestamp()")
    recs = consumer.collect(topic, 360, timeout=30, settle=1.5)
    counts = id_counts(recs)
    assert set(counts) == ids_where(pg, table, "true")
    assert max(counts.values()) == 1
    assert "publishing the backlog" not in d.log_text()[since:]


def test_backlog_predicate_is_one_read_only_statement(
        pg, broker, outboxd_factory, test_id):
    """The predicate is SQL from the configuration, run with the role's
    privileges (here a superuser's) but never as more than one statement
    nor outside a read-only transaction: a predicate that appends a DELETE
    is refused by `check` and `run` (exit 2, naming backlog_where) and
    deletes nothing; one that writes (nextval) makes `run` exit 2 naming
    backlog_where, the sequence unmoved. No slot is left either time. A
    predicate ending in a comment is fine."""
    table = make_table(pg, test_id)
    atype = test_id + "_ro"
    insert_range(pg, table, atype, 1, 20)
    sneaky = "true); DELETE FROM public.%s; SELECT (1" % table
    d = outboxd_factory(on(None, table, sneaky, backlog_order_by="1"),
                        start=False)
    slot = d.config["postgres"]["slot"]
    rc, out, err = d.run_cmd(["check"])
    assert rc == 2, (out, err)
    assert re.search(r"^backlog\s+FAIL .*outbox\.backlog_where", out, re.M), out
    assert pg.sql("SELECT count(*) FROM public.%s" % table)[0][0] == 20
    d.start()
    expect_exit(d, 2, "outbox.backlog_where", timeout=30)
    assert pg.sql("SELECT count(*) FROM public.%s" % table)[0][0] == 20
    assert pg.slot(slot) is None

    seq = "%s_seq" % test_id
    pg.sql("CREATE SEQUENCE public.%s" % seq)
    d = outboxd_factory(on(None, table, "nextval('public.%s') > 0" % seq),
                        start=True)
    log = expect_exit(d, 2, "outbox.backlog_where", "read-only", timeout=30)
    assert "no slot was created" in log
    assert pg.sql("SELECT last_value, is_called FROM public.%s" % seq)[0] == \
        (1, False)
    assert pg.slot(slot) is None

    # A trailing comment cannot swallow the rest of the query.
    d = outboxd_factory(on(None, table, PREDICATE + " -- not yet polled"),
                        start=False)
    rc, out, err = d.run_cmd(["check"])
    assert re.search(r"^backlog\s+ok .*the planner estimates \d+ rows", out, re.M), (out, err)


# src/http.c: /healthz fails once the main loop has not turned for this long.
HEALTH_STALL_S = 10


def test_backlog_slow_read_keeps_the_loop_alive(pg, broker, outboxd_factory,
                                                test_id):
    """A predicate that makes the first page take two minutes (a sort
    over rows that each sleep 0.2 s): meanwhile, for longer than /healthz
    allows the loop to stand still, /healthz stays 200 and /readyz says
    backlog, outboxd says what it waits for, and SIGTERM stops it at once
    (exit 0, well before the read could end) instead of after the read;
    no slot is left."""
    table = make_table(pg, test_id)
    insert_range(pg, table, test_id + "_slow", 1, 600)
    port = free_port()
    d = outboxd_factory(with_http(on(None, table, "pg_sleep(0.2) IS NOT NULL"),
                                  port))
    slot = d.config["postgres"]["slot"]
    d.wait_log(r"publishing the backlog", 30)
    t0 = time.monotonic()
    while (time.monotonic() - t0 < HEALTH_STALL_S + 2
           or "still waiting for the server to answer \"FETCH" not in
           d.log_text()):
        assert time.monotonic() - t0 < 40, d.log_tail()
        assert http_get(port, "/healthz")[0] == 200, d.log_tail()
        status, body = http_get(port, "/readyz")
        assert (status, body.strip()) == (503, "backlog"), (status, body)
        time.sleep(0.5)
    assert "backlog published" not in d.log_text()
    t1 = time.monotonic()
    d.terminate()
    assert d.wait(40) == 0, d.log_tail()
    took = time.monotonic() - t1
    print("exited %.2f s after SIGTERM" % took)
    assert took < 20, "SIGTERM waited for the read (%.1f s)" % took
    assert pg.slot(slot) is None


def fill_and_measure(pg, broker, outboxd_factory, test_id, rows, payload,
                     partitions):
    """rows backlog rows with payload (an SQL expression over g), published
    by outboxd; returns (average payload bytes, peak RSS in kB, seconds,
    /metrics)."""
    table = make_table(pg, test_id)
    atype = test_id + "_mem"
    broker.create_topic("outbox.event." + atype, partitions)
    pg.sql("INSERT INTO public.%s (aggregate_type, aggregate_id, event_type, "
           "payload, created_at) SELECT %%s, 'k' || (g %%%% 1000), 'e', %s, "
           "'2020-01-01'::timestamptz + g * interval '1 ms' "
           "FROM generate_series(1, %d) g" % (table, payload, rows), (atype,))
    size = pg.sql("SELECT avg(octet_length(payload::text)) FROM public.%s"
                  % table)[0][0]
    port = free_port()
    d = outboxd_factory(with_http(on(None, table, "true"), port))
    peak = 0
    d.wait_log(r"publishing the backlog", 30)
    t0 = time.monotonic()
    while "backlog published" not in d.log_text():
        assert d.running(), d.log_tail()
        assert time.monotonic() - t0 < 90, d.log_tail()
        peak = max(peak, vm_hwm_kb(d.pid))
        time.sleep(0.05)
    secs = time.monotonic() - t0
    peak = max(peak, vm_hwm_kb(d.pid))
    return size, peak, secs, scrape(port)


def test_backlog_of_150k_rows_in_bounded_memory(pg, broker, outboxd_factory,
                                                test_id):
    """150,000 rows (~400-byte payloads): peak RSS under 64 MB, every row
    counted in outboxd_backlog_events_total."""
    size, peak, secs, m = fill_and_measure(
        pg, broker, outboxd_factory, test_id, 150000,
        "jsonb_build_object('n', g, 'pad', repeat(md5(g::text), 11))", 16)
    print("150,000-row backlog of %.0f-byte payloads: %.1f s (%.0f rows/s), "
          "peak RSS %.1f MB" % (size, secs, 150000 / secs, peak / KB_PER_MB))
    assert peak < 64 * KB_PER_MB, "peak RSS %.1f MB" % (peak / KB_PER_MB)
    assert m.value("outboxd_backlog_events_total") == 150000


def test_backlog_pages_are_bounded_by_bytes(pg, broker, outboxd_factory,
                                            test_id):
    """800 rows of ~100 KB each (80 MB): the cursor is read in pages of
    about 1 MB, not of a fixed row count, so peak RSS stays under 64 MB."""
    size, peak, secs, m = fill_and_measure(
        pg, broker, outboxd_factory, test_id, 800,
        "jsonb_build_object('n', g, 'pad', (SELECT string_agg(md5(g::text "
        "|| i::text), '') FROM generate_series(1, 3200) i))", 16)
    print("800 rows of %.0f KB: %.1f s, peak RSS %.1f MB"
          % (size / 1024, secs, peak / KB_PER_MB))
    assert size > 100000
    assert peak < 64 * KB_PER_MB, "peak RSS %.1f MB" % (peak / KB_PER_MB)
    assert m.value("outboxd_backlog_events_total") == 800


def test_backlog_outlasts_the_roles_statement_timeout(pg, broker, consumer,
                                                     outboxd_factory, test_id):
    """A statement_timeout on outboxd's connections (3 s, from conninfo's
    options, as a role or database default would set it) does not cut
    short a first page that takes ~5 s: the backlog is published and the
    stream follows."""
    table = make_table(pg, test_id)
    atype = test_id + "_st"
    topic = "outbox.event." + atype
    insert_range(pg, table, atype, 1, 500)
    overrides = on(None, table, "pg_sleep(0.01) IS NOT NULL")
    overrides["postgres"] = {
        "conninfo": pg.conninfo() + " options='-c statement_timeout=3000'"}
    d = outboxd_factory(overrides)
    d.wait_log(r"backlog published: 500 rows acknowledged", 40)
    d.wait_log(r"streaming from slot", 20)
    insert_range(pg, table, atype, 501, 510, created="clock_timestamp()")
    recs = consumer.collect(topic, 510, timeout=30, settle=0.5)
    assert set(id_counts(recs)) == ids_where(pg, table, "true")


def test_backlog_of_a_missing_table_names_the_table(pg, broker,
                                                    outboxd_factory, test_id):
    """With a backlog to publish and no outbox table, outboxd exits 1
    naming the table (as without a backlog), not 2 blaming the predicate;
    no slot is created."""
    d = outboxd_factory(config("%s_missing" % test_id, PREDICATE))
    log = expect_exit(d, 1, "%s_missing does not exist" % test_id, timeout=30)
    assert "backlog_where" not in log
    assert pg.slot(d.config["postgres"]["slot"]) is None


@pytest.mark.no_sanitizers
def test_backlog_with_role_idle_timeouts_completes(
        pg, broker, consumer, outboxd_factory, test_id):
    """The role outboxd logs in as has idle_in_transaction_session_timeout
    and idle_session_timeout of 1 s (a DBA's guard against forgotten
    sessions), and the broker acknowledges slowly. The backlog keeps a
    transaction open (the cursor in the exported snapshot, and the
    temporary slot's walsender that exported it) for as long as it is
    published and acknowledged: it must still complete, every row once,
    and the stream take over."""
    role = "%s_role" % test_id
    pg.sql("CREATE ROLE %s LOGIN SUPERUSER REPLICATION" % role)
    pg.sql("ALTER ROLE %s SET idle_in_transaction_session_timeout = '1s'"
           % role)
    pg.sql("ALTER ROLE %s SET idle_session_timeout = '1s'" % role)
    try:
        table = make_table(pg, test_id)
        atype = test_id + "_order"
        topic = "outbox.event." + atype
        broker.create_topic(topic, partitions=4)
        insert_range(pg, table, atype, 1, 200)
        broker.cmd("rtt all 1500")
        cfg = config(table, "processed_on_utc IS NULL")
        cfg["postgres"] = {"conninfo": pg.conninfo(user=role)}
        try:
            d = outboxd_factory(cfg)
            # The temporary slot is copied only once every row is
            # acknowledged, seconds after the transaction went idle.
            d.wait_log(r"where the backlog ends", 40)
        finally:
            broker.cmd("rtt all 0")
        d.wait_log(r"streaming from slot", 20)
        insert_range(pg, table, atype, 201, 210, created="clock_timestamp()")
        want = ids_where(pg, table, "true")
        recs = consumer.collect(topic, len(want), timeout=40, settle=1.0)
        got = [header(r, "id").decode() for r in recs]
        assert set(got) == want
        assert len(got) == len(want), "published more than once: %d of %d" % (
            len(got) - len(want), len(want))
        assert "could not end the backlog's transaction" not in d.log_text()
        assert d.running(), d.log_tail()
    finally:
        pg.sql("DROP ROLE %s" % role)
