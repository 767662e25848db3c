"""VQA backends: a vision-language model answers one multiple-choice question about one image.

:class:`VQABackend` is the interface: ``ask(images, questions) -> replies`` (raw text, parsed
later by :func:`~geofidelity_bench.geodiv.parser.parse_answer`), a JSON ``config`` describing
everything that changes the replies, and ``config_hash`` (the answer cache's key; where the
model runs and the batch size are left out).

:class:`TransformersVQA` runs any transformers ``image-text-to-text`` model
(``AutoProcessor`` + ``AutoModelForImageTextToText``): each image and its question's prompt
(:func:`~geofidelity_bench.geodiv.questions.format_prompt`: the question, lettered options,
"answer with the letter") go through the processor's chat template as one user turn, and the
reply is decoded greedily. The default model is :data:`DEFAULT_VQA_MODEL`; its id, the loaded
commit (or, for a local folder, a hash of its files), dtype, image size cap and decoding are
recorded in the config.

Any other model plugs in as a factory (:func:`load_vqa_plugin`, ``--vqa-model module:factory``
on the command line): a callable that takes the model options as keywords and returns a
:class:`VQABackend`.

Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Sequence

from PIL import Image

from ..encoders._hf import looks_like_path
from ..errors import GeoFidelityError, ModelUnavailableError, offline_hint
from ..encoders.base import canonical_json, file_sha256, resolve_device
from .questions import PROMPT_FORMAT, Question

#: Default VQA model: a small open instruction-tuned VLM (Idefics3 architecture) that answers
#: lettered multiple choice and runs on CPU with the package's own dependencies. Stronger models
#: (e.g. "Qwen/Qwen2-VL-2B-Instruct", whose processor needs torchvision) are one --vqa-model away.
DEFAULT_VQA_MODEL = "HuggingFaceTB/SmolVLM-256M-Instruct"
#: Config keys that say where a backend runs, not what it answers; left out of the hash.
UNHASHED_KEYS = ("device", "batch_size")
_HASHED_SUFFIXES = (".safetensors", ".bin", ".json", ".jinja", ".model", ".txt", ".tiktoken")


class VQAUnavailableError(ModelUnavailableError):
    """A VQA model (weights or processor) cannot be loaded; the message names it and says how to run offline."""


class VQAPluginError(GeoFidelityError, ValueError):
    """A VQA plugin (``module:factory``) cannot be imported, or its factory does not build a :class:`VQABackend`."""


#: How to run a VQA model without the Hub (the one wording of :func:`geofidelity_bench.errors.offline_hint`).
OFFLINE_HINT = offline_hint(
    flag="--vqa-model",
    python_arg="TransformersVQA(model=PATH) or vqa_model=",
    saved_with="save_pretrained() holding the model and its processor (e.g. a copy of a Hub snapshot)",
)


def hash_vqa_config(config: dict[str, Any]) -> str:
    kept = {k: v for k, v in config.items() if k not in UNHASHED_KEYS}
    return hashlib.sha256(canonical_json(kept).encode("utf-8")).hexdigest()


class VQABackend(abc.ABC):
    """Answers multiple-choice questions about images.

    Subclasses implement :meth:`ask` and fill ``self._config`` (JSON-serializable).
    """

    name: str = "vqa"
    batch_size: int = 8
    device: str = "cpu"

    def __init__(self) -> None:
        self._config: dict[str, Any] = {}

    @property
    def config(self) -> dict[str, Any]:
        cfg = json.loads(canonical_json(self._config))
        cfg["device"] = self.device
        cfg["batch_size"] = self.batch_size
        return cfg

    @property
    def config_hash(self) -> str:
        return hash_vqa_config(self._config)

    @property
    def model_id(self) -> str:
        return str(self._config.get("model", self.name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model_id!r}, device={self.device!r}, config_hash={self.config_hash[:12]})"

    @abc.abstractmethod
    def ask(self, images: Sequence[Image.Image], questions: Sequence[Question]) -> list[str]:
        """One raw reply per (image, question) pair; ``images[i]`` is asked ``questions[i]``."""


def _resolve_source(model: str | os.PathLike) -> tuple[str, bool]:
    text = os.fspath(model)
    path = Path(text).expanduser()
    if path.is_dir():
        return str(path.resolve()), True
    if path.exists() or isinstance(model, os.PathLike) or looks_like_path(text):
        raise VQAUnavailableError(
            f"VQA model {text!r} is not a folder saved with save_pretrained() (model + processor). {OFFLINE_HINT}"
        )
    return text, False


def _local_files_sha256(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.suffix in _HASHED_SUFFIXES:
            h.update(p.name.encode("utf-8") + b"\0" + file_sha256(p).encode("ascii") + b"\n")
    return h.hexdigest()


def _unavailable(source: str, revision: str | None, err: BaseException, part: str) -> VQAUnavailableError:
    from ..errors import load_failure_reason

    rev = f" (revision {revision!r})" if revision else ""
    reason = " ".join(str(err).split()).rstrip(".")
    if isinstance(err, ImportError):  # weights are there, a package is not: the offline hint would mislead
        return VQAUnavailableError(
            f"cannot load the {part} of VQA model {source!r}{rev}: {reason}. Install the missing package "
            "(for example pip install torchvision), or choose another image-text-to-text model with --vqa-model."
        )
    return VQAUnavailableError(
        f"cannot load the {part} of VQA model {source!r}{rev}: {load_failure_reason(err, f'its {part}')}. {OFFLINE_HINT}"
    )


def default_vqa_dtype(device: str, *, bf16_supported: bool) -> str:
    """The VQA model's dtype when none is given: bfloat16 on a GPU that supports it (Ampere and
    later), float16 on older GPUs (V100, T4: ``torch.cuda.is_bf16_supported()`` is False), float32 on CPU."""
    if not str(device).startswith("cuda"):
        return "float32"
    return "bfloat16" if bf16_supported else "float16"


class TransformersVQA(VQABackend):
    """A transformers image-text-to-text model as the GeoDiv VQA backend.

    Args:
        model: Hub id (default :data:`DEFAULT_VQA_MODEL`) or a local folder with the model and
            its processor (which must have a chat template).
        revision: Hub revision; the commit actually loaded is recorded.
        device: torch device (default: cuda if available, else cpu).
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"`` (half precision on GPU only);
            default bfloat16 on a GPU with bf16 support, else float16; float32 on CPU (:func:`default_vqa_dtype`).
        batch_size: (image, question) pairs per ``generate`` call.
        max_new_tokens: reply length cap (a letter needs 1-3 tokens; default 8).
        max_image_side: images whose longer side exceeds this are downscaled (bicubic, aspect
            kept) before the processor, to bound the number of visual tokens; None or 0 keeps them.

    Raises:
        VQAUnavailableError: the weights or the processor cannot be loaded (offline without a
            local copy, unknown id, not an image-text-to-text model, no chat template).
    """

    name = "transformers"

    def __init__(
        self,
        model: str | os.PathLike = DEFAULT_VQA_MODEL,
        *,
        revision: str | None = None,
        device: Any = None,
        dtype: str | None = None,
        batch_size: int = 8,
        max_new_tokens: int = 8,
        max_image_side: int | None = 768,
    ) -> None:
        super().__init__()
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        from ..encoders.base import resolve_dtype

        if int(batch_size) < 1 or int(max_new_tokens) < 1:
            raise ValueError("batch_size and max_new_tokens must be >= 1")
        if max_image_side is not None and int(max_image_side) == 0:
            max_image_side = None  # 0 means no cap, as on the command line
        if max_image_side is not None and int(max_image_side) < 8:
            raise ValueError(f"max_image_side must be >= 8, or None / 0 for no cap, got {max_image_side}")
        self.device = resolve_device(device)
        bf16 = self.device.startswith("cuda") and torch.cuda.is_bf16_supported()
        dtype_name, torch_dtype = resolve_dtype(dtype or default_vqa_dtype(self.device, bf16_supported=bf16),
                                                self.device)
        source, local = _resolve_source(model)
        kwargs: dict[str, Any] = {"revision": revision}
        if local:
            kwargs["local_files_only"] = True
        try:
            processor = AutoProcessor.from_pretrained(source, **kwargs)
        except (OSError, ValueError, ImportError, KeyError, TypeError) as err:
            raise _unavailable(source, revision, err, "processor") from err
        try:
            net = AutoModelForImageTextToText.from_pretrained(source, dtype=torch_dtype, **kwargs)
        except (OSError, ValueError, ImportError, KeyError) as err:
            raise _unavailable(source, revision, err, "weights") from err
        if not hasattr(processor, "apply_chat_template") or not getattr(processor, "chat_template", None):
            raise VQAUnavailableError(
                f"VQA model {source!r}: its processor has no chat template, so the image and the question cannot "
                f"be put into one user turn. Use an instruction-tuned image-text-to-text model. {OFFLINE_HINT}"
            )
        tokenizer = getattr(processor, "tokenizer", None)
        if tokenizer is None:
            raise VQAUnavailableError(f"VQA model {source!r}: its processor has no tokenizer")
        tokenizer.padding_side = "left"  # decoder-only generation continues from the right end
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.processor, self.tokenizer = processor, tokenizer
        self.model = net.to(self.device).eval()
        self._torch = torch
        self.batch_size = int(batch_size)
        self.max_new_tokens = int(max_new_tokens)
        self.max_image_side = None if max_image_side is None else int(max_image_side)
        weights: dict[str, Any] = {"model": source, "revision": revision}
        if local:
            weights["files_sha256"] = _local_files_sha256(Path(source))
        else:
            weights["commit"] = getattr(net.config, "_commit_hash", None)
        self._config = {
            "backend": "transformers:AutoModelForImageTextToText",
            **weights,
            "model_type": getattr(net.config, "model_type", None),
            "dtype": dtype_name,
            "decoding": {"do_sample": False, "num_beams": 1, "max_new_tokens": self.max_new_tokens},
            "prompt_format": PROMPT_FORMAT,
            "chat": "one user turn: [image, prompt]; add_generation_prompt=True",
            "image": {"max_side": self.max_image_side, "resample": "bicubic", "mode": "RGB"},
        }

    def prepare(self, image: Image.Image) -> Image.Image:
        """RGB, downscaled so that the longer side is at most ``max_image_side``."""
        image = image.convert("RGB") if image.mode != "RGB" else image
        side = self.max_image_side
        if side is not None and max(image.size) > side:
            w, h = image.size
            scale = side / max(w, h)
            image = image.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.BICUBIC)
        return image

    def _inputs(self, images: Sequence[Image.Image], questions: Sequence[Question]):
        texts = []
        for q in questions:
            conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": q.prompt}]}]
            texts.append(self.processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False))
        bos = self.tokenizer.bos_token
        # A template that writes the BOS token itself must not get a second one from the tokenizer.
        extra = {"add_special_tokens": False} if bos and texts and texts[0].startswith(bos) else {}
        return self.processor(text=texts, images=[[self.prepare(im)] for im in images], padding=True,
                              return_tensors="pt", **extra)

    def ask(self, images: Sequence[Image.Image], questions: Sequence[Question]) -> list[str]:
        if len(images) != len(questions):
            raise ValueError(f"{len(images)} images but {len(questions)} questions")
        torch = self._torch
        replies: list[str] = []
        for start in range(0, len(images), self.batch_size):
            inputs = self._inputs(images[start:start + self.batch_size], questions[start:start + self.batch_size])
            inputs = inputs.to(self.device)
            floating = next((p.dtype for p in self.model.parameters() if p.is_floating_point()), None)
            if floating is not None and "pixel_values" in inputs:
                inputs["pixel_values"] = inputs["pixel_values"].to(floating)
            with torch.inference_mode():
                out = self.model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=self.max_new_tokens,
                                          pad_token_id=self.tokenizer.pad_token_id)
            new_tokens = out[:, inputs["input_ids"].shape[1]:]
            replies += [r.strip() for r in self.tokenizer.batch_decode(new_tokens, skip_special_tokens=True)]
        return replies


#: ``pkg.module:factory`` or ``path/to/file.py:factory`` (a Hub id never holds a colon).
_PLUGIN_FORM = re.compile(r"(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|.+\.py):[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def is_vqa_plugin(model: Any) -> bool:
    """Whether ``model`` names a plugin factory (``module:factory`` or ``file.py:factory``), not a
    Hub id or an existing local folder."""
    if not isinstance(model, str) or _PLUGIN_FORM.fullmatch(model) is None:
        return False
    return not Path(model).expanduser().exists()


def load_vqa_plugin(target: str, **options: Any) -> VQABackend:
    """The backend built by a user's factory: ``target`` is ``pkg.module:factory`` or
    ``path/to/file.py:factory``; ``factory(**options)`` must return a :class:`VQABackend`.

    Raises:
        VQAPluginError: the module, file or attribute is missing, or the factory returns
            something else than a :class:`VQABackend`.
    """
    from ..plugins import load_object

    factory = load_object(target, what="VQA model", error=VQAPluginError)
    if not callable(factory):
        raise VQAPluginError(f"VQA model plugin {target!r} is not callable; name a factory that returns a VQABackend")
    backend = factory(**options)
    if not isinstance(backend, VQABackend):
        raise VQAPluginError(
            f"VQA model plugin {target!r} returned {type(backend).__name__}, not a VQABackend "
            "(subclass geofidelity_bench.geodiv.VQABackend and implement ask(images, questions))"
        )
    return backend


def get_vqa_backend(
    model: str | os.PathLike | VQABackend | None = None, **kwargs: Any
) -> VQABackend:
    """A backend: an existing :class:`VQABackend` is returned as it is; ``module:factory`` (or
    ``file.py:factory``) is built by :func:`load_vqa_plugin`; else a :class:`TransformersVQA`.

    ``model=None`` is :data:`DEFAULT_VQA_MODEL`; the ``kwargs`` that are not None go to
    :class:`TransformersVQA` or to the plugin's factory.
    """
    if isinstance(model, VQABackend):
        if any(v is not None for v in kwargs.values()):
            given = sorted(k for k, v in kwargs.items() if v is not None)
            raise ValueError(f"{', '.join(given)} cannot be applied to an already built VQA backend")
        return model
    options = {k: v for k, v in kwargs.items() if v is not None}
    if is_vqa_plugin(model):
        return load_vqa_plugin(model, **options)
    return TransformersVQA(DEFAULT_VQA_MODEL if model is None else model, **options)
