#!/usr/bin/env bash
# The mutation run of issue 23 (see CONTRIBUTING.md, "Mutation testing", and docs/mutation.md):
# every function of the formula modules, selected by name so that the rest of benchmark.py and
# evaluation.py (loading, validation, the CLI side) is not mutated. Run from the repository root
# with mutmut importable (`pip install -e '.[dev]'`, or PYTHONPATH=/tmp/mutmut_pkgs:$PWD after
# `pip install --target /tmp/mutmut_pkgs mutmut`). Extra arguments go to `mutmut run`.
# Results stay in mutants/ (ignored by git); `mutmut results` lists what was not killed.
set -euo pipefail
# mutmut forks one child per mutant from a process that has already run the tests: a child forked
# from a process with a live OpenMP/BLAS thread pool can hang or crash, and mutmut would count the
# timeout or segfault as a kill. One thread per child (two children on two cores) avoids both.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
exec python -m mutmut run --max-children "${MUTMUT_CHILDREN:-2}" "$@" \
    "geofidelity_bench.metrics.*" \
    "geofidelity_bench.stats.*" \
    "geofidelity_bench.benchmark.x_split*" \
    "geofidelity_bench.benchmark.x_heldout_count*" \
    "geofidelity_bench.evaluation.x_anchor_panels*" \
    "geofidelity_bench.generation.seeds.*" \
    "geofidelity_bench.prompts.*"
