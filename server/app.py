"""The ASGI app: DeerFlow's endpoints, our page's API, the page itself, and the doors around them.

Only the assembly lives here: the handlers are in their route modules (server/deerflow_routes.py,
content.py, run_routes.py, page_routes.py) and what they share is one ``Services`` on the app's state.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from temporalio.client import Client

from config.settings import Settings
from server import content, deerflow_routes, page_routes, run_routes
from server.access import token_setting, token_table
from server.live import TokenHub
from server.security import Guard
from server.services import Services


def create_app(client: Client, settings: Settings, keep_alive: float = 15.0, hub: TokenHub | None = None,
               ) -> Starlette:
    routes = [*deerflow_routes.ROUTES, *content.ROUTES, *run_routes.ROUTES, *page_routes.ROUTES]
    middleware = [
        Middleware(CORSMiddleware, allow_origins=settings.web_allowed_origins, allow_methods=["GET", "POST", "OPTIONS"],
                   allow_headers=["Content-Type", "Cache-Control", "Authorization", "Last-Event-ID"]),
        Middleware(Guard, tokens=token_table(settings), allowed_origins=settings.web_allowed_origins,
                   token_setting=token_setting(settings)),
    ]
    app = Starlette(routes=routes, middleware=middleware)
    app.state.services = Services.build(client, settings, hub or TokenHub(settings), keep_alive)
    return app
