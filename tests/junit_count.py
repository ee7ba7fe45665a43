#!/usr/bin/env python3
"""Counts a pytest JUnit report for tests/run.sh and tests/versions.sh.

    junit_count.py REPORT LABEL FAILURES

Prints "passed failed" on one line; a report that is missing or unreadable
counts as "0 0" (the caller then judges pytest's exit code). Skipped tests
count as failed: a missing part must fail, never skip. Appends one line per
failed, erroring or skipped test to the file FAILURES, "LABEL: test id:
first line of the reason", so the end of a long run can say which tests
failed without scrolling back through it.
"""
import sys
import xml.etree.ElementTree as ET


def reason(case):
    """The first line of the failure, error or skip message of case, or
    None when the test passed."""
    for kind in ("failure", "error", "skipped"):
        el = case.find(kind)
        if el is not None:
            text = (el.get("message") or el.text or kind).strip()
            first = text.splitlines()[0] if text else kind
            return "%s: %s" % (kind, first[:300])
    return None


def main():
    path, label, failures = sys.argv[1:4]
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        print(0, 0)
        return
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    tests = failed = 0
    lines = []
    for s in suites:
        tests += int(s.get("tests", 0))
        failed += sum(int(s.get(k, 0)) for k in ("failures", "errors", "skipped"))
        for case in s.iter("testcase"):
            why = reason(case)
            if why is not None:
                lines.append("%s: %s::%s: %s" % (label, case.get("classname"),
                                                  case.get("name"), why))
    if lines:
        with open(failures, "a") as f:
            f.write("\n".join(lines) + "\n")
    print(tests - failed, failed)


if __name__ == "__main__":
    main()
