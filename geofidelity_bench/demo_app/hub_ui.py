"""The Gradio tabs of the Hub leaderboard and the submission instructions (imports gradio)."""

from __future__ import annotations

import gradio as gr

from .hub_board import HubBoard, submit_markdown


def _plots_note(board: HubBoard) -> str:
    return f"*No plots: {board.plots_note}*" if board.plots_note else ""


def hub_tabs(board: HubBoard | None) -> None:
    """Adds the "Hub leaderboard" tab (when a results repo is set) and the "Submit" tab; call inside ``gr.Tabs``."""
    if board is not None:
        with gr.Tab("Hub leaderboard", id="hub-leaderboard"):
            status = gr.Markdown(board.status, elem_id="hub-status")
            refresh = gr.Button("Refresh", elem_id="hub-refresh")
            # its tables are cards on a phone (class gfb-cards: the app's CSS and script, page.CSS and page.APP_HEAD)
            body = gr.Markdown(board.markdown, elem_id="hub-board", elem_classes=["gfb-cards"])
            # the group's plots (leaderboard.png: bars and bootstrap whiskers, as the text above says)
            plots = gr.Gallery(value=board.plots, label="The group's plots", columns=1, height="auto",
                               object_fit="contain", format="png", allow_preview=True, elem_id="hub-plots")
            note = gr.Markdown(_plots_note(board), elem_id="hub-plots-note")

            def reload():
                board.refresh()
                return board.status, board.markdown

            def shown_plots():
                return board.plots, _plots_note(board)

            # the API answer stays (status, tables); the page then shows the plots of the same refresh
            refresh.click(reload, outputs=[status, body], api_name="hub_refresh", concurrency_limit=1).then(
                shown_plots, outputs=[plots, note], api_visibility="private")
    with gr.Tab("Submit", id="submit"):
        # rendered (not Markdown source in a code box); its commands scroll sideways inside their box
        gr.Markdown(submit_markdown(board.repo_id if board else None, hub_tab=board is not None),
                    elem_id="submit-text")
