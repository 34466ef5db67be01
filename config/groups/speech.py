"""The podcast's voices (activities/content/speech.py): an OpenAI-compatible speech endpoint, or
DeerFlow's Volcengine TTS."""

from __future__ import annotations

from pydantic import Field

from config.groups.base import SettingsGroup


class SpeechSettings(SettingsGroup):
    """Text to speech; with neither endpoint, the podcast is a script only."""

    # The podcast's voices (activities/content/speech.py): an OpenAI-compatible /v1/audio/speech endpoint
    # (base URL up to /v1), its key, model and one voice per speaker. Unset: no voice, script only.
    tts_url: str | None = Field(default=None, pattern=r"^https?://", alias="DEERFLOW_TTS_URL")
    """An OpenAI-compatible speech endpoint (base up to `/v1`) for the podcast. Unset: no voice."""
    tts_api_key: str | None = Field(default=None, alias="DEERFLOW_TTS_API_KEY")
    """Its key."""
    tts_model: str = Field(default="tts-1", alias="DEERFLOW_TTS_MODEL")
    """Its model."""
    tts_voice_male: str = Field(default="onyx", alias="DEERFLOW_TTS_VOICE_MALE")
    """The male speaker's voice."""
    tts_voice_female: str = Field(default="nova", alias="DEERFLOW_TTS_VOICE_FEMALE")
    """The female speaker's voice."""
    tts_timeout: float = Field(default=60.0, gt=0, le=600, alias="DEERFLOW_TTS_TIMEOUT")
    """Seconds per speech call."""
    # DeerFlow's Volcengine TTS settings, used when DEERFLOW_TTS_URL is unset (its podcast voices).
    volcengine_tts_appid: str | None = Field(default=None, alias="VOLCENGINE_TTS_APPID")
    """DeerFlow's Volcengine TTS, used when `DEERFLOW_TTS_URL` is unset."""
    volcengine_tts_access_token: str | None = Field(default=None, alias="VOLCENGINE_TTS_ACCESS_TOKEN")
    """Its access token."""
    volcengine_tts_cluster: str = Field(default="volcano_tts", alias="VOLCENGINE_TTS_CLUSTER")
    """Its cluster."""
    volcengine_tts_url: str = Field(default="https://openspeech.bytedance.com/api/v1/tts", pattern=r"^https?://",
                                    alias="DEERFLOW_VOLCENGINE_TTS_URL")
    """Its endpoint."""
