"""Bad messages and records get one clear error naming the field: the wire (malformed,
oversized, inconsistent messages, through the runtime's own decoder), property-based tests
(hypothesis: the message decoder and the spec loaders raise nothing but their documented
errors on arbitrary input) and metrics.jsonl records."""

from __future__ import annotations

import copy
import json
import re
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq
from cli_errors import _CLUSTER, _JOB, _PLAN, LAB4
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gnnsched.cli import main as cli_main
from gnnsched.plan import Plan
from gnnsched.runtime.transport import (
    BULK,
    Kind,
    Message,
    MessageError,
    bind_random,
    ctrl_body,
    decode,
    encode,
    make_socket,
)
from gnnsched.spec import SpecError, job_from_dict, load_job

pytestmark = pytest.mark.usefixtures("nothing_left_behind")


# ---------------------------------------------------------------------- wire


def _feat_chunk() -> list[bytes]:
    msg = Message(Kind.FEAT_CHUNK, {"req": 1, "chunk": 0, "chunks": 1, "start": 0, "total": 4},
                  {"feats": np.ones((4, 3), np.float32)})
    return [bytes(f) for f in encode(msg)]


def _with_head(f: list[bytes], off: int, fmt: str, value: int) -> list[bytes]:
    head = bytearray(f[0])
    struct.pack_into(fmt, head, off, value)
    return [bytes(head), *f[1:]]


@pytest.mark.parametrize("frames,needle", [
    ([b"HTTP/1.1 200 OK\r\n\r\n"], "magic: b'HTTP', expected b'GNSH' (not a gnnsched peer)"),
    (_with_head(_feat_chunk(), 4, "<B", 9), "version: 9, this build speaks 1"),
    (_with_head(_feat_chunk(), 5, "<B", 200), "kind: unknown kind 200"),
    ([_feat_chunk()[0][:7]], "header: 7 bytes, need >= 10"),
    (_feat_chunk()[:1], "frames: 1, header announces 2"),
    # the header announces 2^40 rows: refused before any allocation
    (_with_head(_feat_chunk(), 10 + 40 + 2, "<q", 1 << 40), "exceed the limit"),
    (_with_head(_feat_chunk(), 10 + 40, "<B", 1), "dtype code 1"),
])
def test_malformed_messages(frames: list[bytes], needle: str) -> None:
    with pytest.raises(MessageError) as err:
        decode(frames, peer="tester")
    assert needle in str(err.value) and "from tester" in str(err.value)


