"""Integration tests of `outboxd dlq redrive` and of the dead letters that
`outboxd dlq list` prints (deploy/README.md, "Redriving dead letters").

Dead letters come from a table of the test's own with outbox.cloudevents =
binary: a row whose headers column has a member named like a CloudEvents
header (ce_x) is dead-lettered with its key, value, id, type and user
headers and an `original-topic` header; a row with no aggregate type (the
topic template's column) has no `original-topic`, a 3 MB payload a
cut-down one (`payload-size`, no value), and with on_bad_event = hold_key
the key's next event a held one (`held_behind`).

Cases: redrive --id publishes the chosen dead letter (only it) to its topic
with its key, value, timestamp and original headers; --since every dead
letter stamped since a time and none before; an unknown id, a cut-down
dead letter, a held one and one without `original-topic` are refused
(exit 1), a malformed time is a usage error (exit 2); list groups the dead
letters by reason, topic and key with counts, and a dead-letter topic that
does not exist holds none.

librdkafka's mock cluster finds no offset for a time (its ListOffsets
answers -1), so --since here reads each partition from its start and
skips the records stamped before the time (dlqtopic.c), which is what
this test sees; a real broker's offsets for the time are not tested."""

import datetime
import json
import re
import time

from harness import header

PARTITIONS = 4
# The dead letter's own headers, which redrive leaves out.
DLQ_HEADERS = ("error", "source-lsn", "original-topic", "payload-size",
               "held_behind")
EXIT_OPERATOR = 1
EXIT_USAGE = 2


class Setup:
    """A daemon publishing a table of the test's own (all columns nullable)
    as CloudEvents to topic outbox.event.<agg>, dead letters to its own
    dlq topic."""

    def __init__(self, pg, broker, outboxd_factory, test_id,
                 on_bad_event="dlq"):
        self.pg = pg
        self.test_id = test_id
        name = "obx_%s" % test_id
        pg.sql("CREATE TABLE public.%s (id text, aggregate_type text, "
               "aggregate_id text, event_type text, payload jsonb, "
               "headers jsonb, created_at timestamptz NOT NULL DEFAULT "
               "now())" % name)
        self.table = "public." + name
        self.agg = "redrive_%s" % test_id
        self.topic = "outbox.event.%s" % self.agg
        broker.create_topic(self.topic, PARTITIONS)
        self.d = outboxd_factory({"outbox": {
            "table": self.table,
            "cloudevents": "binary",
            "cloudevents_source": "/redrive-test",
            "on_bad_event": on_bad_event}})
        self.dlq = self.d.config["outbox"]["dlq_topic"]
        broker.create_topic(self.dlq, PARTITIONS)
        self.d.wait_log(r"streaming from slot", timeout=30)

    def bad(self, id_, key, agg=True, payload=None, collide=True):
        """Commits a row that is dead-lettered: a user header ce_x collides
        with the CloudEvents headers (agg=False: no aggregate type, so no
        topic either; collide=False: a good row, unless its payload is too
        large)."""
        self.pg.sql(
            "INSERT INTO %s (id, aggregate_type, aggregate_id, event_type, "
            "payload, headers) VALUES (%%s, %%s, %%s, 'redrive.x', "
            "%%s::jsonb, %%s::jsonb)" % self.table,
            (id_, self.agg if agg else None, key,
             json.dumps(payload if payload is not None else {"n": id_}),
             json.dumps({"ce_x" if collide else "x": "1",
                         "trace": "abc-%s" % id_})))

    def id(self, name):
        return "%s-%s" % (name, self.test_id)

    def dead_letters(self, consumer, n):
        """The dead letters once n are there, by id."""
        records = consumer.collect([self.dlq], n, timeout=60, settle=0.5)
        by_id = {record_id(r): r for r in records}
        assert len(by_id) == n, [r["headers"] for r in records]
        return by_id

    def redrive(self, *args):
        return self.d.run_cmd(["dlq", "redrive"] + list(args), timeout=120)


def record_id(record):
    """The id a record goes by: its id header, ce_id in CloudEvents' binary
    mode."""
    return (header(record, "id") or header(record, "ce_id") or b"").decode()


def redriven(out):
    """The ids that `redriven <id> to <topic>` lines name, with topics."""
    return dict(re.findall(r"^redriven (\S+) to (\S+)$", out, re.M))


def check_redriven(record, dead):
    """record is dead's record published again."""
    assert record["key"] == dead["key"]
    assert record["value"] == dead["value"]
    assert record["timestamp"] == dead["timestamp"]
    assert record["headers"] == [(k, v) for k, v in dead["headers"]
                                 if k not in DLQ_HEADERS]


def test_redrive_by_id(pg, broker, consumer, outboxd_factory, test_id):
    """--id publishes the chosen dead letter, and only it, to its original
    topic with its key, value, timestamp and original headers (id, type,
    the user's), exit 0."""
    s = Setup(pg, broker, outboxd_factory, test_id)
    a, b = s.id("a"), s.id("b")
    s.bad(a, "k1")
    s.bad(b, "k2")
    dead = s.dead_letters(consumer, 2)
    assert header(dead[a], "original-topic") == s.topic.encode()

    rc, out, err = s.redrive("--id", a)
    assert rc == 0, (out, err)
    assert redriven(out) == {a: s.topic}, out
    assert "dead letters redriven: 1, refused: 0" in out, out
    records = consumer.collect([s.topic], 1, timeout=30, settle=1.0)
    assert len(records) == 1, records
    check_redriven(records[0], dead[a])
    assert [k for k, _ in records[0]["headers"]] == ["id", "type", "ce_x",
                                                     "trace"]


