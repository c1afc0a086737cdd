"""zc serve beside the LiteLLM proxy, in one run on the same stub upstream and client: the latency
each adds, throughput and CPU at 32 clients, memory; writes its section of BENCHMARKS.md.

    python -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'
    python bench/litellm_bench.py --litellm /tmp/litellm-venv/bin/litellm [--rounds N] [--write BENCHMARKS.md]

LiteLLM lives in its own virtual environment (its dependencies are not the project's). The
upstream is the test suite's stub (tests/openai_stub.py) answering after `--delay-ms` (20 ms), a
tool call. Each proxy is one process with one worker; `zc serve` forwards with `airline_chat` (the
upstream answers); LiteLLM forwards with `openai/stub-model`. Both check the same client key
(LiteLLM's master key, zc's `--client-key-env`). One keep-alive httpx client per thread sends the
same body; at one client the targets are interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from benchdoc import publish, section_head  # noqa: E402
from gateway_bench import BODY, serve, started  # noqa: E402
from openai_stub import OpenAIStub, free_port  # noqa: E402

PACKAGES = [("starlette / uvicorn / httpx", ("starlette", "uvicorn", "httpx"))]
TICK = os.sysconf("SC_CLK_TCK")
KEY = "sk-zc-bench-" + os.urandom(16).hex()  # both proxies check it (LiteLLM refuses to start without one)
HEADERS = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}


def litellm(cmd: str, upstream: str) -> tuple[subprocess.Popen, str]:
    """The LiteLLM proxy (one worker) in front of the stub, on a free port; (process, chat URL)."""
    port = free_port()
    env = {**os.environ, "OPENAI_API_KEY": "unused", "LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": KEY}
    proc = subprocess.Popen(
        [
            cmd,
            "--model",
            "openai/stub-model",
            "--api_base",
            upstream,
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--num_workers",
            "1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    return started(proc, url + "/health/liveliness", url + "/chat/completions", "the LiteLLM proxy", 1200)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load(url: str, content: bytes, clients: int, per_client: int) -> tuple[float, int]:
    """(seconds, requests answered) for `clients` threads each sending `per_client` requests."""
    done = [0] * clients

    def run(i: int) -> None:
        with httpx.Client(headers=HEADERS, timeout=30, trust_env=False) as c:
            for _ in range(per_client):
                if c.post(url, content=content).status_code == 200:
                    done[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t, sum(done)


def added_ci(proxy: list[float], direct: list[float], seed: int = 0) -> tuple[float, float]:
    """A 95% bootstrap interval (2,000 resamples) of the difference of the two medians."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(proxy), np.asarray(direct)
    diffs = [np.median(rng.choice(a, a.size)) - np.median(rng.choice(b, b.size)) for _ in range(2000)]
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return float(lo), float(hi)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--litellm", required=True, help="the `litellm` command of its own virtual environment")
    ap.add_argument("--rounds", type=int, default=300, help="timed requests per target at one client")
    ap.add_argument("--per-client", type=int, default=20, help="requests per client at 32 clients")
    ap.add_argument("--delay-ms", type=float, default=20.0, help="the stub upstream's time per answer")
    ap.add_argument("--write", type=Path, help="replace this section of the markdown file")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="litellm-bench-"))
    content = json.dumps(BODY).encode()
    with OpenAIStub("slow") as stub:
        stub.delay_ms = args.delay_ms
        stub.answer, stub.arguments = "get_user_details", {"user_id": "mia_li_3668"}
        os.environ["ZC_BENCH_CLIENT_KEY"] = KEY
        zc, url_zc = serve(
            ROOT / "policies" / "airline_chat.zc",
            stub.base_url,
            tmp / "r.jsonl",
            "--client-key-env",
            "ZC_BENCH_CLIENT_KEY",
        )
        lite, url_lite = litellm(args.litellm, stub.base_url)
        procs = {"zc serve": (zc, url_zc), "LiteLLM proxy": (lite, url_lite)}
        try:
            targets = {"direct": stub.base_url + "/chat/completions", **{n: u for n, (_, u) in procs.items()}}
            one: dict[str, list[float]] = {n: [] for n in targets}
            with httpx.Client(headers=HEADERS, timeout=30, trust_env=False) as c:
                for url in targets.values():
                    for _ in range(20):
                        r = c.post(url, content=content)
                        assert r.status_code == 200 and r.json()["choices"][0]["message"]["tool_calls"], (
                            r.text
                        )
                for _ in range(args.rounds):
                    for name, url in targets.items():
                        t = time.perf_counter()
                        c.post(url, content=content)
                        one[name].append((time.perf_counter() - t) * 1000)
            many: dict[str, tuple[float, int, float, float]] = {}
            for name, (proc, url) in procs.items():
                cpu0 = cpu_s(proc.pid)
                seconds, answered = load(url, content, 32, args.per_client)
                many[name] = (seconds, answered, cpu_s(proc.pid) - cpu0, rss_mb(proc.pid))
        finally:
            for proc, _ in procs.values():
                proc.terminate()
                proc.wait(timeout=30)
    load1 = os.getloadavg()[0]
    p50 = {n: float(np.percentile(v, 50)) for n, v in one.items()}
    p99 = {n: float(np.percentile(v, 99)) for n, v in one.items()}
    added = {n: (p50[n] - p50["direct"], p99[n] - p99["direct"]) for n in procs}
    ci = {n: added_ci(one[n], one["direct"]) for n in procs}
    rps = {n: a / s for n, (s, a, _, _) in many.items()}
    cpu_k = {n: c / a * 1000 for n, (_, a, c, _) in many.items()}
    z, lt = "zc serve", "LiteLLM proxy"
    lines = [
        *section_head(
            "## zc serve beside the LiteLLM proxy (`bench/litellm_bench.py`)",
            f"litellm_bench.py --litellm {args.litellm}",
            args.rounds,
            args.write,
            (load0, load1),
            PACKAGES,
            default_rounds=300,
        ),
        f"The same stub upstream (a tool call after {args.delay_ms:g} ms) and the same body, through each "
        "proxy (one process, one worker each) in one run. At one client the three targets are interleaved; "
        f"at 32 clients each proxy gets 32 threads × {args.per_client} requests in turn.",
        "",
        "| target | one client: p50 ms | p99 ms | added p50 ms | added p99 ms | 32 clients: req/s | "
        "CPU s per 1,000 req | RSS MB after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        f"| direct to the stub | {p50['direct']:.2f} | {p99['direct']:.2f} | – | – | – | – | – |",
        *(
            f"| {n} | {p50[n]:.2f} | {p99[n]:.2f} | {added[n][0]:+.2f} | {added[n][1]:+.2f} | "
            f"{rps[n]:,.0f} | {cpu_k[n]:.2f} | {many[n][3]:,.0f} |"
            for n in procs
        ),
        "",
        f"Ratios, zc serve to LiteLLM: requests per second at 32 clients **{rps[z] / rps[lt]:.2f}×**, "
        f"CPU per request **{cpu_k[z] / cpu_k[lt]:.2f}×**, memory **{many[z][3] / many[lt][3]:.2f}×** (one "
        f"load run of {32 * args.per_client} requests each: no interval); added p50 at one client "
        f"**{added[z][0]:+.2f} ms** (95% bootstrap interval {ci[z][0]:+.2f} to {ci[z][1]:+.2f}) against "
        f"**{added[lt][0]:+.2f} ms** ({ci[lt][0]:+.2f} to {ci[lt][1]:+.2f}), n = {args.rounds} each. zc "
        "serve also judges every call and appends a receipt per request; LiteLLM was run with its "
        "defaults (its master key set).",
        "",
        *(
            [
                f"The machine was busy (load average {max(load0, load1):.1f} on {os.cpu_count()} cores, "
                "shared with other work): absolute figures are inflated; the ratios come from the same run.",
                "",
            ]
            if max(load0, load1) > (os.cpu_count() or 1)
            else []
        ),
    ]
    publish("litellm_bench", "\n".join(lines), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
