"""Host checks before a run on real machines: every problem, every host, at once.

``gnnsched cluster check`` and the ssh launcher's :meth:`~.launcher.SshLauncher.preflight`
(so ``gnnsched train --launcher ssh``, before any role starts) run the same probe on every
host over one ssh session each, all hosts in parallel:

* **ssh**: the host answers (``BatchMode``: no password prompt; ``ConnectTimeout``); a refused
  connection, an unknown host name, a host key not in ``known_hosts`` or a missing
  authorized key is each said in words, with the fix;
* **Python and packages**: the remote Python (``--remote-python``) starts in ``--remote-dir``,
  imports ``gnnsched``, and has the same versions of gnnsched, torch, dgl and pyzmq as this
  machine, and the same gnnsched source (a digest of the package's ``.py`` files: one
  version number can hide two checkouts); numpy and the Python patch level only warn;
* **address**: the host's cluster-file address is on one of its interfaces (roles bind their
  sockets to it; gloo uses that interface, found here);
* **partitions**: present at the path the run will use, with the same ``gnnsched.json`` (its
  sha256) and every file it lists; ``verify``: every file's sha256 as well;
* **run directory**: writable there and shared with this machine (logs and checkpoints
  written on a host must be seen by the coordinator, which resumes from them);
* **ports**: each host listens on a port of gnnsched's role range (20000-60000) on its
  address, then connects to the coordinator's address and to every other host's listener
  (firewalls between hosts, or between the hosts and this machine);
* **clock**: the host's clock against this one's (midpoint of the round trip); a skew above
  ``skew_warn_s`` warns (timestamps in logs and records would not line up).

The probe is one Python script (:data:`PROBE`), sent over the ssh session's stdin: nothing
is installed on the hosts and nothing is left there but the marker it removes. It imports no
torch or DGL (versions come from the installed distributions' metadata), so a host answers
in a fraction of a second. This machine's facts come from running the same script here.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import select
import shlex
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gnnsched.runtime.procs import end_piped

DISTS = ("gnnsched", "torch", "dgl", "pyzmq")  # a different version is a problem
SOFT_DISTS = ("numpy",)  # a different version is a warning
DIGEST_PACKAGES = ("gnnsched", "gnnsched.runtime", "gnnsched.datasets")
ROLE_PORTS = (20000, 60000)  # gnnsched.runtime.transport.bind_random's range
SKEW_WARN_S = 0.5

# The probe, run by the remote Python (sent as the first line of the ssh session's stdin,
# JSON-encoded). Written for any Python 3: a host with an old one must still say so.
PROBE = r'''
import hashlib, json, os, random, select, socket, subprocess, sys, threading, time


def say(tag, obj):
    sys.stdout.write(tag + " " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def digest(packages):
    import importlib.util
    h = hashlib.sha256()
    for pkg in packages:
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            h.update(("missing " + pkg).encode())
            continue
        root = list(spec.submodule_search_locations)[0]
        for name in sorted(os.listdir(root)):
            if name.endswith(".py"):
                h.update(pkg.encode() + b"/" + name.encode() + b"\0")
                with open(os.path.join(root, name), "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def versions(dists):
    out = {}
    try:
        from importlib import metadata
    except ImportError:
        return dict((d, "?") for d in dists)
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except Exception:
            out[d] = None
    return out


def interface_of(address):
    """The interface holding ``address`` (None: not on this host)."""
    try:
        text = subprocess.run(["ip", "-o", "addr", "show"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, universal_newlines=True,
                              timeout=5).stdout
        for line in text.splitlines():
            f = line.split()
            if len(f) > 3 and f[2] in ("inet", "inet6") and f[3].split("/")[0] == address:
                return f[1].split("@")[0]
    except Exception:
        pass
    try:
        import fcntl
        import struct
        for _, name in socket.if_nameindex():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
                if socket.inet_ntoa(raw[20:24]) == address:
                    return name
            except OSError:
                pass
            finally:
                s.close()
    except Exception:
        pass
    return None


def partitions(a):
    out = {}
    root = a["partitions"]
    if not os.path.isdir(root):
        out["missing"] = True
        return out
    meta = os.path.join(root, "gnnsched.json")
    try:
        with open(meta, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        out["meta_error"] = str(exc)
        return out
    out["meta_sha256"] = hashlib.sha256(raw).hexdigest()
    out["missing_files"] = [f for f in a.get("files", [])
                            if not os.path.isfile(os.path.join(root, f))]
    if a.get("verify"):
        bad = []
        for f, want in sorted(a.get("sha256", {}).items()):
            p = os.path.join(root, f)
            if not os.path.isfile(p):
                continue
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            if h.hexdigest() != want:
                bad.append(f)
        out["corrupt_files"] = bad
    return out


def run_dir(a):
    try:
        os.makedirs(a["run_dir"], exist_ok=True)
        path = os.path.join(a["run_dir"], a["marker"])
        with open(path, "w") as fh:
            fh.write("gnnsched host check\n")
        return {"marker": path}
    except OSError as exc:
        return {"error": str(exc)}


def listen(address):
    fam = socket.AF_INET6 if ":" in address else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    lo, hi = a_ports
    for _ in range(50):
        port = random.randint(lo, hi)
        try:
            s.bind((address, port))
            s.listen(64)
            return s, port, None
        except OSError as exc:
            err = exc
    s.close()
    return None, None, str(err)


def accept_loop(s, stop):
    s.settimeout(0.2)
    while not stop.is_set():
        try:
            c, _ = s.accept()
            c.close()
        except socket.timeout:
            pass
        except OSError:
            return


def connect(host, port, timeout):
    try:
        c = socket.create_connection((host, port), timeout=timeout)
        c.close()
        return None
    except Exception as exc:
        return "%s" % (exc,)


def facts(a):
    out = {"python": "%d.%d.%d" % tuple(sys.version_info[:3]), "executable": sys.executable,
           "cwd": os.getcwd(), "host": socket.gethostname()}
    out["versions"] = versions(a["dists"])
    try:
        import gnnsched
        out["gnnsched_file"] = os.path.dirname(gnnsched.__file__)
        out["digest"] = digest(a["digest"])
    except Exception as exc:
        out["gnnsched_error"] = "%s: %s" % (type(exc).__name__, exc)
    if a.get("address"):
        out["interface"] = interface_of(a["address"])
    if a.get("partitions"):
        out["partitions"] = partitions(a)
    if a.get("run_dir"):
        out["run_dir"] = run_dir(a)
    return out


a_ports = (20000, 60000)


def main():
    global a_ports
    say("GNNSCHED-READY", os.getpid())
    line = sys.stdin.readline()
    say("GNNSCHED-CLOCK", time.time())
    a = json.loads(line)
    a_ports = tuple(a.get("ports", a_ports))
    out = facts(a)
    sock = None
    if a.get("listen") and a.get("address"):
        sock, port, err = listen(a["address"])
        out["listen_port"], out["listen_error"] = port, err
    say("GNNSCHED-PROBE", out)
    line = sys.stdin.readline()
    if not line:
        return
    stop = threading.Event()
    if sock is not None:
        threading.Thread(target=accept_loop, args=(sock, stop), daemon=True).start()
    targets = json.loads(line)
    res = {}
    lock = threading.Lock()

    def one(t):
        r = connect(t[1], int(t[2]), float(t[3]))
        with lock:
            res[t[0]] = r

    threads = [threading.Thread(target=one, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    say("GNNSCHED-PORTS", res)
    end = time.time() + 120  # keep listening until every host has connected (stdin closes)
    while time.time() < end:
        r, _, _ = select.select([sys.stdin], [], [], 0.5)
        if r and not sys.stdin.readline():
            break
    stop.set()


if __name__ == "__main__":
    main()
'''

REMOTE_BOOT = "import json,sys;exec(json.loads(sys.stdin.readline()))"


@dataclass
class Problem:
    """One thing that would stop a run on one host, and what to do about it."""

    machine: str
    destination: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.machine} ({self.destination}): {self.what}; fix: {self.fix}"


@dataclass
class HostReport:
    """What the probe learnt about one host."""

    machine: str
    destination: str
    facts: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skew_s: float | None = None
    rtt_s: float | None = None
    ports: dict[str, str | None] = field(default_factory=dict)

    def problem(self, what: str, fix: str) -> None:
        self.problems.append(Problem(self.machine, self.destination, what, fix))

    def warn(self, what: str) -> None:
        self.warnings.append(f"{self.machine} ({self.destination}): {what}")

    def summary(self) -> str:
        """One line: what was found (for the check's table)."""
        f = self.facts
        if not f:
            return "no answer"
        v = f.get("versions", {})
        parts = [f"python {f.get('python')}"] + [f"{d} {v.get(d) or '-'}" for d in DISTS]
        text = ", ".join(parts)
        if "partitions" in f:
            p = f["partitions"]
            text += "; partitions " + ("missing" if p.get("missing") or p.get("meta_error")
                                       else "ok" if not p.get("missing_files") else "incomplete")
        if self.skew_s is not None:
            text += f"; clock {self.skew_s:+.3f} s"
        if self.ports:
            bad = [k for k, e in self.ports.items() if e]
            text += "; ports " + ("ok" if not bad else "blocked to " + ", ".join(bad))
        return text


@dataclass
class CheckReport:
    """Every host's report; :attr:`problems` and :attr:`warnings` across all of them."""

    hosts: list[HostReport]
    local: dict[str, Any]
    coordinator: str | None = None
    here: list[Problem] = field(default_factory=list)  # problems of this machine

    @property
    def problems(self) -> list[Problem]:
        return self.here + [p for h in self.hosts for p in h.problems]

    @property
    def warnings(self) -> list[str]:
        return [w for h in self.hosts for w in h.warnings]

    def error_line(self) -> str:
        """Every problem on one line (``gnnsched train``'s error shows one line)."""
        probs = self.problems
        return (f"host check failed before any role started ({len(probs)} problem"
                f"{'s' * (len(probs) != 1)}): " + " | ".join(str(p) for p in probs))


def local_facts(args: dict[str, Any]) -> dict[str, Any]:
    """This machine's facts, from the same probe code the hosts run."""
    ns: dict[str, Any] = {"__name__": "gnnsched_probe"}
    exec(compile(PROBE, "<gnnsched probe>", "exec"), ns)  # noqa: S102  (our own constant)
    return dict(ns["facts"](args))


def partition_files(partitions: str | Path) -> dict[str, str]:
    """The files ``gnnsched.json`` lists, with their sha256 ({} when it lists none)."""
    meta = json.loads((Path(partitions) / "gnnsched.json").read_text())
    sha = meta.get("sha256") or {}
    return {str(k): str(v) for k, v in sha.items()} if isinstance(sha, dict) else {}


class _Session:
    """One ssh session running the probe: JSON lines in, tagged lines out."""

    def __init__(self, argv: list[str]) -> None:
        self.popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, start_new_session=True)
        self.buf = b""
        self.noise: list[str] = []
        self.err = b""

    def send(self, obj: Any) -> bool:
        try:
            assert self.popen.stdin is not None
            self.popen.stdin.write((json.dumps(obj) + "\n").encode())
            self.popen.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def read(self, tag: str, deadline: float) -> str | None:
        """The payload of the next line starting with ``tag`` (None: ended or timed out)."""
        out, err = self.popen.stdout, self.popen.stderr
        assert out is not None and err is not None
        open_fds = [out, err]
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = line.decode(errors="replace").rstrip("\r")
                if text.startswith(tag + " "):
                    return text[len(tag) + 1:]
                if text.strip():
                    self.noise.append(text)
            left = deadline - time.monotonic()
            if left <= 0 or not open_fds:
                return None
            ready = select.select(open_fds, [], [], min(left, 0.5))[0]
            for fh in ready:
                data = os.read(fh.fileno(), 1 << 16)
                if not data:
                    open_fds.remove(fh)
                elif fh is out:
                    self.buf += data
                else:
                    self.err += data
            if not open_fds and b"\n" not in self.buf:
                return None

    def close(self, grace: float = 2.0) -> None:
        end_piped(self.popen, grace)
        for fh in (self.popen.stdout, self.popen.stderr):
            if fh is not None:
                try:
                    rest = fh.read() if fh is self.popen.stderr else b""
                    if rest:
                        self.err += rest
                    fh.close()
                except (OSError, ValueError):
                    pass

    def stderr_lines(self) -> list[str]:
        return [ln.strip() for ln in self.err.decode(errors="replace").splitlines()
                if ln.strip()]


