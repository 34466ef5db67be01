"""The MCP wing: listing and calling the tools of the MCP servers the operator configured. Loaded
lazily, because the MCP SDK takes seconds to import and most runs use none."""
