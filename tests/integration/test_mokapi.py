"""Smoke test through a second Kafka-protocol server, one not built on
librdkafka: mokapi (a Go implementation; fetched by
tests/broker/mokapi.sh, which tests/run.sh runs first; tests/README.md,
"A second Kafka-protocol server: mokapi").

mokapi stores no compressed batch (it acknowledges one and drops it) and
refuses an idempotent batch of more than one record after a producer's
first, so outboxd runs here with compression.type = none and
batch.num.messages = 1: the test shows the record format and the inbox's
group and offsets against another implementation, not Kafka's
idempotence, compression or batching, which the test broker's tests
cover."""

import os
import socket
import subprocess
import time

import pytest

import harness
from conftest import OUTBOXD_BIN, REPO_ROOT
from harness import free_port, wait_until
from test_cloudevents import kafka_python_records
from test_inbox import INBOX_SQL
from test_ops import commit_events

PARTITIONS = 3
TOPIC = "outbox.event.mokapi_order"
DLQ = "outbox.dlq.mokapi"
MOKAPI = os.path.join(REPO_ROOT, "tests", "broker", "mokapi.sh")

SPEC = """asyncapi: 3.0.0
info:
  title: outboxd smoke
  version: 1.0.0
servers:
  broker:
    host: 127.0.0.1:%(port)d
    protocol: kafka
channels:
%(channels)s
operations:
%(operations)s
components:
  messages:
    anyMessage:
      contentType: application/octet-stream
      payload: {}
"""

CHANNEL = """  %(name)s:
    address: %(topic)s
    messages:
      anyMessage:
        $ref: '#/components/messages/anyMessage'
    bindings:
      kafka:
        partitions: %(partitions)d
        confluent.key.schema.validation: false
        confluent.value.schema.validation: false
"""

# A receive operation without its kafka bindings makes mokapi panic on
# every OffsetFetch of a group.
OPERATIONS = """  send_%(name)s:
    action: send
    channel:
      $ref: '#/channels/%(name)s'
  receive_%(name)s:
    action: receive
    channel:
      $ref: '#/channels/%(name)s'
    bindings:
      kafka:
        groupId:
          type: string
        clientId:
          type: string
"""


class Mokapi:
    """A mokapi process serving one Kafka server with the given topics."""

    def __init__(self, tmpdir, topics):
        binary = subprocess.run(["bash", MOKAPI, "--bin"], check=True,
                                capture_output=True, text=True).stdout.strip()
        assert os.access(binary, os.X_OK), (
            "mokapi is missing: run bash tests/broker/mokapi.sh")
        self.port = free_port()
        specdir = os.path.join(tmpdir, "spec")  # mokapi watches the directory
        os.makedirs(specdir)
        names = {"t%d" % i: (t, n) for i, (t, n) in enumerate(topics.items())}
        spec = SPEC % {
            "port": self.port,
            "channels": "".join(CHANNEL % {"name": k, "topic": t, "partitions": n}
                                for k, (t, n) in names.items()),
            "operations": "".join(OPERATIONS % {"name": k} for k in names),
        }
        with open(os.path.join(specdir, "kafka.yaml"), "w") as f:
            f.write(spec)
        self.logfile = os.path.join(tmpdir, "mokapi.log")
        with open(self.logfile, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, "--api-port=%d" % free_port(), "--health-enabled=false",
                 "--mcp-server-enabled=false", "--log-level=info",
                 os.path.join(specdir, "kafka.yaml")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.bootstraps = "127.0.0.1:%d" % self.port
        wait_until(self._listening, 20, 0.1, "mokapi listens on %d" % self.port)

    def _listening(self):
        assert self.proc.poll() is None, "mokapi exited:\n" + self.log()
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.5).close()
            return True
        except OSError:
            return False

    def log(self):
        with open(self.logfile, errors="replace") as f:
            return f.read()[-4000:]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def mokapi(tmp_path_factory):
    m = Mokapi(str(tmp_path_factory.mktemp("mokapi")), {TOPIC: PARTITIONS, DLQ: 1})
    try:
        yield m
    finally:
        m.stop()