def _ssh_failure(rep: HostReport, ssh_field: str, lines: list[str], code: int | None,
                 python: str, remote_dir: str) -> None:
    """Turn a session that ended without an answer into one problem with its fix."""
    text = " ".join(lines)
    last = lines[-1] if lines else (f"exit code {code}" if code is not None else "no answer")
    low = text.lower()
    if "could not resolve hostname" in low or "name or service not known" in low:
        rep.problem(f"host name does not resolve ({last})",
                    f"correct {ssh_field} (a name this machine resolves, or an IP address)")
    elif "connection refused" in low:
        rep.problem(f"ssh connection refused ({last})",
                    f"start sshd on the host, or correct the host/port in {ssh_field}")
    elif "no route to host" in low or "timed out" in low or "network is unreachable" in low:
        rep.problem(f"host unreachable ({last})",
                    f"check that the host is up and that {ssh_field} names an address this "
                    "machine reaches (TCP port 22 open in its firewall)")
    elif "host key verification failed" in low or "no host key is known" in low:
        rep.problem("its ssh host key is not in known_hosts (BatchMode: ssh does not ask)",
                    "add the host's key to ~/.ssh/known_hosts after checking its fingerprint "
                    "(ssh-keyscan HOST >> ~/.ssh/known_hosts), or point UserKnownHostsFile at a "
                    "file that has it (GNNSCHED_SSH_OPTIONS)")
    elif "permission denied" in low:
        rep.problem(f"ssh login refused ({last})",
                    "install this machine's public key in the host's ~/.ssh/authorized_keys "
                    "(BatchMode: no passwords), or give the key with GNNSCHED_SSH_OPTIONS='-i "
                    "KEY'")
    elif "cd:" in low:
        rep.problem(f"remote directory {remote_dir} does not exist there ({last})",
                    "create it (the same checkout as here), or pass --remote-dir")
    elif code == 127 or ("no such file or directory" in low and python in text) \
            or "not found" in low:
        rep.problem(f"remote Python {python!r} not found ({last})",
                    "install the same Python environment there, or pass --remote-python with "
                    "its path (e.g. /path/to/venv/bin/python)")
    elif "syntaxerror" in low:
        rep.problem(f"remote Python {python!r} is too old to run the probe ({last})",
                    "use a Python >= 3.10 with gnnsched installed (--remote-python)")
    else:
        rep.problem(f"ssh failed ({last})",
                    f"make `ssh -o BatchMode=yes {rep.destination} true` work from this machine")


