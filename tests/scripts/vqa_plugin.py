"""A user VQA model plugged in with ``geodiv --vqa-model vqa_plugin:scripted`` (tests put this
folder on ``sys.path`` or ``PYTHONPATH``): replies are scripted from the image's mean colour, so
the answer cache, parser, tables and command line around it are the real ones."""

from __future__ import annotations

import numpy as np
from PIL import Image

from geofidelity_bench.geodiv import VQABackend

#: Every factory call's options, and every backend built, in order (for the tests' assertions).
CALLS: list[dict] = []
BUILT: list["ScriptedVQA"] = []


def mean_code(image: Image.Image) -> tuple[int, float, float]:
    """(answer code, mean green, mean blue); the code is round(mean red / 36)."""
    arr = np.asarray(image.convert("RGB"), dtype=float)
    r, g, b = arr[..., 0].mean(), arr[..., 1].mean(), arr[..., 2].mean()
    return int(round(r / 36)), g, b


def scripted_reply(image: Image.Image, question) -> str:
    code, g, b = mean_code(image)
    if question.kind == "background" and b > 200:
        return "I am not sure, maybe A"
    letter = question.letters[code % len(question.choices)]
    return f"Answer: {letter}" if g >= 100 else letter


class ScriptedVQA(VQABackend):
    """Only the model is scripted."""

    name = "scripted"

    def __init__(self) -> None:
        super().__init__()
        self._config = {"backend": "test:scripted", "model": "scripted-mean-colour", "rule": 1}
        self.batch_size = 4
        self.asked = 0

    def ask(self, images, questions):
        self.asked += len(images)
        return [scripted_reply(im, q) for im, q in zip(images, questions)]


def scripted(**options) -> ScriptedVQA:
    """The factory ``--vqa-model vqa_plugin:scripted`` calls with the command's model options."""
    CALLS.append(dict(options))
    backend = ScriptedVQA()
    BUILT.append(backend)
    return backend


def not_a_backend(**options):
    return "a string"
