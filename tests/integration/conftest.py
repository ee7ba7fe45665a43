"""pytest fixtures for outboxd's integration tests.

One PostgreSQL cluster (15; or the version matrix's 16, 17 or 18, see
harness.py and tests/versions.sh; with the outbox table) and one mock Kafka broker
serve the whole session; every test gets its own replication slot, its own
aggregate types (so its own topics) and its own daemon instances, which are
stopped, and their slots dropped, when the test ends.

A module that sets DECODERS = ("wal2json", "pgoutput") runs each of its
tests that starts a daemon once per decoder (the `decoder` fixture, which
sets postgres.plugin; with pgoutput each test streams a publication of its
own, which the daemon creates); other modules use wal2json.

Binaries come from $OUTBOXD_BUILD (default: <repo>/build; a relative path
is taken from the repo root): $OUTBOXD_BUILD/outboxd and
$OUTBOXD_BUILD/tests/ob-mockbroker. $OUTBOXD_BROKER_BIN names another
broker binary (relative: from the repo root): outboxd built against one
librdkafka (deploy/rdkafka.sh's) tested against a broker built against
another (Debian's). $OUTBOXD_BROKER_TOPIC_IDS_BIN names the broker of the
tests marked topic_ids: one built against librdkafka 2.15.1 or later,
whose mock cluster gives topic ids, deletes topics and names a controller
(tests/rdkafka.sh sets it to build-rdk215/tests/ob-mockbroker;
tests/run.sh's own passes leave those tests out). Anything missing makes
the tests fail.
"""

import itertools
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
_build = Path(os.environ.get("OUTBOXD_BUILD", "build"))
BUILD_DIR = _build if _build.is_absolute() else REPO_ROOT / _build
OUTBOXD_BIN = str(BUILD_DIR / "outboxd")
_broker = os.environ.get("OUTBOXD_BROKER_BIN")
if _broker:
    BROKER_BIN = str(Path(_broker) if Path(_broker).is_absolute()
                     else REPO_ROOT / _broker)
else:
    BROKER_BIN = str(BUILD_DIR / "tests" / "ob-mockbroker")
_topic_ids_broker = os.environ.get("OUTBOXD_BROKER_TOPIC_IDS_BIN")
TOPIC_IDS_BROKER_BIN = (
    str(Path(_topic_ids_broker) if Path(_topic_ids_broker).is_absolute()
        else REPO_ROOT / _topic_ids_broker) if _topic_ids_broker else None)
OUTBOX_SQL = REPO_ROOT / "sql" / "outbox.sql"

_counter = itertools.count(1)


@pytest.fixture(scope="session")
def pg(tmp_path_factory):
    """The session's PostgreSQL cluster, started, with public.outbox. Its
    TimeZone is not UTC (+05:30), so timestamps are rendered with an offset
    that outboxd must honour."""
    cluster = harness.PgCluster(str(tmp_path_factory.mktemp("pg")),
                                extra_conf={"timezone": "'Asia/Kolkata'"})
    cluster.start()
    try:
        # The shipped DDL is the one under test.
        cluster.run_file(str(OUTBOX_SQL))
        yield cluster
    finally:
        cluster.destroy()


def _mock_cluster(binary, logfile):
    """A mock Kafka cluster of 3 brokers run by binary, stopped when the
    fixture that yields from this ends."""
    b = harness.MockBroker(binary, brokers=3, logfile=logfile)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """The session's mock Kafka cluster (3 brokers)."""
    logdir = tmp_path_factory.mktemp("broker")
    yield from _mock_cluster(BROKER_BIN, str(logdir / "ob-mockbroker.log"))


@pytest.fixture
def topic_ids_broker(tmp_path):
    """A mock Kafka cluster of the test's own (3 brokers) that gives topic
    ids and deletes topics: $OUTBOXD_BROKER_TOPIC_IDS_BIN. The test fails
    when it is not set."""
    if TOPIC_IDS_BROKER_BIN is None:
        pytest.fail("OUTBOXD_BROKER_TOPIC_IDS_BIN is not set: this test needs "
                    "a broker built against librdkafka 2.15.1 or later "
                    "(tests/rdkafka.sh sets it)")
    yield from _mock_cluster(TOPIC_IDS_BROKER_BIN,
                             str(tmp_path / "ob-mockbroker-topic-ids.log"))


@pytest.fixture(autouse=True)
def _broker_reset(request):
    """Undoes a test's fault injection on the shared broker."""
    yield
    if "broker" in request.fixturenames:
        b = request.getfixturevalue("broker")
        if b.proc.poll() is None:
            for c in ("up all", "rtt all 0", "clear 0", "clear 3",
                      "clear 22"):
                b.cmd(c)


@pytest.fixture
def test_id(request):
    """A short identifier unique in this session: t<N>."""
    return "t%d" % next(_counter)


@pytest.fixture
def slot_name(request, test_id):
    """A replication slot name unique to this test."""
    base = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())
    return ("it_%s_%s" % (test_id, base))[:63]