def _compare(rep: HostReport, local: dict[str, Any], python: str, remote_dir: str) -> None:
    """Problems and warnings from one host's facts against this machine's."""
    f = rep.facts
    here, there = local.get("versions", {}), f.get("versions", {})
    if f.get("gnnsched_error"):
        rep.problem(f"{python} cannot import gnnsched in {remote_dir} ({f['gnnsched_error']})",
                    "install gnnsched into that Python (pip install -e . in a checkout of the "
                    "same commit), or pass --remote-python / --remote-dir")
    pin = []
    for d in DISTS:
        if there.get(d) != here.get(d):
            have = f"{d} {there.get(d)}" if there.get(d) else f"no {d}"
            rep.problem(f"{have} in {python}, this machine has {d} {here.get(d)}",
                        f"install {d}=={here.get(d)} there (every host needs the same "
                        "versions)")
            pin.append(d)
    for d in SOFT_DISTS:
        if there.get(d) != here.get(d):
            rep.warn(f"{d} {there.get(d)} there, {here.get(d)} here")
    py_here, py_there = str(local.get("python", "")), str(f.get("python", ""))
    if py_here.split(".")[:2] != py_there.split(".")[:2]:
        rep.problem(f"Python {py_there} there, {py_here} here",
                    f"use a Python {'.'.join(py_here.split('.')[:2])} environment there "
                    "(--remote-python)")
    elif py_here != py_there:
        rep.warn(f"Python {py_there} there, {py_here} here")
    if not f.get("gnnsched_error") and "gnnsched" not in pin and \
            f.get("digest") and local.get("digest") and f["digest"] != local["digest"]:
        rep.problem(f"gnnsched's source there ({f.get('gnnsched_file')}) differs from this "
                    f"machine's (same version {there.get('gnnsched')}, other code)",
                    "install the same commit of gnnsched on every host (or share one checkout)")


