"""Integration tests of the outbox table's own properties that decide
whether its rows can be published as events at all (sql/README.md, "What
the table must be"), with both decoders:

- an UNLOGGED table or partition writes no WAL for its rows, so no decoder
  sees them: `outboxd check` fails naming it and the fix, `run` refuses to
  start, and a table or partition made UNLOGGED while outboxd streams
  halts it (exit 1) without confirming past the point where it noticed;
- a row that an UPDATE moves into another partition (a DELETE plus an
  INSERT of the same row in the stream) is not published again, and
  `check` warns where the stream cannot tell (sql/README.md, "Rows moved
  between partitions").

Every test has an outbox table of its own."""

import json
import re

import pytest

from harness import wait_until
from test_cli import EXIT_OPERATOR, EXIT_USAGE
from test_faults import make_topic, wait_streaming
from test_ops import check_lines, failed_checks

DECODERS = ("wal2json", "pgoutput")


def plain_table(pg, name, unlogged=False):
    """public.<name>: a copy of sql/outbox.sql's table."""
    pg.sql("CREATE %sTABLE public.%s (LIKE public.outbox INCLUDING ALL)"
           % ("UNLOGGED " if unlogged else "", name))
    return "public." + name


def partitioned_table(pg, name, unlogged_b=False):
    """public.<name>: sql/outbox.sql's columns and a region column, which
    it is list-partitioned on into <name>_a and <name>_b (UNLOGGED with
    unlogged_b); primary key (id, region)."""
    pg.sql("""
        CREATE TABLE public.%(t)s (
            LIKE public.outbox INCLUDING DEFAULTS INCLUDING IDENTITY,
            region text NOT NULL DEFAULT 'a',
            PRIMARY KEY (id, region)
        ) PARTITION BY LIST (region);
        CREATE TABLE public.%(t)s_a PARTITION OF public.%(t)s FOR VALUES IN ('a');
        CREATE %(u)sTABLE public.%(t)s_b PARTITION OF public.%(t)s
            FOR VALUES IN ('b');
        """ % {"t": name, "u": "UNLOGGED " if unlogged_b else ""})
    return "public." + name


def insert(pg, table, agg, key, payloads, region=None):
    """One transaction inserting one row per payload (in region, if
    given)."""
    cols = "aggregate_type, aggregate_id, event_type, payload"
    rows = ", ".join("(%s, %s, 'e', jsonb_build_object('n', %d)%s)" % (
        "%(agg)s", "%(key)s", n, ", %(region)s" if region else "")
        for n in payloads)
    pg.sql("INSERT INTO %s (%s%s) VALUES %s" % (
        table, cols, ", region" if region else "", rows),
        {"agg": agg, "key": key, "region": region})


def assert_refused(d, named):
    """`check` fails with a 'table logged' line naming the table `named`
    and the fix; `run` exits 1 naming it, before streaming."""
    rc, out, err = d.run_cmd(["check"])
    assert rc == EXIT_USAGE, (out, err)
    failed = {name: detail for name, _, detail in failed_checks(out)}
    detail = failed.get("table logged", "")
    assert "%s is UNLOGGED" % named in detail, out
    assert "ALTER TABLE %s SET LOGGED" % named in detail, detail
    d.start()
    assert d.wait(30) == EXIT_OPERATOR, d.log_tail()
    log = d.log_text()
    assert "%s is UNLOGGED" % named in log, log
    assert "streaming from slot" not in log, log


def test_check_and_run_refuse_an_unlogged_table(pg, outboxd_factory,
                                                test_id):
    """An outbox created UNLOGGED: `check` fails naming it, why and the
    fix; `run` exits 1 naming it."""
    table = plain_table(pg, "%s_unl" % test_id, unlogged=True)
    d = outboxd_factory({"outbox": {"table": table}}, start=False)
    assert_refused(d, table)


def test_check_and_run_refuse_an_unlogged_partition(pg, outboxd_factory,
                                                    test_id):
    """One unlogged partition of a partitioned outbox (PostgreSQL accepts
    it, even under a publication of the partitioned table): `check` fails
    naming the partition; `run` exits 1 naming it."""
    table = partitioned_table(pg, "%s_unp" % test_id, unlogged_b=True)
    d = outboxd_factory({"outbox": {"table": table}}, start=False)
    assert_refused(d, table + "_b")


@pytest.mark.parametrize("which", ["table", "partition"])
def test_set_unlogged_while_streaming_halts(pg, broker, consumer,
                                            outboxd_factory, test_id,
                                            slot_name, decoder, which):
    """ALTER TABLE ... SET UNLOGGED on the outbox table (or a partition of
    it) while outboxd streams: outboxd exits 1 within seconds naming it,
    and the slot is not confirmed past the ALTER's commit. (Before, it
    kept running silently while every row written afterwards was lost.)
    With pgoutput, PostgreSQL itself refuses to make a table of a
    publication unlogged, but not a partition of one."""
    agg = "unl_%s" % test_id
    make_topic(broker, agg)
    if which == "table":
        table = plain_table(pg, "%s_ob" % test_id)
        target = table
    else:
        table = partitioned_table(pg, "%s_ob" % test_id)
        target = table + "_b"
    d = outboxd_factory({"outbox": {"table": table}})
    wait_streaming(pg, slot_name)
    insert(pg, table, agg, "k", [1, 2, 3])
    consumer.collect("outbox.event." + agg, 3, timeout=30, settle=0.2)
    if decoder == "pgoutput" and which == "table":
        with pytest.raises(Exception, match="part of a publication"):
            pg.sql("ALTER TABLE %s SET UNLOGGED" % target)
        assert d.running(), d.log_tail()
        return
    pg.sql("ALTER TABLE %s SET UNLOGGED" % target)
    after_alter = pg.wal_lsn()
    insert(pg, table, agg, "k", [4, 5, 6],
           region="b" if which == "partition" else None)
    assert d.wait(30) == EXIT_OPERATOR, d.log_tail()
    log = d.log_text()
    assert re.search(r"%s is UNLOGGED.*turned UNLOGGED while outboxd "
                     r"streamed it.*stopping without confirming past"
                     % re.escape(target), log), log
    slot = pg.slot(slot_name)
    assert slot["confirmed_flush_lsn_int"] <= after_alter, (slot, after_alter)
    wait_until(lambda: not pg.slot(slot_name)["active"], 10)


