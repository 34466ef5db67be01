"""``speak`` and ``join_audio``: the podcast's voices, and its clips joined into one MP3.

``speak`` reads one line with the operator's OpenAI-compatible ``/v1/audio/speech`` endpoint
(``DEERFLOW_TTS_URL``, key, model, a voice per speaker), or else DeerFlow's Volcengine settings
(``VOLCENGINE_TTS_APPID``, ``VOLCENGINE_TTS_ACCESS_TOKEN``), and writes the clip to the blob store, so
history holds references, not audio. Without an endpoint it fails with ``NoVoice`` (not retried),
which the podcast turns into a script-only answer that says so. The endpoint's answer is capped
in size, and its refusals (4xx but 408/429) are not retried; the key travels only in the header.
``speak`` heartbeats while it waits and counts the endpoint's failures across attempts, as a search
does (workflows/calls/activity_options.py: ``SPEAK``), so a line lost with its worker is retried at once.
MP3 clips are joined by concatenation, as DeerFlow does: MP3 is a sequence of self-contained
frames, so players play the clips back to back.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.support.pooled_http import pooled_client
from activities.support.retry_pacing import paced_retries
from config.settings import Settings
from runtime import artefacts
from runtime.heartbeat import heartbeating
from workflows.contracts.artefact import ArtefactRef
from workflows.contracts.podcast import NO_VOICE, NO_VOICE_MESSAGE, SpeechRequest

MAX_AUDIO_BYTES = 20 * 1024 * 1024


class SpeechActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name="speak")
    @heartbeating
    @paced_retries
    async def speak(self, request: SpeechRequest) -> ArtefactRef:
        return await artefacts.put(self.settings, await synthesize(self.settings, request))

    @activity.defn(name="join_audio")
    async def join_audio(self, clips: list[ArtefactRef]) -> ArtefactRef:
        joined = b"".join([await artefacts.get(self.settings, clip) for clip in clips])
        return await artefacts.put(self.settings, joined)


async def synthesize(settings: Settings, request: SpeechRequest) -> bytes:
    """One clip from the operator's endpoint (OpenAI-compatible first, else DeerFlow's Volcengine
    settings); ``NoVoice`` without either, ``SpeechRefused`` on a refusal."""
    if settings.tts_url:
        voice = settings.tts_voice_male if request.speaker == "male" else settings.tts_voice_female
        headers = {"Authorization": f"Bearer {settings.tts_api_key}"} if settings.tts_api_key else {}
        body: dict[str, Any] = {"model": settings.tts_model, "input": request.text, "voice": voice,
                                "response_format": "mp3"}
        audio = await _post(settings, f"{settings.tts_url.rstrip('/')}/audio/speech", body, headers)
    elif settings.volcengine_tts_appid and settings.volcengine_tts_access_token:
        audio = await _volcengine(settings, request)
    else:
        raise ApplicationError(NO_VOICE_MESSAGE, type=NO_VOICE, non_retryable=True)
    if not audio:
        raise ApplicationError("the speech endpoint sent no audio", type="SpeechFailed")
    return audio


async def _volcengine(settings: Settings, request: SpeechRequest) -> bytes:
    """DeerFlow's Volcengine request (its podcast's voices: BV002 male, BV001 female); base64 audio back."""
    token = settings.volcengine_tts_access_token or ""
    body = {"app": {"appid": settings.volcengine_tts_appid, "token": token, "cluster": settings.volcengine_tts_cluster},
            "user": {"uid": str(uuid.uuid4())},
            "audio": {"voice_type": "BV002_streaming" if request.speaker == "male" else "BV001_streaming",
                      "encoding": "mp3", "speed_ratio": 1.05, "volume_ratio": 1.0, "pitch_ratio": 1.0},
            "request": {"reqid": str(uuid.uuid4()), "text": request.text, "text_type": "plain", "operation": "query",
                        "with_frontend": 1, "frontend_type": "unitTson"}}
    answer = await _post(settings, settings.volcengine_tts_url, body, {"Authorization": f"Bearer;{token}"})
    try:
        return base64.b64decode(json.loads(answer)["data"], validate=True)
    except (ValueError, KeyError, TypeError) as error:
        raise ApplicationError(f"the Volcengine speech answer holds no audio ({type(error).__name__})",
                               type="SpeechFailed") from None


async def _post(settings: Settings, url: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    """The answer's body, capped; a refusal (4xx but 408/429) is not retried. On the worker's kept
    client (``activities/support/pooled_http.py``): each line is a call of its own, and reuses the
    connection."""
    http = pooled_client(("speech",))
    async with http.stream("POST", url, json=body, headers=headers, timeout=settings.tts_timeout,
                           follow_redirects=False) as reply:
        if reply.status_code != 200:
            detail = (await reply.aread())[:300].decode("utf-8", "replace")
            refused = 400 <= reply.status_code < 500 and reply.status_code not in (408, 429)
            raise ApplicationError(f"the speech endpoint answered {reply.status_code}: {detail}",
                                   type="SpeechRefused" if refused else "SpeechFailed", non_retryable=refused)
        audio = bytearray()
        async for chunk in reply.aiter_bytes():
            audio += chunk
            if len(audio) > MAX_AUDIO_BYTES:
                raise ApplicationError(f"the speech endpoint sent more than {MAX_AUDIO_BYTES} bytes for one line",
                                       type="SpeechRefused", non_retryable=True)
    return bytes(audio)