@pytest.mark.parametrize("blob,needle", [
    (b'{"op": "hello",', "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "RecursionError"),
    (b'{"no_op": 1}', "must be an object with a string 'op'"),
    (b"\xff\xfe", "not valid JSON"),
])
def test_malformed_control_messages(blob: bytes, needle: str) -> None:
    msg = Message(Kind.CTRL, {}, {"json": np.frombuffer(blob, np.uint8)})
    with pytest.raises(MessageError, match=needle.replace("[", r"\[")):
        ctrl_body(decode([bytes(f) for f in encode(msg)]))


def test_inconsistent_block_is_refused() -> None:
    from gnnsched.runtime.trainer import blocks_of

    ints = {"trainer": 0, "seq": 0, "epoch": 0, "phase": 0, "index": 0, "sampler": 0,
            "sample_us": 0, "wait_us": 0, "layers": 1, "num_src0": 3, "num_dst0": 2}
    arrays = {"seeds": np.arange(2), "labels": np.zeros(2, np.int64),
              "input_nodes": np.arange(3), "src0": np.array([0, 7]), "dst0": np.array([0, 1])}
    msg = decode([bytes(f) for f in encode(Message(Kind.BLOCK, ints, arrays))])
    with pytest.raises(MessageError, match=r"BLOCK.layer0: edge index outside the block"):
        blocks_of(msg)


def test_answers_that_do_not_match_the_request() -> None:
    """A store answer for a request never made, or rows outside what was asked: refused
    before anything is written."""
    from gnnsched.runtime.store import StoreClient

    ctx = zmq.Context()
    try:
        server = make_socket(ctx, zmq.ROUTER, BULK)
        endpoint = bind_random(server, "127.0.0.1")
        client = StoreClient(ctx, {0: endpoint}, "client", b"client")
        client.request(0, Kind.FEAT_REQ, {"trainer": 0, "seq": 0, "src_machine": 1},
                       np.arange(4), 4, 4, lambda m: None)
        ident, *_ = server.recv_multipart()

        def answer(**ints: int) -> None:
            base = {"req": 1, "chunk": 0, "chunks": 1, "start": 0, "total": 4}
            base.update(ints)
            server.send_multipart([ident, *encode(Message(Kind.FEAT_CHUNK, base, {
                "feats": np.zeros((4, 2), np.float32)}))])
            assert client.poll_sockets[0].poll(5000)

        answer(req=99)
        with pytest.raises(MessageError, match="FEAT_CHUNK for unknown request 99"):
            client.handle(client.poll_sockets[0])
        answer(total=9)
        with pytest.raises(MessageError, match=r"FEAT_CHUNK.total: 9 rows, asked for 4"):
            client.handle(client.poll_sockets[0])
        answer(start=2)
        with pytest.raises(MessageError, match=r"rows 2..6 outside 0..4"):
            client.handle(client.poll_sockets[0])
        client.close()
    finally:
        ctx.destroy(linger=0)


# ---------------------------------------------------------------------- property-based

_scalars = (st.none() | st.booleans() | st.integers(-2, 1 << 62) | st.floats()
            | st.text(max_size=6))
_json = st.recursive(_scalars, lambda c: st.lists(c, max_size=3)
                     | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=8)
# derandomize: the same 300 examples on every run, so CI is deterministic (a random run once
# found a GPU count of 4e9, built as a list of 4e9 devices; now a SpecError, checked below)
_FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                 suppress_health_check=list(HealthCheck))


@_FUZZ
@given(st.lists(st.binary(max_size=120), min_size=0, max_size=5))
def test_decoder_arbitrary_frames(frames: list[bytes]) -> None:
    try:
        msg = decode(frames, max_bytes=1 << 20)
    except MessageError:
        return
    if msg.kind == Kind.CTRL:
        try:
            ctrl_body(msg)
        except MessageError:
            pass


@_FUZZ
@given(st.data())
def test_decoder_mutated_valid_messages(data: st.DataObject) -> None:
    """Valid messages of every kind with random bytes of the header overwritten, frames
    dropped, grown or truncated: a MessageError or a message whose arrays match their
    frames, never anything else."""
    base = [bytes(f) for f in encode(Message(Kind.BLOCK, {
        "trainer": 0, "seq": 1, "epoch": 0, "phase": 0, "index": 0, "sampler": 0,
        "sample_us": 0, "wait_us": 0, "layers": 1, "num_src0": 3, "num_dst0": 2},
        {"seeds": np.arange(2), "labels": np.arange(2), "input_nodes": np.arange(3),
         "src0": np.arange(3), "dst0": np.arange(3)}))]
    frames = data.draw(st.sampled_from([base, _feat_chunk()]))
    head = bytearray(frames[0])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(head) - 1))
        head[i] = data.draw(st.integers(0, 255))
    frames = [bytes(head), *frames[1:]]
    cut = data.draw(st.integers(0, len(frames)))
    frames = frames[:cut] + [f[:data.draw(st.integers(0, len(f)))] for f in frames[cut:]]
    try:
        msg = decode(frames, max_bytes=1 << 20)
    except MessageError:
        return
    for arr in msg.arrays.values():
        assert arr.nbytes <= 1 << 20


