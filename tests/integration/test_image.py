"""The container image (deploy/Dockerfile) without docker: its build stage
is deploy/image-build.sh, run here into a temporary DESTDIR, and its
runtime stage's packages are checked against the libraries that build's
binaries need.

What the image gives its users: outboxd linked against librdkafka 2.15.1
(deploy/rdkafka.sh's, not Debian 12's 2.0.2), found in /usr/lib/outboxd
through the binary's RUNPATH, with every library the two need installed
by the runtime stage. The build test takes about 10 s when librdkafka is
in deploy/rdkafka.sh's cache (/var/cache/outboxd-rdkafka) and a few
minutes when it must be fetched and built first (marked slow)."""

import os
import re
import subprocess

import pytest

from conftest import REPO_ROOT
from test_cli import describe

DOCKERFILE = REPO_ROOT / "deploy" / "Dockerfile"
RDKAFKA_SH = REPO_ROOT / "deploy" / "rdkafka.sh"
IMAGE_BUILD = "deploy/image-build.sh"
RDKAFKA_VERSION = "2.15.1"
# Where the image keeps its librdkafka, below DESTDIR as below /.
LIB_DIR = "usr/lib/outboxd"
# Every Debian image has the C library (and the dynamic loader, libm):
# the runtime stage need not name it.
BASE_PACKAGES = {"libc6"}


def dockerfile_stages(text):
    """{stage name: [instruction]} of a Dockerfile, each instruction one
    logical line (continuations joined, comments dropped); the stage of a
    `FROM image` without AS is named ""."""
    stages, name, pending = {}, None, ""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        instr, pending = " ".join(pending.split()), ""
        if not instr:
            continue
        m = re.match(r"FROM\s+\S+(?:\s+AS\s+(\S+))?$", instr, re.I)
        if m:
            name = m.group(1) or ""
            stages[name] = []
        elif name is not None:
            stages[name].append(instr)
    return stages


def apt_installed(instructions):
    """The packages the stage's `apt-get install` commands name."""
    packages = set()
    for instr in instructions:
        if not instr.startswith("RUN "):
            continue
        for command in instr[4:].split("&&"):
            words = command.split()
            if "apt-get" in words and "install" in words:
                packages |= {w for w in words[words.index("install") + 1:]
                             if not w.startswith("-")}
    return packages


def bash_array(path, name):
    """The words of a bash array assigned on one line: NAME=(a b c)."""
    m = re.search(r"^%s=\(([^)]*)\)" % name, path.read_text(), re.M)
    assert m, "%s has no %s=(...) line" % (path, name)
    return m.group(1).split()


def no_ld_path_env():
    """The environment without LD_LIBRARY_PATH, which would take
    precedence over a RUNPATH."""
    return {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}


def run(args, timeout=60, **kw):
    r = subprocess.run(args, capture_output=True, text=True,
                       timeout=timeout, env=no_ld_path_env(),
                       stdin=subprocess.DEVNULL, **kw)
    assert r.returncode == 0, "%s: %s" % (" ".join(map(str, args)), describe(r))
    return r.stdout


def needed(path):
    """The NEEDED entries (sonames) of an ELF file."""
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                      run(["readelf", "-d", str(path)]))


def resolved(path):
    """{soname: path} as ldd resolves an ELF file's libraries (the dynamic
    loader under its own path as well)."""
    out = {}
    for line in run(["ldd", str(path)]).splitlines():
        line = line.strip()
        assert "not found" not in line, (path, line)
        m = re.match(r"(\S+) => (\S+) \(0x[0-9a-f]+\)$", line)
        if m:
            out[m.group(1)] = m.group(2)
        elif line.startswith("/"):
            loader = line.split()[0]
            out[os.path.basename(loader)] = loader
    return out


def debian_package(path):
    """The Debian package a library file belongs to (dpkg -S), under its
    path, its real path or either with /usr (the merged /usr leaves some
    packages' files under /lib in dpkg's list, some under /usr/lib)."""
    tries = []
    for p in (path, os.path.realpath(path)):
        tries.append(p)
        tries.append(p[len("/usr"):] if p.startswith("/usr/") else "/usr" + p)
    for p in tries:
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True,
                           timeout=60)
        if r.returncode == 0:
            for line in r.stdout.splitlines():
                if not line.startswith("diversion"):
                    return line.split(": ", 1)[0].split(":")[0]
    raise AssertionError("no Debian package holds %s (tried %s)"
                         % (path, tries))


