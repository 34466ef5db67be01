"""The test harness: the processes a test starts (dev server, workers, API server), the fakes it
talks to (model, search, HTTP, MCP, S3), the browser driver, the TLS proxy, the crash drill and
the sample requests. Test modules and ``bench/`` import from here; nothing here imports a test
module."""