def _mutate(base: dict) -> Any:
    """A valid document with up to three fields replaced by arbitrary JSON or removed."""
    def paths(obj: Any, prefix: tuple = ()) -> Any:
        yield prefix
        items = obj.items() if isinstance(obj, dict) else enumerate(obj) \
            if isinstance(obj, list) else ()
        for k, v in items:
            yield from paths(v, (*prefix, k))

    every = [p for p in paths(base) if p]

    @st.composite
    def strat(draw: Any) -> Any:
        d = copy.deepcopy(base)
        for _ in range(draw(st.integers(1, 3))):
            p = draw(st.sampled_from(every))
            cur = d
            try:
                for k in p[:-1]:
                    cur = cur[k]
                if isinstance(cur, dict) and draw(st.booleans()):
                    cur.pop(p[-1], None)
                else:
                    cur[p[-1]] = draw(_json)
            except (KeyError, IndexError, TypeError):
                pass
        return d

    return strat()


def _profile() -> dict:
    from gnnsched.profile import synthetic_profile

    return json.loads(json.dumps(synthetic_profile(2, samples=2).to_dict()))


def _loaders() -> list[tuple[str, Any, dict]]:
    from gnnsched.profile import CostProfile
    from gnnsched.spec import cluster_from_dict

    return [("cluster", cluster_from_dict, _CLUSTER), ("job", job_from_dict, _JOB),
            ("plan", Plan.from_dict, _PLAN), ("profile", CostProfile.from_dict, _profile())]


@pytest.mark.parametrize("name", ["cluster", "job", "plan", "profile"])
def test_spec_loaders_only_raise_spec_errors(name: str) -> None:
    _, load, base = next(x for x in _loaders() if x[0] == name)
    load(copy.deepcopy(base))  # the base is valid

    @_FUZZ
    @given(_mutate(base) | _json)
    def check(doc: Any) -> None:
        try:
            load(doc)
        except SpecError as exc:
            assert str(exc)  # names what is wrong

    check()


def test_absurd_gpu_counts_are_spec_errors() -> None:
    """A GPU count in the billions (found by a random fuzz run) is a clear error, not an
    attempt to build that many devices."""
    from gnnsched.spec import cluster_from_dict

    for gpus, field in ((4_321_606_825, "machines[0].gpus"),
                        ([{"kind": "t4", "count": 4_321_606_825}], "machines[0].gpus[0].count")):
        doc = copy.deepcopy(_CLUSTER)
        doc["machines"][0]["gpus"] = gpus
        with pytest.raises(SpecError, match=rf"{re.escape(field)}: is 4321606825.*at most 256"):
            cluster_from_dict(doc)


def test_null_fields_take_their_defaults() -> None:
    """`key:` with no value in YAML is null: optional fields fall back to their default,
    required ones say they are missing a value -- never a TypeError from deep inside."""
    from gnnsched.spec import cluster_from_dict

    cl = cluster_from_dict({**_CLUSTER, "latency_ms": None, "storage": None})
    assert cl.latency == 0.0 and cl.storage == "shared"
    assert job_from_dict({**_JOB, "dropout": None}).dropout == 0.5
    bad = copy.deepcopy(_CLUSTER)
    bad["machines"][1]["cpus"] = None
    with pytest.raises(SpecError, match=r"machines\[1\].cpus: must be an integer, got None"):
        cluster_from_dict(bad)
    with pytest.raises(SpecError, match="must be a finite number"):
        cluster_from_dict({**_CLUSTER, "latency_ms": float("inf")})


def test_lab4_defaults_still_load() -> None:
    job = load_job(LAB4 / "job.yaml")
    assert replace(job, epochs=1).epochs == 1


# ---------------------------------------------------------------------- trace records


def _metrics(tmp_path: Path, *lines: str) -> Path:
    (tmp_path / "metrics.jsonl").write_text("".join(ln + "\n" for ln in lines))
    return tmp_path


_OK_BATCH = '{"type": "batch", "phase": "train", "epoch": 1, "trainer": 0, "seq": 3}'


