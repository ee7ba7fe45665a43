"""A slot recovery's time and memory: a benchmark, not a test (its file
name keeps it out of the integration run; tests/bench/recovery.sh runs it
and prints the table, tests/README.md "Slot recovery" records one).

outboxd streams with its recovery point stored, is stopped, its slot is
dropped, and ROWS outbox rows (OUTBOXD_RECOVERY_ROWS, default 1,000,000)
are written past the point; outboxd is started again and recovers the slot
from the table. Reported: the rows the recovery published, its time as
outboxd logs it, its rate, and outboxd's peak resident memory (VmHWM) over
the whole process, which the recovery dominates. The rows must all be
published (the recovery's own count), and outboxd must stream afterwards;
the numbers are reported, never asserted."""

import os
import re
import tempfile

from test_faults import Feed, vm_hwm_kb, wait_streaming
from test_slot_recovery import RECOVERED, start
from test_recovery_point import row_xids, wait_point_past

ROWS = int(os.environ.get("OUTBOXD_RECOVERY_ROWS", "1000000"))
RESULTS = os.environ.get("OUTBOXD_RECOVERY_RESULTS",
                         os.path.join(tempfile.gettempdir(),
                                      "outboxd-recovery.txt"))


def test_recovery(own_cluster, broker, outboxd_factory, slot_name, test_id):
    c = own_cluster()
    agg = "rb_%s" % test_id
    broker.create_topic("outbox.event.%s" % agg, 16)
    d = start(c, outboxd_factory, log_level="info")
    wait_streaming(c, slot_name)
    feed = Feed(c, agg)
    wait_point_past(c, slot_name, max(row_xids(c, feed.commit(5))))
    feed.close()
    assert d.stop() == 0, d.log_tail()
    c.sql("SELECT pg_drop_replication_slot(%s)", (slot_name,))
    for first in range(0, ROWS, 100000):
        c.sql("INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, "
              "payload) SELECT %s, 'k' || (g %% 64), 'bench', jsonb_build_object('n', g) "
              "FROM generate_series(%s, %s) AS g",
              (agg, first, min(first + 100000, ROWS) - 1))
    d.start()
    m = d.wait_log(RECOVERED, 1800)
    line = re.search(r"recovered replication slot \S+ in ([0-9.]+) s: (\d+) rows",
                     d.log_text()).groups()
    seconds, rows = float(line[0]), int(line[1])
    wait_streaming(c, slot_name, 60)
    hwm = vm_hwm_kb(d.pid)
    assert rows >= ROWS, m.group(0)
    with open(RESULTS, "a") as f:
        f.write("| %d | %.1f | %.0f | %.0f |\n" % (rows, seconds, rows / seconds,
                                                   hwm / 1024.0))
