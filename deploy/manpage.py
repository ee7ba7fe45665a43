#!/usr/bin/env python3
"""Makes the man pages outboxd(1) and outboxd.ini(5) from the sections of
deploy/README.md that hold those facts ("Command line" and "Configuration
reference"), so that each fact is written once, in Markdown, and the man
pages only render it.

    python3 deploy/manpage.py           # rewrite deploy/outboxd.1 and deploy/outboxd.ini.5
    python3 deploy/manpage.py --check   # exit 1 when either is out of date

The Markdown it reads is the subset those sections use: paragraphs, "- "
lists, fenced code blocks, pipe tables, `code`, **bold** and [links](…).
"""

import pathlib
import re
import sys

DEPLOY = pathlib.Path(__file__).resolve().parent
README = DEPLOY / "README.md"

PAGES = {
    "outboxd.1": {
        "section": "Command line",
        "title": "OUTBOXD 1",
        "name": "outboxd \\- publish PostgreSQL transactional-outbox events to Kafka",
        # None: the section's first code block, less what follows each
        # command after a run of spaces; the block is then not repeated.
        "synopsis": None,
        "see_also": "outboxd.ini(5), pg_recvlogical(1)",
    },
    "outboxd.ini.5": {
        "section": "Configuration reference",
        "title": "OUTBOXD.INI 5",
        "name": "outboxd.ini \\- configuration file of outboxd",
        "synopsis": ["/etc/outboxd/outboxd.ini"],
        "see_also": "outboxd(1)",
    },
}


def section_text(markdown, title):
    """The body of the "## title" section of markdown (up to the next
    heading of the same or a higher level)."""
    lines = markdown.splitlines()
    start = lines.index("## " + title) + 1
    end = next((i for i in range(start, len(lines))
                if re.match(r"^#{1,2} ", lines[i])), len(lines))
    return lines[start:end]


# The files `meson install` puts under /usr/share/outboxd (meson.build,
# with --prefix=/usr): a man page names them where they are installed, not
# where they are in the source tree.
INSTALLED = [(re.compile(r"^(\.\./)?sql/(?=[^/]+$)"), "/usr/share/outboxd/sql/"),
             (re.compile(r"^deploy/outboxd\.ini$"),
              "/usr/share/outboxd/outboxd.ini")]


def installed(path):
    """path (a `code` span) as installed, when it names a shipped file
    (a folder alone is left as it is)."""
    for pattern, where in INSTALLED:
        path = pattern.sub(where, path)
    return path


def escape(text):
    return text.replace("\\", "\\e").replace("-", "\\-")


def inline(text):
    """Markdown inline markup to roff: code and bold in bold, links as
    their text."""
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)
    out = []
    for i, part in enumerate(re.split(r"(`[^`]*`|\*\*[^*]+\*\*)", text)):
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append("\\fB" + escape(installed(part[1:-1])) + "\\fR")
        elif part.startswith("**") and part.endswith("**"):
            out.append("\\fB" + escape(part[2:-2]) + "\\fR")
        else:
            out.append(escape(part))
    return "".join(out)


def text_line(text):
    """One roff text line: a leading dot or quote is protected."""
    line = inline(text)
    return "\\&" + line if line[:1] in (".", "'") else line


def cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def render_table(rows):
    header = cells(rows[0])
    out = []
    for row in rows[2:]:
        values = cells(row)
        out.append(".TP")
        out.append("\\fB" + escape(values[0].strip("`")) + "\\fR")
        parts = []
        for name, value in zip(header[1:], values[1:]):
            if name.lower() in ("meaning", "why", "what it is", "what"):
                parts.append(value)
            elif value:
                parts.append("%s: %s." % (name[:1].upper() + name[1:], value))
        out.append(text_line(" ".join(p for p in parts if p)))
    return out


def render(body):
    out, para, i = [], [], 0

    def flush():
        if para:
            out.append(text_line(" ".join(para)))
            para.clear()

    while i < len(body):
        line = body[i]
        if line.startswith("```"):
            flush()
            out += [".PP", ".nf", ".RS 4"]
            i += 1
            while not body[i].startswith("```"):
                out.append("\\&" + escape(body[i]))
                i += 1
            out += [".RE", ".fi"]
        elif line.startswith("|"):
            flush()
            rows = []
            while i < len(body) and body[i].startswith("|"):
                rows.append(body[i])
                i += 1
            out += render_table(rows)
            continue
        elif line.startswith("### "):
            flush()
            out += [".SS " + inline(line[4:])]
        elif line.startswith("- "):
            flush()
            out += [".IP \\(bu 2"]
            para.append(line[2:].strip())
        elif line.startswith("  ") and para:
            para.append(line.strip())
        elif not line.strip():
            flush()
        else:
            if not para:
                out.append(".PP")
            para.append(line.strip())
        i += 1
    flush()
    return out


def page(name, spec, markdown):
    title, number = spec["title"].split()
    out = [
        ".\\\" Made by deploy/manpage.py from deploy/README.md, \"%s\"; "
        "edit that, then run the script." % spec["section"],
        ".TH %s %s \"\" \"outboxd\" \"outboxd\"" % (title, number),
        ".SH NAME", spec["name"], ".SH SYNOPSIS", ".nf"]
    body = section_text(markdown, spec["section"])
    synopsis = spec["synopsis"]
    if synopsis is None:
        start = body.index("```") + 1
        end = body.index("```", start)
        synopsis = [re.split(r"\s{3,}", line)[0] for line in body[start:end]]
        body = body[:start - 1] + body[end + 1:]
    out += ["\\&" + escape(s) for s in synopsis]
    out += [".fi", ".SH DESCRIPTION"]
    out += render(body)
    out += [".SH SEE ALSO", spec["see_also"] + ",",
            "/usr/share/outboxd/sql/README.md (the database side),",
            "and deploy/README.md and tests/README.md in outboxd's source "
            "tree."]
    return "\n".join(out) + "\n"


def main(argv):
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        print(__doc__, file=sys.stderr)
        return 2
    markdown = README.read_text()
    stale = []
    for name, spec in PAGES.items():
        text = page(name, spec, markdown)
        path = DEPLOY / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("deploy/%s out of date with deploy/README.md: run python3 "
              "deploy/manpage.py" % ", deploy/".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
