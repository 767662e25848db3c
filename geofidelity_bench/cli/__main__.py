"""``python -m geofidelity_bench.cli`` (and ``accelerate launch -m`` / ``torchrun -m``) runs the command."""

from . import run

if __name__ == "__main__":
    run()
