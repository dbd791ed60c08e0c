"""The pure core, second layer: what the model sees and sends — tool definitions rendered per
format, tool messages (truncated honestly, untrusted text marked, secrets removed), MCP definitions.
Builds on ``toolops.runtime``; imports no Django."""
