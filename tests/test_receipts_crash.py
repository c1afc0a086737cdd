"""Receipt appends under real crashes: writers SIGKILLed mid-receipt while other writers keep appending."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zcompile.receipts import ReadStats, Receipt, ReceiptWriter, encode, read

ROOT = Path(__file__).parents[1]

# A writer that appends big receipts in 64-byte pieces while holding the lock, so a kill at any
# moment is almost surely mid-receipt.
VICTIM = textwrap.dedent("""
    import os, sys, time
    from zcompile.receipts import Receipt, ReceiptWriter
    real = os.write
    def slow(fd, data):
        n = real(fd, bytes(data[:64]))
        time.sleep(0.0005)
        return n
    os.write = slow
    w = ReceiptWriter(sys.argv[1])
    print("writing", flush=True)
    i = 0
    while True:
        w.append(Receipt(id=f"victim:{i}", task="v", state={"pad": "v" * 20000}, tier="remote"))
        i += 1
""")

# A writer opened before the kills, appending throughout them from two threads.
SURVIVOR = textwrap.dedent("""
    import sys, threading, time
    from zcompile.receipts import Receipt, ReceiptWriter
    w = ReceiptWriter(sys.argv[1])
    name, n = sys.argv[2], int(sys.argv[3])
    print("open", flush=True)
    def work(t):
        for i in range(n):
            w.append(Receipt(id=f"{name}.{t}:{i}", task=name, state={"i": i, "pad": "s" * (i % 300)},
                             tier="remote"))
            time.sleep(0.004)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for th in threads: th.start()
    for th in threads: th.join()
    w.close()
""")


def _spawn(code: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() in ("writing", "open")  # wait until it is running
    return proc


@pytest.mark.parametrize("seed", [0, 1])
def test_sigkill_mid_receipt_loses_no_survivor_receipt(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "live.jsonl"
    per_thread = 120
    survivors = [_spawn(SURVIVOR, str(path), f"s{k}", str(per_thread)) for k in range(3)]
    kills = 4
    try:
        for _ in range(kills):
            victim = _spawn(VICTIM, str(path))
            time.sleep(rng.uniform(0.02, 0.12))
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            victim.stdout.close()
            assert victim.returncode == -signal.SIGKILL
    finally:
        for s in survivors:
            s.wait(timeout=60)
            s.stdout.close()
    assert [s.returncode for s in survivors] == [0, 0, 0]

    stats = ReadStats()
    ids = [r.id for r in read(path, skip_invalid=True, stats=stats)]
    survivor_ids = [i for i in ids if not i.startswith("victim:")]
    want = {f"s{k}.{t}:{i}" for k in range(3) for t in range(2) for i in range(per_thread)}
    assert len(survivor_ids) == len(want) and set(survivor_ids) == want  # none lost, none twice
    # every torn fragment is a line of its own, reported as torn, never merged into a receipt
    assert 1 <= stats.skipped <= kills
    assert all(": $: torn " in p for p in stats.problems), stats.problems
    assert path.read_bytes().endswith(b"\n") or stats.problems[-1].endswith("(the writer stopped mid-line)")


def test_a_writer_open_before_the_crash_repairs_the_torn_line(tmp_path):
    """The writer was opened before another writer died mid-line: its next append still repairs."""
    path = tmp_path / "live.jsonl"
    early = ReceiptWriter(path)
    early.append(Receipt(id="a", task="t", state={}, tier="x"))
    with open(path, "ab") as fh:  # a crashed writer's fragment, after `early` was opened
        fh.write(encode(Receipt(id="torn", task="t", state={}, tier="x"))[:17])
    early.append(Receipt(id="b", task="t", state={}, tier="x"))
    early.close()
    stats = ReadStats()
    assert [r.id for r in read(path, skip_invalid=True, stats=stats)] == ["a", "b"]
    assert stats.problems == [f"{path}:2: $: torn line (a writer stopped mid-line; the next append "
                              "started a new line after it)"]


def test_writers_taking_turns_add_no_blank_line(tmp_path):
    """A writer skips reading the last byte only while the file ends where its own last line did:
    after another writer's line it reads it, finds a newline and adds none."""
    path = tmp_path / "turns.jsonl"
    a, b = ReceiptWriter(path), ReceiptWriter(path)
    for i in range(6):
        (a if i % 3 else b).append(Receipt(id=f"r{i}", task="t", state={}, tier="x"))
    a.close()
    b.close()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(lines[:-1]), lines
    assert [r.id for r in read(path)] == [f"r{i}" for i in range(6)]


