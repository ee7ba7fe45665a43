"""A database that is not UTF-8: keys, payloads and headers go out as
UTF-8 bytes whatever the server encoding and the client settings, the same
from the backlog and from the stream, so one aggregate keeps one key (and
one partition) across the cutover (sql/README.md, "The outbox table").

wal2json writes in the server's encoding and outboxd converts its text;
pgoutput and the backlog's SQL follow the connection's client_encoding,
which outboxd pins to UTF8 whatever the conninfo, PGCLIENTENCODING or a
role or database setting say."""

import json
import time

import confluent_kafka
import pytest

from harness import wait_until
from conftest import OUTBOX_SQL
from test_faults import make_topic

DECODERS = ("wal2json", "pgoutput")

KEY = "Zo\u00eb"
PAYLOAD = {"name": "Bj\u00f6rk \u00e0 la cr\u00e8me", "n": 1}


def latin1_db(pg, name):
    """A LATIN1 database of the test's own with the shipped outbox table."""
    pg.sql("CREATE DATABASE \"%s\" TEMPLATE template0 ENCODING 'LATIN1' "
           "LC_COLLATE 'C' LC_CTYPE 'C'" % name)
    pg.run_file(str(OUTBOX_SQL), dbname=name)
    return name


def insert(pg, db, agg, n):
    """Writes event n of key KEY (through a UTF-8 client: the server
    converts)."""
    body = dict(PAYLOAD, n=n)
    pg.sql("INSERT INTO public.outbox (aggregate_type, aggregate_id, "
           "event_type, payload, headers) VALUES (%s, %s, %s, %s, %s)",
           (agg, KEY, "caf\u00e9", json.dumps(body),
            json.dumps({"note": "d\u00e9j\u00e0"})), dbname=db)


def raw_records(broker, topic, count, timeout=30):
    """The topic's records as raw bytes (key, value, headers, partition),
    read with a plain consumer that decodes nothing."""
    c = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstraps, "group.id": "enc-%s" % topic,
        "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.key(), m.value(), dict(m.headers() or []),
                        m.partition()))
    finally:
        c.close()
    return out


@pytest.mark.parametrize("client_encoding", ["", "UTF8", "LATIN1"])
def test_latin1_database_publishes_utf8_the_same_from_backlog_and_stream(
        pg, broker, outboxd_factory, slot_name, test_id, decoder,
        client_encoding):
    """A LATIN1 database, key 'Zoe' with a diaeresis: one row before
    outboxd creates its slot (published by the backlog), two after
    (streamed). Whatever client_encoding the conninfo names, every record
    carries the key, the payload, the type and the headers as UTF-8, and
    all three land in one partition. Before: Latin-1 bytes (both
    decoders), and with client_encoding=UTF8 and wal2json, the backlog's
    key UTF-8 but the stream's Latin-1 (two keys for one aggregate)."""
    db = latin1_db(pg, "lat_%s_%s" % (test_id, client_encoding.lower()
                                      or "default"))
    agg = "enc_%s" % test_id
    topic = make_topic(broker, agg)
    insert(pg, db, agg, 1)
    conninfo = pg.conninfo(dbname=db)
    if client_encoding:
        conninfo += " client_encoding=%s" % client_encoding
    d = outboxd_factory({"postgres": {"conninfo": conninfo},
                         "outbox": {"backlog_where": "true"}})
    d.wait_log(r"streaming from slot", 60)
    insert(pg, db, agg, 2)
    insert(pg, db, agg, 3)
    recs = raw_records(broker, topic, 3)
    assert len(recs) == 3, d.log_tail()
    for key, value, headers, _ in recs:
        assert key == KEY.encode("utf-8"), key
        body = json.loads(value.decode("utf-8"))
        assert body["name"] == PAYLOAD["name"], value
        assert headers["type"] == "caf\u00e9".encode("utf-8"), headers
        assert headers["note"] == "d\u00e9j\u00e0".encode("utf-8"), headers
    assert sorted(json.loads(v)["n"] for _, v, _, _ in recs) == [1, 2, 3]
    assert len({p for _, _, _, p in recs}) == 1
    assert d.running(), d.log_tail()
    rc, out, err = d.run_cmd(["check"])
    line = [ln for ln in out.splitlines() if ln.startswith("encoding")]
    assert line and " ok " in line[0] and "LATIN1" in line[0], out + err


