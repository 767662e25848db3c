"""Times `leaderboard verify` per submission on this machine, split into its phases.

The verifier (``geofidelity_bench.hub.verify``, docs/benchmark.md section 13) downloads a
submission's panels at the recorded commit and checks their sha256s, re-runs the evaluation with
the pinned encoder (its own copy audit included), and writes the verification record in one
commit. This script times one real :func:`~geofidelity_bench.hub.verify.verify_repo` run per
repeat and splits its wall time by wrapping the library's own pieces during that run
(``Verifier._models_for``, ``Verifier._images``, ``Verifier._recompute``, ``Verifier._write``, and
inside the evaluation ``load_generated_panels``, ``embed_items``, the copy audit and
``score_embeddings``); nothing is re-implemented.

Two scales, both on the embedded ``demo`` benchmark with the offline encoder ``efficientnet-lite0``,
one submission each, no GAAS segmenter:

demo   the tiny generator (``generate --model tiny``), L0 and GPS_ONLY for every block, 4 images per
       block (7 blocks: 56 images in 14 panels).
paper  448 generated images, as many as the paper's 7 conditions x 16 blocks x 4 images. The demo
       has 7 blocks and prompts only 16 (condition, block) panels (L0 and GPS_ONLY for every block,
       L1 and L2 for one), so the 448 images are distinct synthetic 512x512 JPEGs (smooth noise and
       gradients, quality 95, like ``generate``'s files) spread over those 16 panels (28 images each).
       The per-image phases (download, sha256, decode, embedding, copy audit) see the paper's image
       count; scoring covers 16 panels instead of 112 (bench_scoring.py times scoring at paper scale).

The verifier's embedding cache is warm before timing, as a maintainer's verifier box keeps it:
``leaderboard init`` embeds every benchmark photo (galleries, the copy audit's pool and its
perceptual hashes) into it. Every timed run starts from a copy of that warm cache in a fresh Python
process (as a scheduled ``leaderboard verify`` job: nothing the setup computed in memory, e.g. the
copy audit's perceptual hashes of the submitter's run, carries over; imports are not timed, loading
the encoder and its first forward pass are), so it embeds and hashes exactly the submission's images
(printed: computed vs from cache). The submitter's ``evaluate`` uses its own cache. The Hub is the
loopback fake Hub (tests/fake_hub.py): the download and write phases measure this library and
huggingface_hub over loopback HTTP, not the network. Setup (generation, the submitter's evaluate,
the pushes) is not timed. The script also prints how many cores other processes kept busy during
each timed run: on a shared machine the evaluate phase slows down by about that share.

    python benchmarks/bench_verify.py [--scale demo|paper|both] [--repeats 1] [--device cpu|cuda]

Prints the machine (CPU, cores, torch threads, device), a table of seconds per phase per scale
(best total of N repeats), the evaluate phase split, and the verification status of each run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the loopback fake Hub

BENCHMARK = "demo"
ENCODER = "efficientnet-lite0"
TOKEN = "hf_bench_verify"
PAPER_IMAGES = 448  # 7 conditions x 16 blocks x 4 images


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@contextlib.contextmanager
def quiet():
    """Hides the CLI's output during setup; shows it if the setup fails."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield
    except BaseException:
        sys.stdout.write(out.getvalue())
        sys.stderr.write(err.getvalue())
        raise


def cli(*argv: str) -> None:
    from geofidelity_bench.cli import main

    with quiet():
        rc = main(list(argv))
    if rc != 0:
        sys.exit(f"setup step failed (exit status {rc}): geofidelity-bench {' '.join(argv)}")


# -- the generated folders -------------------------------------------------------------------------


def promptable_panels(benchmark) -> list[tuple[str, str]]:
    """Every (condition, block) the benchmark can prompt, in condition order."""
    from geofidelity_bench.prompts import CONDITIONS, PromptError, build_prompt

    out = []
    for condition in CONDITIONS:
        for bid in benchmark.block_ids:
            try:
                build_prompt(benchmark, bid, condition)
            except PromptError:
                continue
            out.append((condition, bid))
    return out


