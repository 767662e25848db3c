"""The Gradio tabs of the Hub leaderboard and the submission instructions (imports gradio)."""

from __future__ import annotations

import gradio as gr

from .hub_board import HubBoard, submit_markdown


def hub_tabs(board: HubBoard | None) -> None:
    """Adds the "Hub leaderboard" tab (when a results repo is set) and the "Submit" tab; call inside ``gr.Tabs``."""
    if board is not None:
        with gr.Tab("Hub leaderboard", id="hub-leaderboard"):
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
