"""The web wing: ``web_search`` through the registered providers and ``crawl_tool``, split into
fetching (the guarded network), decoding (bytes to text) and extraction (text to markdown)."""