def check_hosts(launcher: Any, machines: list[str], *, partitions: str | None = None,
                run_dir: str | None = None, coordinator: str | None = None,
                ports: bool = True, verify: bool = False, timeout: float = 20.0,
                skew_warn_s: float = SKEW_WARN_S, cluster_file: str | None = None,
                coordinator_port: int | None = None) -> CheckReport:
    """Probe ``machines`` through ``launcher`` (an :class:`~.launcher.SshLauncher`: its ssh
    command, destinations, addresses, remote Python and directory); see the module text.

    ``coordinator``: the endpoint (``tcp://ADDR:PORT``) the hosts must reach; None: a
    listener this check opens on the launcher's coordinator address. ``run_dir``: a folder
    the run will write (its parent when it does not exist yet)."""
    machines = list(dict.fromkeys(machines))
    python, remote_dir = launcher.remote_python, launcher.remote_dir
    files: dict[str, str] = {}
    if partitions:
        try:
            files = partition_files(partitions)
        except (OSError, ValueError):
            files = {}
    meta_sha = None
    if partitions and (Path(partitions) / "gnnsched.json").is_file():
        meta_sha = hashlib.sha256((Path(partitions) / "gnnsched.json").read_bytes()).hexdigest()
    nonce = f"{os.getpid()}-{random.getrandbits(32):08x}"
    base = {"dists": [*DISTS, *SOFT_DISTS], "digest": list(DIGEST_PACKAGES),
            "ports": list(ROLE_PORTS)}
    local = local_facts(dict(base))
    index = {m.name: i for i, m in enumerate(launcher.cluster.machines)}
    source = cluster_file or getattr(launcher.cluster, "source", "the cluster file")
    reports = {m: HostReport(m, launcher.destination(m)) for m in machines}
    sessions: dict[str, _Session] = {}

    def ssh_field(m: str) -> str:
        i = index.get(m)
        return f"machines[{i}].ssh of {source}" if i is not None else f"{m}'s ssh in {source}"

    def phase1(m: str) -> None:
        rep = reports[m]
        args = dict(base, address=launcher.host_of(m), listen=ports)
        if partitions:
            args.update(partitions=str(partitions), files=sorted(files), verify=verify,
                        sha256=files if verify else {})
        if run_dir:
            args.update(run_dir=str(run_dir), marker=f".hostcheck-{m}-{nonce}")
        remote = f"cd {shlex.quote(remote_dir)} && exec {shlex.quote(python)} -u -c " \
                 f"{shlex.quote(REMOTE_BOOT)}"
        try:
            s = sessions[m] = _Session(launcher.ssh_argv(m, remote, connect_timeout=timeout))
        except FileNotFoundError:
            rep.problem(f"ssh client {launcher.ssh!r} not found on this machine",
                        "install openssh-client")
            return
        deadline = time.monotonic() + timeout + 15
        s.send(PROBE)
        clock = None
        if s.read("GNNSCHED-READY", deadline) is not None:
            t0, wall0 = time.monotonic(), time.time()
            s.send(args)
            clock = s.read("GNNSCHED-CLOCK", deadline)
            if clock is not None:
                rep.rtt_s = time.monotonic() - t0
                rep.skew_s = float(clock) - (wall0 + rep.rtt_s / 2)
        payload = s.read("GNNSCHED-PROBE", deadline) if clock is not None else None
        if payload is None:
            code = s.popen.poll()
            if code is None and time.monotonic() >= deadline:
                rep.problem(f"no answer within {timeout + 15:.0f} s",
                            "check that the host is up and sshd answers (ssh -v)")
                s.close(0.5)
                return
            s.close(2.0)
            _ssh_failure(rep, ssh_field(m), s.stderr_lines() + s.noise, s.popen.returncode,
                         python, remote_dir)
            return
        rep.facts = json.loads(payload)

    with ThreadPoolExecutor(max_workers=min(32, len(machines) or 1)) as pool:
        list(pool.map(phase1, machines))
    # the source here may have been edited while the hosts read theirs: either digest is ours
    digests = {local.get("digest"), local_facts(dict(base, dists=[])).get("digest")}

    for m in machines:
        rep = reports[m]
        if rep.facts:
            _compare(rep, dict(local, digest=rep.facts.get("digest"))
                     if rep.facts.get("digest") in digests else local, python, remote_dir)
            _judge_facts(rep, rep.facts, launcher.host_of(m), index.get(m, "?"), source,
                         partitions, meta_sha, run_dir, skew_warn_s)
    live = [m for m in machines if reports[m].facts and m in sessions]
    ports_check = _PortCheck(launcher, reports, sessions, coordinator, coordinator_port)
    try:
        if ports and live:
            ports_check.run(live)
    finally:
        for s in sessions.values():
            s.close(2.0)
        ports_check.close()
    return CheckReport([reports[m] for m in machines], local, ports_check.note,
                       ports_check.here)


