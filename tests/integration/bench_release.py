"""A release of held events: its time and memory. A benchmark, not a test
(its file name keeps it out of the integration run; tests/bench/release.sh
runs it and prints the table, tests/README.md "Releasing held keys"
records one).

With outbox.on_bad_event = hold_key, one bad event of a key, then EVENTS
more of it (OUTBOXD_RELEASE_EVENTS, default 100,000) in one transaction:
all are held. Reported: how long holding them took (the rows written to
outboxd_held_events), how long `outboxd dlq release` took as outboxd logs
it, its rate, and outboxd's peak resident memory (VmHWM) over the whole
process. Every held event must reach the topic; the numbers are reported,
never asserted."""

import os
import re
import tempfile
import time

from harness import wait_until
from test_faults import make_topic, nullable_outbox, vm_hwm_kb, wait_streaming
from test_hold import Keys, hold_config, held_rows

EVENTS = int(os.environ.get("OUTBOXD_RELEASE_EVENTS", "100000"))
RESULTS = os.environ.get("OUTBOXD_RELEASE_RESULTS",
                         os.path.join(tempfile.gettempdir(),
                                      "outboxd-release.txt"))
RELEASED = r"released key \S+ of topic \S+: (\d+) held events in ([0-9.]+) s"


def test_release(pg, broker, consumer, outboxd_factory, slot_name, test_id):
    table = nullable_outbox(pg, "obx_%s" % test_id)
    agg = "rel_%s" % test_id
    topic = make_topic(broker, agg)
    cfg = hold_config(table)
    cfg["log"] = {"level": "info"}
    d = outboxd_factory(cfg)
    broker.create_topic(d.config["outbox"]["dlq_topic"], 4)
    wait_streaming(pg, slot_name)
    k = Keys(pg, table, agg)
    k.row("A", bad=True)
    t0 = time.monotonic()
    pg.sql("INSERT INTO %s (id, aggregate_type, aggregate_id, event_type, "
           "payload) SELECT 'A-' || g, %%s, 'A', 'bench', "
           "jsonb_build_object('n', g) FROM generate_series(2, %%s) AS g"
           % table, (agg, EVENTS + 1))
    wait_until(lambda: held_rows(pg, slot_name) == EVENTS + 1, 600, 0.2,
               "the held events written")
    hold_s = time.monotonic() - t0
    rc, out, err = d.run_cmd(["dlq", "release", "A"], timeout=900)
    assert rc == 0, out + err
    events, seconds = re.search(RELEASED, d.log_text()).groups()
    events, seconds = int(events), float(seconds)
    hwm = vm_hwm_kb(d.pid)
    assert events == EVENTS, events
    got = consumer.collect([topic], EVENTS, timeout=120, settle=0.5)
    assert len(got) >= EVENTS, len(got)
    with open(RESULTS, "a") as f:
        f.write("| %d | %.1f | %.1f | %.0f | %.0f |\n" % (
            events, hold_s, seconds, events / seconds, hwm / 1024.0))