def numbers(records):
    """The payload numbers of records, in the order the key's partition
    holds them."""
    return [json.loads(r["value"])["n"]
            for r in sorted(records, key=lambda r: r["offset"])]


def test_row_moved_to_another_partition_is_not_published_again(
        pg, broker, consumer, outboxd_factory, test_id, slot_name, decoder):
    """A key's events 1 and 2, then an UPDATE that moves event 1 into
    another partition (a DELETE plus an INSERT of the same row in the
    stream of both decoders), then event 3: the consumer sees 1, 2, 3, each
    once (the previous binary published 1, 2, 1, 3). Rows inserted and
    deleted in one transaction (sql/README.md's empty table) are still
    published, and `check` says moves are told apart."""
    agg = "mv_%s" % test_id
    topic = make_topic(broker, agg)
    table = partitioned_table(pg, "%s_mv" % test_id)
    d = outboxd_factory({"outbox": {"table": table}})
    wait_streaming(pg, slot_name)
    insert(pg, table, agg, "k", [1])
    insert(pg, table, agg, "k", [2])
    pg.sql("UPDATE %s SET region = 'b' WHERE payload->>'n' = '1'" % table)
    insert(pg, table, agg, "k", [3])
    # The empty table: insert, then delete, in one transaction.
    pg.sql("WITH e AS (INSERT INTO %s (aggregate_type, aggregate_id, "
           "event_type, payload) VALUES (%%s, 'k', 'e', '{\"n\": 4}') "
           "RETURNING id, region) DELETE FROM %s o USING e "
           "WHERE o.id = e.id AND o.region = e.region" % (table, table),
           (agg,))
    records = consumer.collect(topic, 4, timeout=30, settle=2)
    assert numbers(records) == [1, 2, 3, 4], d.log_tail()
    assert pg.sql("SELECT region FROM %s WHERE payload->>'n' = '1'"
                  % table) == [("b",)]
    rc, out, err = d.run_cmd(["check"])
    results = {name: (ok, detail) for name, ok, detail in check_lines(out)[0]}
    assert results["partition moves"][0], out
    assert "not published again" in results["partition moves"][1], out


def moves_warning(d):
    """`check`'s one 'partition moves' line, which must be a warning that
    passes (no event is lost), says moved rows are published again, and
    which partitioning has no moves: its detail."""
    rc, out, err = d.run_cmd(["check"])
    lines = [detail for name, ok, detail in check_lines(out)[0]
             if name == "partition moves"]
    assert len(lines) == 1 and re.search(r"^partition moves\s+warn ", out,
                                         re.M), out
    assert rc == 0, out
    assert "published again as a new event" in lines[0], lines[0]
    assert "partitioned by a column rows keep" in lines[0], lines[0]
    return lines[0]


def test_check_warns_where_a_partition_hides_moves(pg, outboxd_factory,
                                                   test_id):
    """A partition whose replica identity does not hold the id (REPLICA
    IDENTITY NOTHING): the DELETE of a row moved out of it does not name
    it (neither decoder sends one), so `check` warns naming the partition
    and the fix."""
    table = partitioned_table(pg, "%s_hid" % test_id)
    pg.sql("ALTER TABLE %s_b REPLICA IDENTITY NOTHING" % table)
    d = outboxd_factory({"outbox": {"table": table}}, start=False)
    detail = moves_warning(d)
    assert "%s_b" % table in detail, detail
    assert "REPLICA IDENTITY FULL" in detail, detail


@pytest.mark.decoders("pgoutput")
def test_check_warns_when_the_publication_leaves_deletes_out(
        pg, outboxd_factory, test_id, decoder):
    """pgoutput sends no DELETE when the publication publishes inserts only
    (as outboxd made it before it told moves apart): `check` warns with the
    ALTER PUBLICATION that fixes it."""
    table = partitioned_table(pg, "%s_hid" % test_id)
    pub = "pub_" + test_id
    pg.sql("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', "
           "publish_via_partition_root = true)" % (pub, table))
    # pgoutput whatever decoder the run leaves (the sanitizer pass runs
    # wal2json only): the publication is what is checked.
    d = outboxd_factory({"postgres": {"plugin": "pgoutput"},
                         "outbox": {"table": table}}, start=False)
    detail = moves_warning(d)
    assert "ALTER PUBLICATION %s SET (publish = 'insert, delete'" % pub \
        in detail, detail
