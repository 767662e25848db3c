"""``python -m geofidelity_bench.cli`` (and ``accelerate launch -m`` / ``torchrun -m``) runs the command."""

from . import main

if __name__ == "__main__":
    raise SystemExit(main())
