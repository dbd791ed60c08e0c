"""The OAuth 2.1 authorization server of the MCP front door (issue 33), on django-oauth-toolkit.

An MCP client (Claude, ChatGPT, VS Code, Cursor, the official SDK's ``OAuthClientProvider``)
reads the MCP server's RFC 9728 document, finds this server, registers (RFC 7591, or a Client ID
Metadata Document), sends a person through the authorization-code flow with PKCE S256, and calls
the MCP server with the short-lived token it gets. The person signs in with the console's login
and chooses which agent subject (of a tenant where they hold ``connect_agents``) the client will
act as: the consent (``models.AgentConsent``) binds that subject and the MCP resource to the
token family, and the MCP server (``mcp_server.identity``) treats such a token exactly like an
API token of that subject.

Modules: ``models`` (the consent), ``validator`` (the toolkit's validator: consent bound at the
code, a replayed code revokes what it issued), ``views`` (the consent page, registration, the
discovery documents), ``registration`` (redirect-URI rule, rate limit, the CIMD fetcher over the
project's egress client), ``tokens`` (token generation, verification for the MCP server, cached),
``urls``.
"""
