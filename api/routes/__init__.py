"""HTTP routes, one module per resource: parse input, call one use case, return its answer.

`checks` holds what they share: the checks every /v1 request passes, the parameter types and
the errors the routes declare.
"""

from api.routes import (
    anthropic_messages,
    chat_completions,
    conversations,
    forks,
    health,
    history,
    messages,
    responses,
    sessions,
    summaries,
    transfer,
)

ROUTERS = (
    sessions.router,
    forks.router,
    transfer.router,
    messages.router,
    history.router,
    summaries.router,
    conversations.router,
    responses.router,
    chat_completions.router,
    anthropic_messages.router,
    health.router,
)
"""Every router of the app, in the order its routes are matched and documented."""
