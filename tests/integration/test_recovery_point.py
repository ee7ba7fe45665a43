"""The recovery point (deploy/README.md, "The recovery point"): outboxd
keeps, in the slot's row of outboxd_slots, a transaction id such that
every outbox row not yet published was written by a transaction with that
id or a later one; `check` and `slot status` print it.

Each test reads the stored point and the rows' own transaction ids
(`xmin`, widened to xid8 by the server's epoch) and shows the point moves
only over what the broker acknowledged: never past a row whose event is
unacknowledged (the broker down), never past a transaction that holds a
low id open while later ones commit, and past both once they are
published."""

import re
import time

from conftest import OUTBOX_SQL
from harness import wait_until
from test_faults import (Feed, check_delivery, collect_all, make_topic,
                         wait_streaming)

# The point is taken every 5 s and stored once confirmed; every second
# here (a test build's OUTBOXD_TEST_RECPOINT_MS).
INTERVAL = 1
ENV = {"OUTBOXD_TEST_RECPOINT_MS": str(INTERVAL * 1000)}


def stored_point(pg, slot):
    """(xid, lsn text, recovery_at) of slot's row, or None."""
    rows = pg.sql("SELECT recovery_xid::text::bigint, recovery_lsn::text, "
                  "recovery_at FROM public.outboxd_slots WHERE slot_name = %s",
                  (slot,))
    return rows[0] if rows and rows[0][0] is not None else None


def row_xids(pg, ids):
    """The xid8 of the transaction that wrote each row of ids (the row's
    xmin within the server's current epoch)."""
    rows = pg.sql(
        "SELECT ((pg_snapshot_xmax(pg_current_snapshot())::text::bigint >> 32) << 32) "
        "+ xmin::text::bigint FROM public.outbox WHERE id = ANY(%s::uuid[])",
        (list(ids),))
    return [r[0] for r in rows]


def wait_point_past(pg, slot, xid, timeout=40):
    wait_until(lambda: (stored_point(pg, slot) or (0,))[0] > xid, timeout, 0.5,
               "a recovery point past %d (is %s)" % (xid, stored_point(pg, slot)))


def streaming_past(pg, broker, outboxd_factory, slot_name, agg, n):
    """outboxd streaming agg's events, n of them published and the point
    past them: (topic, outboxd, feed, their ids)."""
    topic = make_topic(broker, agg)
    d = outboxd_factory(env=ENV)
    wait_streaming(pg, slot_name)
    feed = Feed(pg, agg)
    ids = feed.commit(n)
    wait_point_past(pg, slot_name, max(row_xids(pg, ids)))
    return topic, d, feed, ids


