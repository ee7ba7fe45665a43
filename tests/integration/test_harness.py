"""Checks of the test harness itself: the real parts behave as the daemon's
tests assume (mock broker over TCP, murmur2 partitioning, Postgres with
wal2json). These need no outboxd binary."""

import json
import signal
import subprocess
import time

import pytest

import harness
from conftest import BROKER_BIN
from harness import murmur2, murmur2_partition

# Kafka's Java client, UtilsTest.testMurmur2, and librdkafka's rdmurmur2.c
# unit test ("kafka").
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"kafka": -798503068,
}


def test_murmur2_matches_java_client():
    for key, want in JAVA_MURMUR2.items():
        assert murmur2(key) == want, key
    # (h & 0x7fffffff) % n, the Java default partitioner's formula
    assert murmur2_partition(b"21", 3) == (-973932308 & 0x7FFFFFFF) % 3
    assert murmur2_partition("abc", 4) == 479470107 % 4


def test_murmur2_matches_librdkafka_partitioner(broker, consumer):
    """A librdkafka producer with partitioner=murmur2_random puts every key
    on the partition murmur2_partition computes, for 4 and 3 partitions."""
    from confluent_kafka import Producer
    topics = {"harness.murmur.p4.%d" % time.time_ns(): 4,
              "harness.murmur.p3.%d" % time.time_ns(): 3}
    for t, n in topics.items():
        broker.create_topic(t, n)
    p = Producer({"bootstrap.servers": broker.bootstraps,
                  "partitioner": "murmur2_random", "linger.ms": 5})
    keys = ["k%d" % i for i in range(100)] + ["", "ÿüß-utf8", "x" * 37]
    for t in topics:
        for k in keys:
            p.produce(t, key=k.encode(), value=b"v")
    assert p.flush(30) == 0
    for t, n in topics.items():
        recs = consumer.collect([t], len(keys), timeout=30, settle=0.5)
        assert len(recs) == len(keys)
        for r in recs:
            assert r["partition"] == murmur2_partition(r["key"].encode(), n), r


def test_mockbroker_commands_and_faults(broker, consumer):
    """down/up/rtt/error/topic answer ok; bad commands answer err; a
    producer cannot deliver while all brokers are down and delivers after
    `up all`."""
    from confluent_kafka import Producer
    topic = "harness.faults.%d" % time.time_ns()
    assert broker.create_topic(topic, 4) == "ok"
    for c in ("rtt all 5", "rtt all 0", "error 0 NOT_LEADER_FOR_PARTITION 1",
              "clear 0", "error 3 6", "clear 3", "topicerr nosuch 3",
              "topicerr nosuch 0", "down 2", "up 2"):
        assert broker.cmd(c) == "ok", c
    for bad in ("down 99", "rtt all x", "frobnicate", "error 0 NO_SUCH_ERR"):
        with pytest.raises(harness.HarnessError):
            broker.cmd(bad)

    delivered = []
    p = Producer({"bootstrap.servers": broker.bootstraps,
                  "enable.idempotence": True, "message.timeout.ms": 0,
                  "linger.ms": 5})
    p.produce(topic, key=b"warm", value=b"0",
              on_delivery=lambda e, m: delivered.append(e))
    assert p.flush(20) == 0 and delivered == [None]

    broker.cmd("down all")
    for i in range(10):
        p.produce(topic, key=b"k%d" % i, value=b"%d" % i,
                  on_delivery=lambda e, m: delivered.append(e))
    assert p.flush(3) > 0, "delivered while every broker was down"
    assert len(delivered) == 1
    broker.cmd("up all")
    assert p.flush(60) == 0
    assert delivered == [None] * 11
    recs = consumer.collect([topic], 11, timeout=30, settle=0.5)
    assert sorted(r["value"] for r in recs) == sorted(
        [b"0"] + [b"%d" % i for i in range(10)])


def test_mockbroker_refuses_batches_sent_behind_a_refused_one(broker, consumer):
    """As a Kafka broker does, the test broker checks an idempotent
    producer's sequence numbers: with one-record requests in flight on a
    slow broker, the one refused with INVALID_RECORD and every one sent
    behind it (OUT_OF_ORDER_SEQUENCE_NUMBER) are not written. A gapless
    producer then fails, so nothing of the burst is written at all.
    librdkafka's mock cluster alone writes the requests behind the refused
    one (fails without tests/broker/seqcheck.c)."""
    from confluent_kafka import Producer
    topic = "harness.seq.%d" % time.time_ns()
    assert broker.create_topic(topic, 1) == "ok"
    p = Producer({"bootstrap.servers": broker.bootstraps,
                  "enable.idempotence": True, "linger.ms": 0,
                  "enable.gapless.guarantee": True,
                  "batch.num.messages": 1, "log_level": 0})
    p.produce(topic, value=b"warm")
    assert p.flush(20) == 0
    before = int(broker.cmd("refused").split()[1])
    reports = []
    assert broker.cmd("rtt all 100") == "ok"
    try:
        assert broker.cmd("error 0 INVALID_RECORD 1") == "ok"
        for i in range(20):
            p.produce(topic, value=b"%d" % i,
                      on_delivery=lambda e, m: reports.append(e))
        with pytest.raises(Exception, match="gap-less"):
            p.flush(20)
    finally:
        broker.cmd("rtt all 0")
    refused = int(broker.cmd("refused").split()[1]) - before
    assert refused >= 1, "no request was sent behind the refused one"
    written = [r["value"] for r in
               consumer.collect([topic], 1, timeout=10, settle=1.0)]
    assert written == [b"warm"], (
        "records sent behind the refused one were written: %s" % written)


