"""How to cite GeoFidelity-Bench: the one citation every card, the app and the README carry.

The paper is the arXiv preprint arXiv:2606.23669 (Kaizhen Tan, 2026). Every published text
(dataset card, metric card and module, Space README, the app's About page, the repository
README, the ``datasets`` builder) uses these constants or a copy written from them by
``python scripts/sync_published_files.py``; ``tests/test_published_files.py`` checks that no
other BibTeX entry circulates.

    >>> CITATION_BIBTEX.splitlines()[0]
    '@article{tan2026geofidelitybench,'
    >>> CITATION_MARKDOWN.startswith("```bibtex\\n@article") and CITATION_MARKDOWN.endswith("}\\n```")
    True
"""

from __future__ import annotations

#: Title of the paper, as on arXiv.
TITLE = "GeoFidelity-Bench: Evaluating Block-Conditioned Geographic Fidelity in Text-to-Image Street-View Generation"
ARXIV_ID = "2606.23669"
ARXIV_URL = f"https://arxiv.org/abs/{ARXIV_ID}"

#: The BibTeX entry (ends with a newline).
CITATION_BIBTEX = f"""\
@article{{tan2026geofidelitybench,
  title   = {{{TITLE}}},
  author  = {{Tan, Kaizhen}},
  journal = {{arXiv preprint arXiv:{ARXIV_ID}}},
  year    = {{2026}},
  url     = {{{ARXIV_URL}}}
}}
"""

#: The one-line form, for running text.
CITATION_TEXT = f"Kaizhen Tan. {TITLE}. arXiv preprint arXiv:{ARXIV_ID}, 2026."

#: The BibTeX entry as a fenced Markdown block (what the ``## Citation`` section of a card holds).
CITATION_MARKDOWN = f"```bibtex\n{CITATION_BIBTEX}```"

__all__ = ["ARXIV_ID", "ARXIV_URL", "CITATION_BIBTEX", "CITATION_MARKDOWN", "CITATION_TEXT", "TITLE"]