def pytest_configure(config):
    """The marks that keep a test out of a pass of tests/run.sh, the mark
    of a test that takes long, and the mark that narrows a test's
    decoders."""
    config.addinivalue_line(
        "markers", "no_sanitizers: left to the plain pass; tests/run.sh's "
        "sanitizer pass runs -m 'not no_sanitizers' (for time: restarts, "
        "kills, waits for a guard or a past defect's timing)")
    config.addinivalue_line(
        "markers", "no_version_matrix: left out of tests/versions.sh, "
        "which runs -m 'not no_version_matrix' (it runs on 15 only)")
    config.addinivalue_line(
        "markers", "slow: builds something of its own, which takes seconds "
        "to minutes (test_image.py: deploy/image-build.sh, about 10 s with "
        "librdkafka 2.15.1 in deploy/rdkafka.sh's cache, minutes when it "
        "must be built first); -m 'not slow' leaves it out")
    config.addinivalue_line(
        "markers", "topic_ids: needs outboxd built with librdkafka 2.3.0 or "
        "later and the broker of $OUTBOXD_BROKER_TOPIC_IDS_BIN, which gives "
        "topic ids: tests/rdkafka.sh runs it, tests/run.sh's passes run "
        "-m 'not topic_ids'")
    config.addinivalue_line(
        "markers", "decoders(*names): the decoders the test runs with, "
        "instead of its module's DECODERS")


def pytest_generate_tests(metafunc):
    """DECODERS of the module (or of the test's decoders mark), less those
    $OUTBOXD_TEST_DECODERS (a comma list) leaves out: the sanitizer pass
    runs the suites with wal2json only (test_pgoutput.py still drives
    pgoutput there). When none is left and wal2json is itself left out
    (the version matrix's servers have no wal2json), the module's tests
    run with the decoders allowed instead, so nothing silently falls back
    to wal2json there."""
    if "decoder" in metafunc.fixturenames:
        decoders = getattr(metafunc.module, "DECODERS", ("wal2json",))
        mark = metafunc.definition.get_closest_marker("decoders")
        if mark is not None:
            decoders = mark.args
        only = harness.decoders_under_test()
        if only:
            decoders = [d for d in decoders if d in only] or \
                (["wal2json"] if harness.wal2json_required() else only)
        metafunc.parametrize("decoder", decoders)


@pytest.fixture
def own_cluster(tmp_path):
    """own_cluster(wal_level='logical', port=None, **conf) -> a started
    PgCluster of the test's own with public.outbox (on port, or a free
    one); destroyed at the end."""
    made = []

    def make(wal_level="logical", port=None, **conf):
        c = harness.PgCluster(str(tmp_path / ("pg%d" % len(made))),
                              wal_level=wal_level, port=port, extra_conf=conf)
        made.append(c)
        c.start()
        c.run_file(str(OUTBOX_SQL))
        return c
    yield make
    for c in made:
        c.destroy()


def own_db(pg, name):
    """A database of the test's own in the session cluster, with the
    shipped outbox table."""
    pg.create_db(name)
    pg.run_file(str(OUTBOX_SQL), dbname=name)
    return name


@pytest.fixture
def consumer(broker):
    c = harness.Consumer(broker.bootstraps)
    yield c
    c.close()


def default_config(pg, broker, slot_name, test_id, decoder="wal2json"):
    """The daemon settings every test starts from."""
    return {
        "postgres": {
            "conninfo": pg.conninfo(),
            "slot": slot_name,
            "create_slot": True,
            "plugin": decoder,
            "publication": "pub_%s" % test_id,
            "status_interval_ms": 500,
            "reconnect_max_backoff_ms": 2000,
        },
        "outbox": {
            "table": "public.outbox",
            "topic": "outbox.event.{aggregate_type}",
            "dlq_topic": "%s.outbox.dlq" % test_id,
        },
        "kafka": {
            "bootstrap.servers": broker.bootstraps,
        },
        "http": {
            "listen": "",
        },
        "log": {
            "level": "debug",
        },
    }


@pytest.fixture
def outboxd_factory(request, pg, broker, slot_name, test_id, tmp_path,
                    decoder):
    """outboxd_factory(overrides=None, start=True, extra_args=()) -> a new
    harness.Outboxd with the default config merged with overrides
    ({section: {key: value}}; a value of harness.UNSET removes the key).
    Every instance is stopped at the end of the test and its slot
    dropped."""
    instances = []

    def make(overrides=None, start=True, extra_args=(), env=None):
        cfg = default_config(pg, broker, slot_name, test_id, decoder)
        for section, items in (overrides or {}).items():
            sec = cfg.setdefault(section, {})
            for k, v in items.items():
                if v is UNSET:
                    sec.pop(k, None)
                else:
                    sec[k] = v
        d = harness.Outboxd(OUTBOXD_BIN, cfg, str(tmp_path / "outboxd"),
                            extra_args=extra_args, start=start, env=env)
        instances.append(d)
        return d

    request.node._outboxd_instances = instances
    yield make
    slots = set()
    for d in instances:
        d.stop(40)
        slots.add(d.config["postgres"]["slot"])
    for s in slots:
        try:
            pg.drop_slot(s)
        except Exception as e:  # do not hide the test's own failure
            print("could not drop slot %s: %s" % (s, e))


class _Unset:
    def __repr__(self):
        return "UNSET"


UNSET = _Unset()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attaches the tail of every daemon log of a failed test."""
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and call.when in ("call", "setup"):
        for i, d in enumerate(getattr(item, "_outboxd_instances", [])):
            rep.sections.append(("outboxd log %d (%s)" % (i + 1, d.logfile),
                                 d.log_tail(12000)))