def test_mockbroker_answers_a_retry_of_a_written_batch_as_a_duplicate(
        broker, consumer):
    """As a Kafka broker does, the test broker keeps each idempotent
    producer's last five batches per partition and answers a retry of one
    it already wrote DUPLICATE_SEQUENCE_NUMBER, without writing it again
    (the producer takes that as success). Here the broker writes the batch
    at once but answers 3 s later, after the producer's request timeout
    (socket.timeout.ms 1 s): the producer sends it again. librdkafka's mock cluster alone
    wrote it twice (the fault checker's seed 0 blamed outboxd for 321 such
    duplicates after a broker outage)."""
    from confluent_kafka import Producer
    topic = "harness.dup.%d" % time.time_ns()
    assert broker.create_topic(topic, 1) == "ok"
    p = Producer({"bootstrap.servers": broker.bootstraps,
                  "enable.idempotence": True, "linger.ms": 0,
                  "socket.timeout.ms": 1000, "message.timeout.ms": 60000,
                  "log_level": 0})
    p.produce(topic, value=b"warm")
    assert p.flush(20) == 0
    before = int(broker.cmd("duplicates").split()[1])
    reports = []
    assert broker.cmd("rtt all 3000") == "ok"
    try:
        p.produce(topic, value=b"once", on_delivery=lambda e, m: reports.append(e))
        # socket.timeout.ms passed: the request is retried. librdkafka
        # scans for timed-out requests once a second, so the retry leaves
        # between 1 and 2 s after the request (waiting 1.6 s missed it once).
        time.sleep(2.4)
    finally:
        broker.cmd("rtt all 0")
    assert p.flush(30) == 0
    assert reports == [None], reports
    assert int(broker.cmd("duplicates").split()[1]) - before >= 1, \
        "the producer never retried the batch"
    written = [r["value"] for r in
               consumer.collect([topic], 2, timeout=10, settle=1.0)]
    assert written == [b"warm", b"once"], written
    assert broker.cmd("producers %s" % topic) == "ok 2"


def test_pgcluster_wal2json_and_restart(pg):
    """The cluster runs with wal_level=logical, decodes with wal2json v2,
    reports slots and survives an immediate (crash) restart."""
    assert pg.sql("SHOW wal_level")[0][0] == "logical"
    slot = "harness_probe_%d" % time.time_ns()
    pg.sql("SELECT pg_create_logical_replication_slot(%s, 'wal2json')",
           (slot,))
    try:
        s = pg.slot(slot)
        assert s["plugin"] == "wal2json" and not s["active"]
        assert s["confirmed_flush_lsn_int"] == harness.lsn_to_int(
            s["confirmed_flush_lsn"])
        pg.sql("INSERT INTO public.outbox (aggregate_type, aggregate_id, "
               "event_type, payload) VALUES ('harness', 'a1', 'e', "
               "'{\"x\": 1}')")
        rows = pg.sql(
            "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, "
            "'format-version', '2', 'include-lsn', '1', "
            "'add-tables', 'public.outbox')", (slot,))
        recs = [json.loads(r[0]) for r in rows]
        assert [r["action"] for r in recs] == ["B", "I", "C"]
        assert pg.wal_lsn() >= harness.lsn_to_int(recs[-1]["nextlsn"])
        pg.restart("immediate")
        assert pg.slot(slot) is not None
        assert pg.sql("SELECT 1")[0][0] == 1
    finally:
        pg.drop_slot(slot)
    assert pg.slot(slot) is None
    assert harness.int_to_lsn(harness.lsn_to_int("1A/2B3C")) == "1A/2B3C"


def test_mockbroker_on_a_fixed_port_runs_without_stdin_until_sigterm(tmp_path):
    """README's "No Kafka yet" command: `ob-mockbroker --brokers 1 --port P
    --no-stdin` serves on 127.0.0.1:P (advertised so in Metadata) with stdin
    at /dev/null, a record produced there can be read back, and SIGTERM ends
    it with status 0. A second one on the same port exits 1 with one line
    naming the port."""
    from confluent_kafka import Producer
    port = harness.free_port()
    argv = [BROKER_BIN, "--brokers", "1", "--port", str(port), "--no-stdin"]
    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        bootstrap = "127.0.0.1:%d" % port
        harness.wait_until(lambda: "\nREADY\n" in log.read_text(), 10,
                           message="broker READY")
        text = log.read_text()
        assert "BOOTSTRAP %s\n" % bootstrap in text, text
        assert "for trials and tests only" in text, text
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        p.produce("trial.orders", key=b"o-1", value=b"paid")
        assert p.flush(30) == 0
        consumer = harness.Consumer(bootstrap)
        md = consumer._c.list_topics(timeout=10)
        assert ["%s:%d" % (b.host, b.port) for b in md.brokers.values()] == [bootstrap]
        recs = consumer.collect(["trial.orders"], 1, timeout=30, settle=0.2)
        consumer.close()
        assert [(r["key"], r["value"]) for r in recs] == [("o-1", b"paid")]
        assert proc.poll() is None, log.read_text()

        second = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                text=True, timeout=30)
        assert second.returncode == 1, second
        assert second.stderr == ("ob-mockbroker: could not listen on %s: "
                                 "Address already in use\n" % bootstrap), second

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