def test_point_follows_acknowledged_events_only(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """Published events move the point past their transactions; events
    the broker cannot take (all brokers down) hold it at or below their
    transaction for as long as they wait; once delivered, it moves past
    them. `slot status` and `check` print it."""
    topic, d, feed, _ = streaming_past(pg, broker, outboxd_factory, slot_name,
                                       "rp_%s" % test_id, 5)
    try:
        assert broker.cmd("down all") == "ok"
        held = feed.commit(5)
        held_xid = min(row_xids(pg, held))
        feed.commit(3)  # later transactions, unacknowledged too
        # Two intervals and more: candidates are taken past the held
        # transaction but never stored while it waits.
        time.sleep(3 * INTERVAL)
        point = stored_point(pg, slot_name)
        assert point is not None and point[0] <= held_xid, (point, held_xid)

        assert broker.cmd("up all") == "ok"
        wait_point_past(pg, slot_name, held_xid)
        recs = collect_all(consumer, topic, feed.ids, timeout=60)
        check_delivery(recs, feed.ids, exactly_once=False)
    finally:
        feed.close()

    rc, out, err = d.run_cmd(["slot", "status"])
    point = stored_point(pg, slot_name)
    assert rc == 0 and re.search(r"^recovery point\s+xid %d \(taken at [0-9A-F]+/[0-9A-F]+, "
                                 r"stored .* ago\); .*outbox\.backlog_where=\"\(xmin::text::bigint - %d "
                                 % (point[0], point[0]), out, re.M), (out, err)
    rc, out, err = d.run_cmd(["check"])
    assert re.search(r"^recovery point\s+ok\s+xid \d+ ", out, re.M), (out, err)


def test_point_stays_below_an_open_transaction(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """A transaction that wrote its outbox row (its id assigned) and stays
    open while many later transactions commit and are published holds the
    point at or below its id: a recovery then would find its row, whose
    id is lower than theirs. Once it commits and is published, the point
    passes it."""
    agg = "ro_%s" % test_id
    topic = make_topic(broker, agg)
    outboxd_factory(env=ENV)
    wait_streaming(pg, slot_name)
    slow = Feed(pg, agg, seed=1)
    fast = Feed(pg, agg, seed=2)
    try:
        conn = pg.connect()
        conn.autocommit = False
        cur = conn.cursor()
        cur.execute("INSERT INTO public.outbox (id, aggregate_type, aggregate_id, "
                    "event_type, payload) VALUES (gen_random_uuid(), %s, 'long', "
                    "'x', '{}') RETURNING id::text, pg_current_xact_id()::text::bigint",
                    (agg,))
        long_id, long_xid = cur.fetchone()
        for _ in range(20):
            fast.commit(3)
        last = max(row_xids(pg, fast.ids))
        assert last > long_xid
        time.sleep(3 * INTERVAL)
        point = stored_point(pg, slot_name)
        assert point is None or point[0] <= long_xid, (point, long_xid)

        conn.commit()
        conn.close()
        wait_point_past(pg, slot_name, last)
        recs = collect_all(consumer, topic, fast.ids + [long_id], timeout=60)
        check_delivery(recs, fast.ids + [long_id], exactly_once=True)
    finally:
        slow.close()
        fast.close()


def test_an_idle_server_stores_no_more(
        pg, broker, outboxd_factory, slot_name, test_id):
    """Storing the point is a transaction of its own: on an idle server
    outboxd does not go on storing one past its own update every interval
    (which would write WAL forever on a database with nothing to do)."""
    _, _, feed, _ = streaming_past(pg, broker, outboxd_factory, slot_name,
                                   "ri_%s" % test_id, 2)
    feed.close()
    # Let the update that passed them settle (one more may follow it).
    time.sleep(2 * INTERVAL + 1)
    before = stored_point(pg, slot_name)
    time.sleep(3 * INTERVAL)
    assert stored_point(pg, slot_name) == before


def test_a_table_without_the_columns(pg, broker, outboxd_factory, slot_name,
                                     test_id):
    """A marker table made before the recovery point: a role that does not
    own it gets a warning naming the statements for the owner, streams on,
    and `check` fails its recovery point line with them; once the owner
    ran them, the point is kept. (A role that owns the table adds the
    columns itself: every other test's outboxd runs as the owner.)"""
    db = "rp_old_%s" % test_id
    role = "rp_%s" % test_id
    pg.sql("CREATE DATABASE %s" % db)
    pg.run_file(str(OUTBOX_SQL), dbname=db)
    pg.sql("ALTER TABLE public.outboxd_slots DROP COLUMN recovery_xid, "
           "DROP COLUMN recovery_lsn, DROP COLUMN recovery_at, "
           "DROP COLUMN recovery_system", dbname=db)
    # (pgoutput: the publication is the table owner's to make.)
    pg.sql("CREATE PUBLICATION pub_%s FOR TABLE public.outbox WITH (publish "
           "= 'insert', publish_via_partition_root = true)" % test_id, dbname=db)
    pg.sql("CREATE ROLE %s LOGIN REPLICATION" % role)
    pg.sql("GRANT SELECT ON public.outbox TO %s; GRANT SELECT, INSERT, DELETE ON "
           "public.outboxd_slots TO %s" % (role, role), dbname=db)
    d = outboxd_factory({"postgres": {"conninfo": pg.conninfo(db, user=role)}},
                        env=ENV)
    d.wait_log("no recovery point is kept for slot %s" % slot_name, 30)
    assert "ALTER TABLE \"public\".outboxd_slots ADD COLUMN IF NOT EXISTS recovery_xid" \
        in d.log_tail(), d.log_tail()
    assert d.running()
    rc, out, _ = d.run_cmd(["check"])
    assert re.search(r"^recovery point\s+FAIL\s+none: .*lacks its columns.*GRANT UPDATE",
                     out, re.M), out

    pg.sql(re.search(r"have the table's owner run (ALTER TABLE .*;)",
                     d.log_text()).group(1).replace("<outboxd's role>", role),
           dbname=db)
    d.stop()
    d.start()
    wait_until(lambda: pg.sql("SELECT recovery_xid IS NOT NULL FROM public.outboxd_slots "
                              "WHERE slot_name = %s", (slot_name,), dbname=db)
               == [(True,)], 40, 0.5, "a recovery point in the old table")


def test_the_printed_backlog_where_recovers_a_lost_slot(
        pg, broker, consumer, outboxd_factory, slot_name, test_id):
    """The slot is lost (dropped) after outboxd was killed with events
    the broker never acknowledged, and more events are written while no
    slot exists: `check` prints the recovery point with the exact
    outbox.backlog_where, and `slot create --accept-gap` with it publishes
    every one of them (and few already published), no created_at guessed."""
    agg = "rl_%s" % test_id
    topic, d, feed, published = streaming_past(pg, broker, outboxd_factory,
                                               slot_name, agg, 20)
    try:
        assert broker.cmd("down all") == "ok"
        unacked = feed.commit(10)
        time.sleep(INTERVAL + 1)
        d.kill9()
        pg.sql("SELECT pg_drop_replication_slot(%s)", (slot_name,))
        unslotted = feed.commit(10)
        assert broker.cmd("up all") == "ok"

        rc, out, err = d.run_cmd(["check"])
        m = re.search(r'^recovery point\s+ok\s+xid \d+ .*outbox\.backlog_where="([^"]+)"',
                      out, re.M)
        assert m, (out, err)
        where = m.group(1)
        selected = {r[0] for r in pg.sql(
            "SELECT id::text FROM public.outbox WHERE aggregate_type = %%s AND (%s)"
            % where.replace("%", "%%"), (agg,))}
        assert set(unacked + unslotted) <= selected, "the condition misses rows"
        assert len(selected & set(published)) < len(published), \
            "the condition selects every published row"

        rc, out, err = d.run_cmd(["slot", "create", "--accept-gap", "-s",
                                  "outbox.backlog_where=" + where], timeout=120)
        assert rc == 0, (out, err)
        d.start()
        wait_streaming(pg, slot_name)
        later = feed.commit(5)
        recs = collect_all(consumer, topic, feed.ids, timeout=90)
        check_delivery(recs, feed.ids, exactly_once=False)
        assert later
    finally:
        feed.close()


def test_a_point_from_another_system_is_refused(
        pg, broker, outboxd_factory, slot_name, test_id):
    """A point stored on another PostgreSQL system (the database copied
    logically, or a dump restored: its rows were written again by this
    server's transactions, whose ids the point does not order) selects
    nothing here: `check` fails its line and says why, instead of printing
    a condition that would miss rows."""
    _, d, feed, _ = streaming_past(pg, broker, outboxd_factory, slot_name,
                                   "rs_%s" % test_id, 1)
    feed.close()
    d.stop()
    pg.sql("UPDATE public.outboxd_slots SET recovery_system = '1' "
           "WHERE slot_name = %s", (slot_name,))
    rc, out, _ = d.run_cmd(["check"])
    assert re.search(r"^recovery point\s+FAIL\s+xid \d+ was stored on another "
                     r"PostgreSQL system \(1; this one is \d+", out, re.M), out
    assert "backlog_where=" not in out, out


def test_a_synchronous_standby_down_stalls_nothing(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    """synchronous_standby_names names a standby that is down while
    outboxd streams (the application commits with synchronous_commit
    local): storing the point commits locally, so neither the point nor
    the stream waits for the standby. (Before, the update waited for it,
    and with it the stream: nothing more was read or published.)"""
    c = own_cluster()
    agg = "rsync_%s" % test_id
    topic = make_topic(broker, agg)
    d = outboxd_factory({"postgres": {"conninfo": c.conninfo()}}, env=ENV)
    wait_streaming(c, slot_name)
    c.sql("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
    c.sql("SELECT pg_reload_conf()")
    conn = c.connect()
    conn.autocommit = True
    ids, xids = [], []
    try:
        c.wait_sync_standby_armed()
        cur = conn.cursor()
        cur.execute("SET synchronous_commit = local")
        for i in range(5):
            cur.execute("INSERT INTO public.outbox (id, aggregate_type, aggregate_id, "
                        "event_type, payload) VALUES (gen_random_uuid(), %s, %s, 'x', "
                        "'{}') RETURNING id::text, xmin::text::bigint", (agg, "k%d" % i))
            row = cur.fetchone()
            ids.append(row[0])
            xids.append(row[1])
            time.sleep(INTERVAL)
        wait_point_past(c, slot_name, max(xids))
        recs = collect_all(consumer, topic, ids, timeout=60)
        check_delivery(recs, ids, exactly_once=True)
        assert d.running()
    finally:
        conn.close()
        c.sql("ALTER SYSTEM RESET synchronous_standby_names")
        c.sql("SELECT pg_reload_conf()")


def test_a_prepared_transaction_holds_the_point(
        own_cluster, broker, consumer, outboxd_factory, slot_name, test_id):
    """A prepared transaction (two-phase commit) that wrote an outbox row
    stays in the proc array until COMMIT PREPARED, however long that
    takes and whichever session ends it: the point stays at or below its
    id while later transactions are published, and its row is published
    once it commits."""
    c = own_cluster(max_prepared_transactions=2)
    agg = "r2pc_%s" % test_id
    topic = make_topic(broker, agg)
    outboxd_factory({"postgres": {"conninfo": c.conninfo()}}, env=ENV)
    wait_streaming(c, slot_name)
    conn = c.connect()
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("BEGIN")
    cur.execute("INSERT INTO public.outbox (id, aggregate_type, aggregate_id, "
                "event_type, payload) VALUES (gen_random_uuid(), %s, 'p', 'x', '{}') "
                "RETURNING id::text, pg_current_xact_id()::text::bigint", (agg,))
    prepared_id, prepared_xid = cur.fetchone()
    cur.execute("PREPARE TRANSACTION 'rp_%s'" % test_id)
    conn.close()  # the prepared transaction outlives its session
    feed = Feed(c, agg)
    try:
        for _ in range(10):
            feed.commit(2)
        time.sleep(3 * INTERVAL)
        point = stored_point(c, slot_name)
        assert point is None or point[0] <= prepared_xid, (point, prepared_xid)
        c.sql("COMMIT PREPARED 'rp_%s'" % test_id)
        wait_point_past(c, slot_name, prepared_xid)
        recs = collect_all(consumer, topic, feed.ids + [prepared_id], timeout=60)
        check_delivery(recs, feed.ids + [prepared_id], exactly_once=True)
    finally:
        feed.close()