def _judge_facts(rep: HostReport, f: dict[str, Any], addr: str, i: int | str, source: str,
                 partitions: str | None, meta_sha: str | None, run_dir: str | None,
                 skew_warn_s: float) -> None:
    """A host's problems from its probed facts: its address, partitions, run directory, clock."""
    if f.get("interface") is None:
        rep.problem(f"address {addr} is not on any interface of the host (roles bind "
                    "their sockets to it)",
                    f"set machines[{i}].address in {source} to the "
                    "host's address on the cluster network")
    if partitions:
        _judge_partitions(rep, f.get("partitions", {}), partitions, meta_sha)
    if run_dir:
        _judge_run_dir(rep, f.get("run_dir", {}), run_dir)
    if rep.skew_s is not None and rep.rtt_s is not None and \
            abs(rep.skew_s) - rep.rtt_s / 2 > skew_warn_s:
        rep.warn(f"clock {rep.skew_s:+.2f} s from this machine's (more than "
                 f"{skew_warn_s:g} s): timestamps in its logs will not line up; run NTP "
                 "(chrony or systemd-timesyncd) on every host")


def _judge_partitions(rep: HostReport, p: dict[str, Any], partitions: str,
                      meta_sha: str | None) -> None:
    """Whether the host holds this machine's partition folder, whole and intact."""
    if p.get("missing"):
        rep.problem(f"partitions missing at {partitions}",
                    "copy the partition folder to the same path on the host (rsync "
                    "-a), or put it on storage every host mounts at that path")
        return
    if p.get("meta_error"):
        rep.problem(f"no readable gnnsched.json in {partitions} ({p['meta_error']})",
                    "copy the whole partition folder there again")
        return
    if meta_sha and p.get("meta_sha256") != meta_sha:
        rep.problem(f"the partitions at {partitions} are not this machine's "
                    "(gnnsched.json differs)",
                    "copy this machine's partition folder there again")
    if p.get("missing_files"):
        miss = p["missing_files"]
        rep.problem(f"{len(miss)} partition file(s) missing in {partitions} "
                    f"(e.g. {miss[0]})", "copy the whole partition folder there")
    if p.get("corrupt_files"):
        bad = p["corrupt_files"]
        rep.problem(f"{len(bad)} partition file(s) corrupt in {partitions} (e.g. "
                    f"{bad[0]}: sha256 differs from gnnsched.json)",
                    "copy the partition folder there again")