def test_redrive_since(pg, broker, consumer, outboxd_factory, test_id):
    """--since (with a fraction of a second and an offset) publishes every
    dead letter stamped at or after the time, none before it."""
    s = Setup(pg, broker, outboxd_factory, test_id)
    early, late1, late2 = s.id("early"), s.id("late1"), s.id("late2")
    s.bad(early, "k1")
    s.dead_letters(consumer, 1)
    time.sleep(0.5)
    since = datetime.datetime.now(
        datetime.timezone(datetime.timedelta(hours=-3, minutes=-30)))
    time.sleep(0.5)
    s.bad(late1, "k1")
    s.bad(late2, "k2")
    dead = s.dead_letters(consumer, 3)

    rc, out, err = s.redrive("--since",
                             since.isoformat(timespec="milliseconds"))
    assert rc == 0, (out, err)
    assert redriven(out) == {late1: s.topic, late2: s.topic}, out
    records = consumer.collect([s.topic], 2, timeout=30, settle=1.0)
    by_id = {record_id(r): r for r in records}
    assert sorted(by_id) == sorted([late1, late2]), by_id.keys()
    for i in (late1, late2):
        check_redriven(by_id[i], dead[i])

    rc, out, err = s.redrive("--since", "yesterday")
    assert rc == EXIT_USAGE, (out, err)
    assert "RFC 3339" in err, err


def test_redrive_refusals(pg, broker, consumer, outboxd_factory, test_id):
    """An id with no dead letter, a cut-down (too large) dead letter, a held
    one (on_bad_event = hold_key: the key's next event after the too-large
    one) and one without original-topic exit 1, each named; what else was
    chosen is published all the same."""
    s = Setup(pg, broker, outboxd_factory, test_id, on_bad_event="hold_key")
    ok, big, held, lost = (s.id("ok"), s.id("big"), s.id("held"),
                           s.id("lost"))
    s.bad(ok, "k1")
    s.bad(big, "k2", payload={"blob": "x" * (3 * 1024 * 1024)},
          collide=False)
    s.bad(held, "k2", collide=False)
    s.bad(lost, "k3", agg=False)
    dead = s.dead_letters(consumer, 4)
    assert header(dead[held], "held_behind") == big.encode(), (
        dead[held]["headers"])
    assert header(dead[big], "payload-size") is not None, dead[big]["headers"]
    assert dead[big]["value"] is None
    assert header(dead[lost], "original-topic") is None, dead[lost]["headers"]

    rc, out, err = s.redrive("--id", "nothing-%s" % test_id)
    assert rc == EXIT_OPERATOR, (out, err)
    assert "no dead letter with id nothing-%s" % test_id in err, err

    rc, out, err = s.redrive("--id", big, "--id", lost, "--id", ok, "--id",
                             held)
    assert rc == EXIT_OPERATOR, (out, err)
    assert redriven(out) == {ok: s.topic}, out
    assert re.search(r"not redriving dead letter %s: .*cut down" % big, err), err
    assert re.search(r"not redriving dead letter %s: .*original-topic" % lost,
                     err), err
    assert re.search(r"not redriving dead letter %s: .*held record.*"
                     "outboxd dlq release" % held, err), err
    assert "refused: 3" in out, out
    records = consumer.collect([s.topic], 1, timeout=30, settle=1.0)
    assert [record_id(r) for r in records] == [ok]


def test_list_groups_dead_letters(pg, broker, consumer, outboxd_factory,
                                  test_id):
    """list prints the held keys (none with on_bad_event = dlq) and the dead
    letters by reason, then original topic and key, with counts and the
    first and last id; a dead-letter topic that does not exist has none."""
    s = Setup(pg, broker, outboxd_factory, test_id)
    a, b, c = s.id("a"), s.id("b"), s.id("c")
    s.bad(a, "k1")
    s.bad(b, "k1")
    s.bad(c, "k2")
    s.dead_letters(consumer, 3)

    rc, out, err = s.d.run_cmd(["dlq", "list"], timeout=120)
    assert rc == 0, (out, err)
    assert "held keys: 0" in out, out
    assert "dead letters: 3 (0 held)" in out, out
    reasons = re.findall(r"^reason: (.*)$", out, re.M)
    assert len(reasons) == 1 and "ce_x" in reasons[0], out
    assert re.search(r"^  key k1  topic %s  count 2  first %s  last %s$"
                     % (re.escape(s.topic), a, b), out, re.M), out
    assert re.search(r"^  key k2  topic %s  count 1  first %s  last %s$"
                     % (re.escape(s.topic), c, c), out, re.M), out

    rc, out, err = s.d.run_cmd(["dlq", "list", "-s",
                                "outbox.dlq_topic=none.%s" % test_id],
                               timeout=120)
    assert rc == 0, (out, err)
    assert "dead letters: 0" in out, out
