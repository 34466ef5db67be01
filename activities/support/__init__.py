"""What activities of every wing (and the sandbox's) share: heartbeats, provider slots, lazy
imports, retry pacing, the isolated extraction runner and tool metrics. Imports no wing, so any
wing may import it."""
