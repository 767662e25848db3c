"""The Gradio tabs of the Hub leaderboard and the submission instructions (imports gradio)."""

from __future__ import annotations

import gradio as gr

from .hub_board import HubBoard, submit_markdown


#: The Hub tab's tables: scroll sideways on a narrow screen instead of breaking every word into letters.
HUB_CSS = """
#hub-board table { display: block; overflow-x: auto; max-width: 100%; }
#hub-board th, #hub-board td { word-break: normal !important; overflow-wrap: normal !important; }
@media (max-width: 700px) {
  #hub-board th, #hub-board td { white-space: nowrap; }
  #hub-board td:first-child { white-space: normal; min-width: 8em; }
}
"""


def hub_tabs(board: HubBoard | None) -> None:
    """Adds the "Hub leaderboard" tab (when a results repo is set) and the "Submit" tab; call inside ``gr.Tabs``."""
    if board is not None:
        with gr.Tab("Hub leaderboard", id="hub-leaderboard"):
            gr.HTML(f"<style>{HUB_CSS}</style>", elem_id="hub-css", padding=False)
            status = gr.Markdown(board.status, elem_id="hub-status")
            refresh = gr.Button("Refresh", elem_id="hub-refresh")
            body = gr.Markdown(board.markdown, elem_id="hub-board")

            def reload():
                board.refresh()
                return board.status, board.markdown

            refresh.click(reload, outputs=[status, body], api_name="hub_refresh", concurrency_limit=1)
    with gr.Tab("Submit", id="submit"):
        gr.Code(submit_markdown(board.repo_id if board else None), language="markdown", interactive=False,
                elem_id="submit-text", label="Copy these commands")
