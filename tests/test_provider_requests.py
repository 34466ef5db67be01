"""What a real provider receives is the prompt alone (issue #11): no ``<!-- deerflow-agent: … -->``
marker or anything else written for the offline fake, in any request of a whole run.

The fake model server stands in for a real provider here: it records every request, and the
worker is configured as for a real one (a key, a real model name, no offline flag). It still
answers, because it recognises each agent by what the request offers, as it must for real prompts.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from temporalio.client import Client

from config.settings import Settings
from offline.model_server import FakeModelServer
from tests.support.runs import start
from tests.support.settings import settings_with
from workflows.models import Outcome


async def test_no_request_of_a_whole_run_carries_a_marker_for_the_offline_fake(
    time_worker: Client, configure_worker: Callable[[Settings], None], provider_env: dict[str, str],
    model_server: FakeModelServer,
) -> None:
    configure_worker(settings_with(provider_env, OPENAI_API_KEY="sk-looks-real-0123456789", BASIC_MODEL="gpt-4o-mini",
                                   DEERFLOW_OFFLINE_DEMO=""))
    result = await (await start(time_worker, auto_accept_plan=True, max_step_num=1)).result()
    assert result.outcome is Outcome.REPORT
    agents = {agent for agent in ("coordinator", "planner", "researcher", "reporter")
              if model_server.requests_for(agent)}
    assert agents == {"coordinator", "planner", "researcher", "reporter"}  # every kind of request was seen
    for body in model_server.requests:
        sent = json.dumps(body, ensure_ascii=False)
        assert body["model"] == "gpt-4o-mini"
        at = sent.find("<!--")
        assert at < 0, sent[max(0, at - 300):at + 300]
        at = sent.find("deerflow-agent")
        assert at < 0, sent[max(0, at - 300):at + 300]