def synthetic_jpeg(rng: np.random.Generator, size: int = 512) -> bytes:
    """A distinct 512x512 JPEG (quality 95): smooth colour noise over gradients, plus grain."""
    coarse = rng.uniform(0, 255, (8, 8, 3)).astype(np.uint8)
    base = np.asarray(Image.fromarray(coarse).resize((size, size), Image.BICUBIC), dtype=np.float32)
    ramp = np.linspace(-40, 40, size, dtype=np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    grad = np.cos(angle) * ramp[None, :, None] + np.sin(angle) * ramp[:, None, None]
    grain = rng.normal(0, 6, (size, size, 3)).astype(np.float32)
    arr = np.clip(base + grad + grain, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def paper_folder(folder: Path, benchmark, method: str, total: int = PAPER_IMAGES, seed: int = 0) -> str:
    """``total`` distinct images over every promptable panel; returns the layout in words."""
    panels = promptable_panels(benchmark)
    per, extra = divmod(total, len(panels))
    rng = np.random.default_rng(seed)
    for i, (condition, bid) in enumerate(panels):
        target = folder / method / condition / bid
        target.mkdir(parents=True, exist_ok=True)
        for k in range(per + (1 if i < extra else 0)):
            (target / f"{k:02d}.jpg").write_bytes(synthetic_jpeg(rng))
    counts: dict[str, int] = {}
    for condition, _ in panels:
        counts[condition] = counts.get(condition, 0) + 1
    sizes = f"{per}" if not extra else f"{per}-{per + 1}"
    return (f"{len(panels)} panels ({', '.join(f'{c} x{n}' for c, n in counts.items())}) x {sizes} synthetic "
            f"512x512 JPEGs")


# -- timing the phases of one real verify_repo run ------------------------------------------------


def busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy (Linux /proc/stat), or None elsewhere."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


class Phases:
    """Wraps the library's pieces while active and adds up their wall time (``time.perf_counter``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.embedding_stats: list[dict] = []
        self._undo: list = []

    def _wrap(self, owner, name: str, key: str, keep=None) -> None:
        original = getattr(owner, name)
        seconds = self.seconds

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            finally:
                seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - t0
            if keep is not None:
                keep(result)
            return result

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def __enter__(self) -> "Phases":
        from geofidelity_bench import evaluation, near_copies
        from geofidelity_bench.hub.verify import Verifier

        self._wrap(Verifier, "_models_for", "models")
        self._wrap(Verifier, "_images", "download")
        self._wrap(Verifier, "_recompute", "recompute")
        self._wrap(Verifier, "_write", "write")
        self._wrap(evaluation, "load_generated_panels", "ev_load")
        self._wrap(evaluation, "embed_items", "ev_embed", keep=lambda r: self.embedding_stats.append(dict(r[1])))
        self._wrap(near_copies, "reference_pool", "ev_audit")
        self._wrap(near_copies, "audit_panels", "ev_audit")
        self._wrap(evaluation, "score_embeddings", "ev_score")
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)

    def get(self, key: str) -> float:
        return self.seconds.get(key, 0.0)


def timed_verify(repo_id: str, endpoint: str, warm_cache: Path, run_cache: Path, device: str | None) -> dict:
    """One real verify_repo run of the repo's one pending submission, in a fresh Python process (as a
    scheduled `leaderboard verify` job runs: nothing the setup computed in this process, e.g. the copy
    audit's in-memory perceptual hashes, carries over) from a copy of the warm cache."""
    shutil.rmtree(run_cache, ignore_errors=True)
    shutil.copytree(warm_cache, run_cache)
    spec = {"repo_id": repo_id, "endpoint": endpoint, "cache_dir": str(run_cache), "device": device}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child-verify", json.dumps(spec)],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "0", "HF_TOKEN": TOKEN})
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        sys.exit(f"{repo_id}: the timed verify process failed (exit status {proc.returncode})")
    return json.loads(lines[-1])


def child_verify(spec: dict) -> None:
    """The timed run (in its own process): imports first, then one verify_repo call; prints one JSON line."""
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = False
    import huggingface_hub  # noqa: F401 - imported before timing, like the modules below
    import pyarrow.parquet  # noqa: F401
    import torch  # noqa: F401

    from geofidelity_bench import evaluation, near_copies  # noqa: F401
    from geofidelity_bench.hub import leaderboard, results_repo  # noqa: F401
    from geofidelity_bench.hub.verify import verify_repo

    busy0, ours0 = busy_cpu_seconds(), own_cpu_seconds()
    with quiet(), Phases() as ph:
        t0 = time.perf_counter()
        report = verify_repo(spec["repo_id"], endpoint=spec["endpoint"], token=TOKEN, cache_dir=spec["cache_dir"],
                             device=spec["device"], progress=False, max_submissions=1)
        total = time.perf_counter() - t0
    busy1, ours1 = busy_cpu_seconds(), own_cpu_seconds()
    others = (busy1 - busy0 - (ours1 - ours0)) / total if busy0 is not None and busy1 is not None else float("nan")
    if len(report.outcomes) != 1:
        sys.exit(f"{spec['repo_id']}: expected one submission to verify, got {len(report.outcomes)}: {report.lines()}")
    outcome = report.outcomes[0]
    evaluate = ph.get("recompute") - ph.get("download") - ph.get("models")
    stats = ph.embedding_stats[-1] if ph.embedding_stats else {}
    print(json.dumps({
        "total": total, "download": ph.get("download"), "models": ph.get("models"), "evaluate": evaluate,
        "write": ph.get("write"), "ev_load": ph.get("ev_load"), "ev_embed": ph.get("ev_embed"),
        "ev_audit": ph.get("ev_audit"), "ev_score": ph.get("ev_score"),
        "other": total - ph.get("recompute") - ph.get("write"), "status": outcome.status, "detail": outcome.detail,
        "outcome_s": outcome.seconds, "others": max(0.0, others), "computed": stats.get("computed"),
        "from_cache": stats.get("from_cache")}))


def clear_records(repo_id: str, endpoint: str) -> None:
    """Deletes the verification records, so the same submission is pending again (the next repeat)."""
    from huggingface_hub import HfApi

    from geofidelity_bench.hub.leaderboard_config import VERIFICATIONS_DIR

    HfApi(endpoint=endpoint, token=TOKEN).delete_folder(VERIFICATIONS_DIR, repo_id=repo_id, repo_type="dataset",
                                                        commit_message="bench: clear verification records")


# -- one scale -------------------------------------------------------------------------------------


def setup_scale(scale: str, work: Path, endpoint: str, warm_cache: Path, submitter_cache: Path,
                benchmark) -> tuple[str, int, str, float]:
    """Pins a results repo and pushes one submission; returns (repo id, images, layout, MB of images)."""
    ep = ["--endpoint", endpoint]
    repo, gens, method = f"bench/lb-{scale}", f"bench/gens-{scale}", f"bench_{scale}"
    gen = work / "gen"
    if scale == "demo":
        cli("generate", "--model", "tiny", "--conditions", "L0", "GPS_ONLY", "--images-per-block", "4",
            "--out", str(gen), "--no-progress")
        layout = f"tiny generator, L0 + GPS_ONLY x {len(benchmark.block_ids)} blocks x 4 images"
        method = "tiny"
    else:
        layout = paper_folder(gen, benchmark, method)
    files = sorted(gen.rglob("*.jpg"))
    cli("leaderboard", "init", "--repo-id", repo, "--benchmark", BENCHMARK, "--encoder", ENCODER, "--no-progress",
        "--cache-dir", str(warm_cache), *ep)
    cli("evaluate", "--generated", str(gen), "--encoder", ENCODER, "--out", str(work / "res"), "--no-progress",
        "--cache-dir", str(submitter_cache), "--no-gaas")
    cli("push-generations", str(gen), "--repo-id", gens, *ep)
    cli("push-results", str(work / "res"), "--repo-id", repo, "--generations", gens, *ep)
    return repo, len(files), layout, sum(f.stat().st_size for f in files) / 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=("demo", "paper", "both"), default="both",
                        help="demo (56 tiny-generator images), paper (448 images) or both (default)")
    parser.add_argument("--repeats", type=int, default=1, help="timed verify runs per scale; best total (default: 1)")
    parser.add_argument("--device", default=None,
                        help="where the verifier runs the encoder (default: as `leaderboard verify`: this "
                             "process's GPU, else cpu)")
    parser.add_argument("--child-verify", default=None, help=argparse.SUPPRESS)  # the timed run's own process
    args = parser.parse_args(argv)
    if args.child_verify:
        child_verify(json.loads(args.child_verify))
        return
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    os.environ["HF_HUB_OFFLINE"] = "0"
    os.environ["HF_TOKEN"] = TOKEN
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = False
    import torch
    from fake_hub import FakeHub

    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.encoders import get_encoder
    from geofidelity_bench.prefetch import default_num_workers

    device = str(get_encoder(ENCODER, device=args.device).device)
    where = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "CPU"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cpu_name()}, {cores} cores available, torch threads {torch.get_num_threads()}, "
          f"{default_num_workers()} decode worker threads; encoder {ENCODER} on {device} ({where}); "
          f"torch {torch.__version__}, Python {platform.python_version()}")
    print("Hub: the loopback fake Hub (tests/fake_hub.py): download and write time this library and "
          "huggingface_hub over local HTTP, not the network")
    print(f"verifier cache warm (benchmark photos embedded and hashed before timing); best of {args.repeats} "
          f"timed verify_repo run(s) per scale, one submission each, each in a fresh process (imports not timed)")
    benchmark = load_benchmark(BENCHMARK)
    scales = ("demo", "paper") if args.scale == "both" else (args.scale,)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp, FakeHub(token=TOKEN) as hub:
        tmp = Path(tmp)
        for scale in scales:
            work = tmp / scale
            work.mkdir()
            t0 = time.perf_counter()
            repo, n_images, layout, mb = setup_scale(scale, work, hub.url, tmp / "verifier-cache",
                                                     tmp / "submitter-cache", benchmark)
            print(f"{scale}: {layout}: {n_images} images, {mb:.1f} MB (setup {time.perf_counter() - t0:.0f} s, "
                  "not timed)")
            runs = []
            for r in range(args.repeats):
                if r:
                    clear_records(repo, hub.url)
                runs.append(timed_verify(repo, hub.url, tmp / "verifier-cache", work / "run-cache", args.device))
                if runs[-1]["status"] != "verified":
                    print(f"warning: {scale}: the verifier's status is {runs[-1]['status']}: {runs[-1]['detail']}",
                          file=sys.stderr)
            best = min(runs, key=lambda x: x["total"])
            rows.append((scale, n_images, best, [x["status"] for x in runs]))
    print()
    head = (f"{'scale':<6} {'images':>6} {'download+check s':>16} {'evaluate s':>10} {'write s':>7} "
            f"{'models s':>8} {'other s':>7} {'total s':>7} {'s/image':>8}")
    print(head)
    for scale, n, b, _ in rows:
        print(f"{scale:<6} {n:>6} {b['download']:>16.2f} {b['evaluate']:>10.2f} {b['write']:>7.2f} "
              f"{b['models']:>8.2f} {b['other']:>7.2f} {b['total']:>7.2f} {b['total'] / n:>8.3f}")
    print("models: loading the pinned benchmark and encoder (once per verify run); other: reading the results "
          "repo's state and the submission's files")
    print()
    print(f"{'evaluate split':<14} {'load+decode s':>13} {'embed s':>8} {'copy audit s':>12} {'score s':>8} "
          f"{'rest s':>7} {'computed':>8} {'from cache':>10}")
    for scale, n, b, _ in rows:
        rest = b["evaluate"] - b["ev_load"] - b["ev_embed"] - b["ev_audit"] - b["ev_score"]
        print(f"{scale:<14} {b['ev_load']:>13.2f} {b['ev_embed']:>8.2f} {b['ev_audit']:>12.2f} {b['ev_score']:>8.2f} "
              f"{rest:>7.2f} {b['computed']!s:>8} {b['from_cache']!s:>10}")
    print("load+decode: listing the downloaded panels and decoding every image once (the image check); embed: "
          "decoding, preprocessing and the encoder; copy audit: perceptual hashes and the comparison with every "
          "benchmark photo; score: the metrics; rest: comparing with the submitted rows. computed / from cache: "
          "embeddings in the timed run (the submission's images computed, the benchmark's photos from the warm cache)")
    for scale, _, b, statuses in rows:
        print(f"{scale}: status {', '.join(statuses)}; the verifier's own per-submission time (verify + write, "
              f"Outcome.seconds) {b['outcome_s']:.2f} s; other processes kept {b['others']:.2f} "
              f"of the {cores} cores busy during the timed run")
    if any(s != "verified" for *_, statuses in rows for s in statuses):
        sys.exit("a run did not verify (see the warnings above): its timings are not those of an honest submission")


if __name__ == "__main__":
    main()