def _judge_run_dir(rep: HostReport, r: dict[str, Any], run_dir: str) -> None:
    """Whether the host can write the run directory and shares it with this machine."""
    if r.get("error"):
        rep.problem(f"cannot write the run directory {run_dir} ({r['error']})",
                    "make it writable there, or choose another --out")
    elif r.get("marker"):
        mark = Path(r["marker"])
        if mark.is_file():
            mark.unlink(missing_ok=True)
        else:
            rep.problem(f"the run directory {run_dir} is not shared with this "
                        "machine (a file written there is not seen here): logs and "
                        "checkpoints written on the host would be lost to the "
                        "coordinator",
                        "put the run directory (--out) on storage every host mounts "
                        "at the same path")


class _PortCheck:
    """The port phase: every live host connects to the coordinator and to every other host's
    listener (a listener of this check's own when no ``coordinator`` endpoint is given)."""

    def __init__(self, launcher: Any, reports: dict[str, HostReport],
                 sessions: dict[str, _Session], coordinator: str | None,
                 coordinator_port: int | None) -> None:
        self.launcher, self.reports, self.sessions = launcher, reports, sessions
        self.coordinator, self.coordinator_port = coordinator, coordinator_port
        self.note: str | None = None
        self.here: list[Problem] = []
        self.listener: socket.socket | None = None
        self.stop = threading.Event()
        self.target: tuple[str, int] | None = None

    def _target(self) -> None:
        """Where the hosts must reach the coordinator: the given endpoint, or a listener."""
        if self.coordinator:
            host, _, port = self.coordinator.replace("tcp://", "").rpartition(":")
            self.target = (host.strip("[]"), int(port))
            self.note = f"coordinator {host}:{port}"
            return
        host = "?"
        try:
            host = self.launcher.coordinator_host()
            self.listener, port = _listen(host, self.coordinator_port)
            self.target = (host, port)
            self.note = f"coordinator address {host} (probe port {port})"
        except (OSError, RuntimeError) as exc:
            fix = ("choose a free --port" if self.coordinator_port else
                   "pass --coordinator-address with an address of this machine the hosts "
                   "reach")
            self.here.append(Problem("this machine", host, f"the coordinator cannot listen "
                                     f"({exc})", fix))
        if self.listener is not None:
            threading.Thread(target=_accept, args=(self.listener, self.stop),
                             daemon=True).start()

    def run(self, live: list[str]) -> None:
        self._target()
        host_of = self.launcher.host_of
        self.peers = {m: (host_of(m), self.reports[m].facts.get("listen_port")) for m in live}
        for m in live:
            t = self.target
            tg = [] if t is None else [["coordinator", t[0], t[1], 5.0]]
            tg += [[o, a, p, 5.0] for o, (a, p) in self.peers.items() if o != m and p]
            self.sessions[m].send(tg)
        with ThreadPoolExecutor(max_workers=min(32, len(live))) as pool:
            list(pool.map(self._answers, live))
        for m in live:
            err = self.reports[m].facts.get("listen_error")
            if err:
                self.reports[m].problem(f"cannot listen on {host_of(m)} ({err})",
                                        "free ports in 20000-60000 there")

    def _answers(self, m: str) -> None:
        """Host ``m``'s connection results, each failure a problem with its fix."""
        got = self.sessions[m].read("GNNSCHED-PORTS", time.monotonic() + 30)
        rep = self.reports[m]
        if got is None:
            rep.problem("the port check did not answer", "run the check again (ssh -v)")
            return
        rep.ports = json.loads(got)
        for name, err in sorted(rep.ports.items()):
            if not err:
                continue
            if name == "coordinator":
                assert self.target is not None
                rep.problem(f"cannot connect to the coordinator at {self.target[0]}:"
                            f"{self.target[1]} ({err})",
                            "open TCP ports 20000-60000 (or the --port you pin) on this "
                            "machine to the hosts, or pass --coordinator-address with an "
                            "address of this machine they reach")
            else:
                a, p = self.peers[name]
                rep.problem(f"cannot connect to {name} at {a}:{p} ({err}), a port of "
                            "gnnsched's role range",
                            f"allow TCP between the cluster's hosts on ports 20000-60000 "
                            "and the ephemeral range (gloo), e.g. in the firewall of "
                            f"{name}")

    def close(self) -> None:
        self.stop.set()
        if self.listener is not None:
            self.listener.close()


def _listen(host: str, port: int | None = None) -> tuple[socket.socket, int]:
    """A listening socket on ``host`` (``port``, or a free one of the role range)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tries = [port] if port else [random.randint(*ROLE_PORTS) for _ in range(50)]
    err: OSError | None = None
    for p in tries:
        try:
            s.bind((host, p))
            s.listen(64)
            return s, int(p)
        except OSError as exc:
            err = exc
    s.close()
    raise RuntimeError(f"cannot listen on {host}" + (f":{port}" if port else "") + f": {err}")


def _accept(s: socket.socket, stop: threading.Event) -> None:
    s.settimeout(0.2)
    while not stop.is_set():
        try:
            c, _ = s.accept()
            c.close()
        except TimeoutError:
            continue
        except OSError:
            return


__all__ = ["DISTS", "PROBE", "CheckReport", "HostReport", "Problem", "check_hosts",
           "local_facts", "partition_files"]