def test_writer_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    from zcompile.receipts import ReceiptError
    with pytest.raises(ReceiptError, match="not a regular file"):
        ReceiptWriter(fifo)
    with pytest.raises(ReceiptError, match="not a regular file"):
        list(read(fifo))  # refused at once, never waited on


def test_a_forked_child_is_excluded_by_the_lock(tmp_path):
    """A child forked with the parent's writer gets its own descriptor, so the two exclude each other."""
    path = tmp_path / "live.jsonl"
    w = ReceiptWriter(path)
    w.append(Receipt(id="before", task="t", state={}, tier="x"))
    started_r, started_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one slow append, holding the lock for about half a second
        try:
            real = os.write

            def slow(fd, data):
                if fd == started_w:
                    return real(fd, data)
                n = real(fd, bytes(data[:256]))
                if n and not getattr(slow, "said", False):
                    slow.said = True
                    real(started_w, b"x")
                time.sleep(0.005)
                return n

            os.write = slow
            w.append(Receipt(id="child", task="t", state={"pad": "c" * 20000}, tier="x"))
        finally:
            os._exit(0)
    os.read(started_r, 1)  # the child is mid-receipt and holds the lock
    w.append(Receipt(id="parent", task="t", state={}, tier="x"))  # must wait for the child's line
    os.waitpid(pid, 0)
    os.close(started_r)
    os.close(started_w)
    w.close()
    stats = ReadStats()
    assert sorted(r.id for r in read(path, skip_invalid=True, stats=stats)) == ["before", "child", "parent"]
    assert stats.skipped == 0


OPS = st.lists(st.one_of(st.tuples(st.just("append"), st.integers(0, 2)),
                         st.tuples(st.just("crash"), st.floats(0.0, 1.0)),
                         st.tuples(st.just("open"), st.integers(0, 2))), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_generated_crashes_lose_no_appended_receipt(tmp_path, ops):
    """Writers opened at any time, writers killed mid-receipt (what a killed ReceiptWriter leaves:
    its repair newline, then a cut receipt), in any order: every completed append reads back."""
    path = tmp_path / "g.jsonl"
    path.unlink(missing_ok=True)
    writers = [ReceiptWriter(path)]
    appended, crashes = [], 0
    for n, (op, arg) in enumerate(ops):
        if op == "open":
            writers.append(ReceiptWriter(path))
        elif op == "append":
            r = Receipt(id=f"r{n}", task="t", state={"n": n, "pad": "p" * (n * 7 % 50)}, tier="x")
            writers[arg % len(writers)].append(r)
            appended.append(r.id)
        else:
            line = encode(Receipt(id=f"k{n}", task="t", state={"n": n}, tier="x"))
            with open(path, "ab") as fh:
                if path.stat().st_size and path.read_bytes()[-1:] != b"\n":
                    fh.write(b"\n")
                fh.write(line[:1 + int(arg * (len(line) - 3))])  # 1 .. len-2 bytes: never whole
            crashes += 1
    for w in writers:
        w.close()
    stats = ReadStats()
    assert [r.id for r in read(path, skip_invalid=True, stats=stats)] == appended
    assert stats.skipped == crashes and all(": $: torn " in p for p in stats.problems)