@pytest.mark.parametrize("line,needle", [
    ("[1, 2]", "metrics.jsonl:2: not a record: list"),
    ('{"epoch": 1}', "metrics.jsonl:2: type: is missing (required) (valid: batch, transfer"),
    ('{"type": 3}', "metrics.jsonl:2: type: must be a string, got 3"),
    ('{"type": "batch", "phase": "train", "epoch": 1, "trainer": 0}',
     "metrics.jsonl:2: seq: is missing from a 'batch' record (required) (valid: an integer)"),
    ('{"type": "batch", "phase": "val", "epoch": "1", "trainer": 0}',
     "metrics.jsonl:2: epoch: must be an integer, got '1'"),
    ('{"type": "batch", "phase": "train", "epoch": 1, "trainer": 0, "seq": 1, "time": "x"}',
     "metrics.jsonl:2: time: must be a number or absent, got 'x'"),
    ('{"type": "transfer", "trainer": 0, "seq": 1, "kind": "feat", "src": "s", "bytes": 9, '
     '"queued": NaN, "done": 1}', "metrics.jsonl:2: queued: must be a number, got nan"),
    ('{"type": "transfer", "trainer": 0, "seq": 1, "kind": "feat", "bytes": 9, "queued": 0, '
     '"done": 1}', "metrics.jsonl:2: src: is missing from a 'transfer' record"),
    ('{"type": "dispatch", "trainer": 0, "seq": 1, "t": true}',
     "metrics.jsonl:2: t: must be a number, got True"),
    ('{"type": "epoch"}', "metrics.jsonl:2: epoch: is missing from a 'epoch' record"),
])
def test_bad_trace_records_name_the_line_and_field(tmp_path: Path, line: str,
                                                   needle: str) -> None:
    from gnnsched.trace import load

    with pytest.raises(SpecError) as exc:
        load(_metrics(tmp_path, _OK_BATCH, line))
    assert needle in str(exc.value)


def test_trace_command_names_the_bad_line(capsys: pytest.CaptureFixture,
                                          tmp_path: Path) -> None:
    _metrics(tmp_path, _OK_BATCH, '{"type": "dispatch", "trainer": 0, "seq": "1", "t": 1}')
    assert cli_main(["trace", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"gnnsched trace: error: {tmp_path / 'metrics.jsonl'}:2: seq: must be an " \
        "integer, got '1'"
    (tmp_path / "metrics.jsonl").write_bytes(b"\xff\xfe{}\n")
    assert cli_main(["trace", str(tmp_path)]) == 2
    assert "metrics.jsonl: not a UTF-8 text file" in capsys.readouterr().err
    _metrics(tmp_path, _OK_BATCH)
    assert cli_main(["trace", str(tmp_path)]) == 2
    assert "no trace records: run `gnnsched train --trace`" in capsys.readouterr().err


def test_records_of_an_unknown_type_are_kept_unchecked(tmp_path: Path) -> None:
    """A newer version's record types do not make a trace unreadable."""
    from gnnsched.trace import load

    recs = load(_metrics(tmp_path, _OK_BATCH, '{"type": "from_the_future", "x": [1]}'))
    assert [r["type"] for r in recs] == ["batch", "from_the_future"]


def test_batch_time_is_optional(tmp_path: Path) -> None:
    """Batch records without ``time`` (older runs, hand-made files) load and summarise."""
    from gnnsched.trace import load, summarize

    recs = load(_metrics(
        tmp_path, _OK_BATCH,
        '{"type": "batch", "phase": "val", "epoch": 1, "trainer": 0, "train_s": 9.0}',
        '{"type": "dispatch", "trainer": 0, "seq": 3, "t": 1.0}',
        '{"type": "sampled", "trainer": 0, "seq": 3, "t": 1.5}'))
    s = summarize(recs)
    assert s["batches"] == 1 and s["pipeline"]["dispatch_to_train"] is None
    assert s["pipeline"]["dispatch_to_sampled"]["p50"] == pytest.approx(0.5)