@pytest.mark.no_sanitizers
@pytest.mark.no_version_matrix
def test_publish_and_inbox_through_mokapi(pg, mokapi, outboxd_factory,
                                          test_id, tmp_path):
    """outboxd publishes 200 events through mokapi; kafka-python (not
    librdkafka) reads every one once, keyed by its aggregate id, in the
    partition murmur2 gives the key, with its id and type headers; then
    `outboxd inbox` stores each one once and its positions reach the end
    of every partition."""
    d = outboxd_factory({
        "kafka": {"bootstrap.servers": mokapi.bootstraps,
                  "compression.type": "none", "batch.num.messages": 1},
        "outbox": {"dlq_topic": DLQ},
    })
    d.wait_log(r"streaming from slot", timeout=30)
    for _ in range(4):
        commit_events(pg, "postgres", "mokapi_order", 50)
    got = kafka_python_records(mokapi.bootstraps, TOPIC, 200, timeout=60)
    ids = [dict(h)["id"] for _, _, h in got]
    assert len(got) == 200 and len(set(ids)) == 200, (len(got), d.log_tail())
    for key, value, headers in got:
        h = dict(headers)
        assert key.startswith(b"key-") and h["type"] == b"tested", (key, h)
    by_partition = kafka_python_partitions(mokapi.bootstraps)
    assert sum(map(len, by_partition.values())) == 200, by_partition
    for p, keys in by_partition.items():
        assert all(harness.murmur2_partition(k, PARTITIONS) == p for k in keys), p
    assert d.stop() == 0, d.log_tail()
    assert "recreating the kafka producer" not in d.log_text()

    db = "inbox_%s" % test_id
    pg.create_db(db)
    pg.run_file(INBOX_SQL, db)
    inbox = harness.Outboxd(OUTBOXD_BIN, {
        "inbox": {"conninfo": pg.conninfo(db), "topics": TOPIC,
                  "group": "%s-inbox" % test_id},
        "outbox": {"dlq_topic": DLQ},
        "kafka": {"bootstrap.servers": mokapi.bootstraps,
                  "compression.type": "none", "batch.num.messages": 1},
        "http": {"listen": ""},
        "log": {"level": "debug"},
    }, str(tmp_path / "inbox"), command="inbox")
    try:
        wait_until(lambda: pg.sql("SELECT count(*) FROM public.inbox",
                                  dbname=db)[0][0] >= 200, 60, 0.5,
                   "the inbox stores 200 rows")
        rows = pg.sql("SELECT id, partition FROM public.inbox", dbname=db)
        assert sorted(r[0] for r in rows) == sorted(i.decode() for i in ids)
        ends = {p: len(keys) for p, keys in by_partition.items() if keys}
        wait_until(lambda: dict(pg.sql(
            "SELECT partition, next_offset FROM public.outboxd_inbox_offsets "
            "WHERE topic = %s", (TOPIC,), dbname=db)) == ends, 30, 0.5,
            "stored positions reach %s" % ends)
        assert inbox.stop() == 0, inbox.log_tail()
    finally:
        inbox.stop(20)


def kafka_python_partitions(bootstraps):
    """{partition: [keys]} of TOPIC, read with kafka-python."""
    import kafka
    c = kafka.KafkaConsumer(bootstrap_servers=[bootstraps],
                            auto_offset_reset="earliest",
                            enable_auto_commit=False, group_id=None,
                            consumer_timeout_ms=2000)
    try:
        parts = [kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        c.assign(parts)
        c.seek_to_beginning()
        out = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            polled = c.poll(timeout_ms=500)
            if not polled and sum(map(len, out.values())) > 0:
                break
            for tp, batch in polled.items():
                out[tp.partition] += [m.key for m in batch]
        return out
    finally:
        c.close()
