"""The login page: the form asking for an API key."""

from __future__ import annotations

from api.console.html import esc


def body(problem: str | None) -> str:
    """The login form, with `problem` (a wrong key) above it."""
    shown = f'<p class="problem" id="problem">{esc(problem)}</p>' if problem else ""
    return (
        f'{shown}<form method="post" action="/console/login" id="login">'
        '<label>API key <input type="password" name="key" autocomplete="off" autofocus '
        'required></label> <button type="submit">Open the console</button></form>'
        "<p>The key is one of API_KEYS; the console then shows its tenant's sessions only.</p>"
    )