def test_dockerfile_build_stage_runs_image_build_and_runtime_copies_it():
    """The image is what deploy/image-build.sh builds: the build stage
    copies the script and deploy/rdkafka.sh, installs the packages
    rdkafka.sh would otherwise install itself, and runs the script into
    /out; the runtime stage copies outboxd and /usr/lib/outboxd/ from
    there and installs no librdkafka1 (whose 2.0.2 is not the library
    outboxd is built against)."""
    stages = dockerfile_stages(DOCKERFILE.read_text())
    assert set(stages) == {"build", ""}, list(stages)
    build, runtime = stages["build"], stages[""]

    copied = [w for i in build if i.startswith("COPY ") for w in i.split()[1:-1]]
    for path in ("deploy/rdkafka.sh", IMAGE_BUILD):
        assert path in copied, (path, build)
    assert "RUN bash %s /out" % IMAGE_BUILD in build, build

    wanted = set(bash_array(RDKAFKA_SH, "DEV_PACKAGES")) \
        | set(bash_array(RDKAFKA_SH, "TOOL_PACKAGES")) \
        | {"npm", "nodejs", "ca-certificates"}
    missing = wanted - apt_installed(build)
    assert not missing, "the build stage lacks %s" % sorted(missing)

    assert "COPY --from=build /out/usr/bin/outboxd /usr/bin/outboxd" \
        in runtime, runtime
    assert "COPY --from=build /out/%s/ /%s/" % (LIB_DIR, LIB_DIR) \
        in runtime, runtime
    assert "COPY --from=build /out/usr/share/doc/outboxd/ /usr/share/doc/outboxd/" \
        in runtime, runtime
    assert "librdkafka1" not in apt_installed(runtime), runtime


@pytest.mark.slow
@pytest.mark.no_sanitizers
def test_image_build_runs_with_librdkafka_2_15_1_and_runtime_libraries(
        tmp_path):
    """deploy/image-build.sh, as the Dockerfile's build stage runs it, into
    a DESTDIR here (with a build directory of its own, fresh as in docker):
    DESTDIR/usr/bin/outboxd --version names librdkafka 2.15.1; ldd finds
    librdkafka.so.1 in DESTDIR/usr/lib/outboxd (a file there, not a link
    to the cache, and not Debian's in /usr/lib/x86_64-linux-gnu); and every
    other library that outboxd and that librdkafka.so.1 need comes from a
    package the runtime stage installs (or from libc6); librdkafka's
    licence is in DESTDIR/usr/share/doc/outboxd."""
    dest = tmp_path / "out"
    r = subprocess.run(["bash", IMAGE_BUILD, str(dest), str(tmp_path / "build")],
                       cwd=str(REPO_ROOT), capture_output=True, text=True,
                       timeout=1500, env=no_ld_path_env(),
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, describe(r)

    binary = dest / "usr" / "bin" / "outboxd"
    lib = dest / LIB_DIR / "librdkafka.so.1"
    assert lib.is_file() and not lib.is_symlink(), lib
    # Its licence travels with it (BSD 2-clause: binary copies carry it).
    licences = dest / "usr/share/doc/outboxd/librdkafka/LICENSES.txt"
    assert "Redistribution and use in source and binary forms" in \
        licences.read_text(), licences
    version = run([str(binary), "--version"]).splitlines()
    assert "librdkafka %s" % RDKAFKA_VERSION in version, version

    libs = resolved(binary)
    assert os.path.realpath(libs.get("librdkafka.so.1", "")) == \
        os.path.realpath(lib), libs

    runtime = apt_installed(dockerfile_stages(DOCKERFILE.read_text())[""])
    packages = {}  # package -> the sonames it provides here
    for elf in (binary, lib):
        paths = resolved(elf)
        for soname in needed(elf):
            if elf == binary and soname == "librdkafka.so.1":
                continue  # in DESTDIR, checked above
            packages.setdefault(debian_package(paths[soname]), set()).add(
                soname)
    missing = {p: sorted(s) for p, s in packages.items()
               if p not in runtime | BASE_PACKAGES}
    assert not missing, ("the runtime stage of deploy/Dockerfile does not "
                         "install %s (installs %s)" % (missing, sorted(runtime)))
    # librdkafka's own, beside outboxd's: the check above saw them.
    for soname in ("libsasl2.so.2", "libzstd.so.1", "liblz4.so.1",
                   "libcurl.so.4", "libssl.so.3"):
        assert any(soname in s for s in packages.values()), packages
