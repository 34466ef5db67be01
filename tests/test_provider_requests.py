"""What a real provider receives is the prompt alone (issue #11): no ``<!-- deerflow-agent: … -->``
marker or anything else written for the offline fake, in any request of a whole run.

The fake model server stands in for a real provider here: it records every request, and the
worker is configured as for a real one (a key, a real model name, no offline flag). It still
answers, because it recognises each agent by what the request offers, as it must for real prompts.
"""

from __future__ import annotations

import json

from offline.model_server import FakeModelServer
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.research import Outcome


async def test_no_request_of_a_whole_run_carries_a_marker_for_the_offline_fake(
    worker_with: WorkerWith, provider_env: dict[str, str], model_server: FakeModelServer,
) -> None:
    settings = settings_with(provider_env, OPENAI_API_KEY="sk-looks-real-0123456789", BASIC_MODEL="gpt-4o-mini",
                             DEERFLOW_OFFLINE_DEMO="")
    async with worker_with(settings) as client:
        result = await (await start(client, auto_accept_plan=True, max_step_num=1)).result()
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