def own_encoding_db(pg, name, encoding):
    """A database of the test's own in encoding, with the outbox table."""
    pg.sql("CREATE DATABASE \"%s\" TEMPLATE template0 ENCODING '%s' "
           "LC_COLLATE 'C' LC_CTYPE 'C'" % (name, encoding))
    pg.run_file(str(OUTBOX_SQL), dbname=name)
    return name


def test_a_byte_without_a_character_is_never_published_as_it_came(
        pg, broker, outboxd_factory, slot_name, test_id, decoder):
    """A WIN1252 database, key 'Zoe' with a diaeresis; event 2's payload
    holds 0x81, a byte WIN1252 leaves undefined (a WIN1252 client may
    write it; it has no UTF-8 form). Events 1 and 3 go out with the UTF-8
    key in one partition. wal2json: event 2's record is dead-lettered as
    it came (before: published as it came, key 'Zo\\xeb', another
    partition than its key's other events); pgoutput: PostgreSQL cannot
    send it, and outboxd stops without confirming past it."""
    db = own_encoding_db(pg, "w1252_%s" % test_id, "WIN1252")
    agg = "enc_%s" % test_id
    topic = make_topic(broker, agg)
    dlq = "%s.outbox.dlq" % test_id
    broker.create_topic(dlq, 1)
    d = outboxd_factory({"postgres": {"conninfo": pg.conninfo(dbname=db)}})
    d.wait_log(r"streaming from slot", 60)
    insert(pg, db, agg, 1)
    pg.sql("INSERT INTO public.outbox (aggregate_type, aggregate_id, "
           "event_type, payload) VALUES (%s, %s, 'e', "
           "jsonb_build_object('n', 2, 'junk', chr(129)))", (agg, KEY),
           dbname=db)
    insert(pg, db, agg, 3)
    if decoder == "pgoutput":
        assert d.wait(60) == 1, d.log_tail()
        recs = raw_records(broker, topic, 1, timeout=10)
        assert [json.loads(v)["n"] for _, v, _, _ in recs] == [1], recs
        return
    recs = raw_records(broker, topic, 2)
    assert sorted(json.loads(v)["n"] for _, v, _, _ in recs) == [1, 3], recs
    assert {k for k, _, _, _ in recs} == {KEY.encode("utf-8")}, recs
    assert len({p for _, _, _, p in recs}) == 1, recs
    dead = raw_records(broker, dlq, 1)
    assert len(dead) == 1, d.log_tail()
    key, value, headers, _ = dead[0]
    assert b"\x81" in value and b"Zo\xeb" in value, value
    assert b"no UTF-8 form" in headers["error"], headers
    assert d.running(), d.log_tail()


@pytest.mark.parametrize("encoding", ["EUC_JP", "WIN1258"])
def test_encodings_glibc_converts_otherwise_are_refused_with_wal2json(
        pg, broker, outboxd_factory, slot_name, test_id, decoder, encoding):
    """EUC_JP (glibc maps '～' U+FF5E to U+301C, PostgreSQL does not) and
    WIN1258 (glibc composes combining marks): the backlog's and
    pgoutput's text, which PostgreSQL converts, would differ from
    wal2json's converted by outboxd, so one key could give two byte
    strings. With wal2json `check` fails on its encoding line naming
    pgoutput, and run stops (exit 1) saying so; pgoutput is fine."""
    db = own_encoding_db(pg, "enc_%s_%s" % (encoding.lower(), test_id),
                         encoding)
    d = outboxd_factory({"postgres": {"conninfo": pg.conninfo(dbname=db)}},
                        start=False)
    rc, out, err = d.run_cmd(["check"])
    line = [ln for ln in out.splitlines() if ln.startswith("encoding")]
    assert line, out + err
    if decoder == "pgoutput":
        assert " ok " in line[0] and encoding in line[0], out
        return
    assert rc == 2 and " FAIL " in line[0] and "pgoutput" in line[0], out
    d.start()
    assert d.wait(60) == 1, d.log_tail()
    assert "postgres.plugin = pgoutput" in d.log_text(), d.log_tail()
