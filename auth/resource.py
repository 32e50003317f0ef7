"""This server as an OAuth 2.1 protected resource, as the MCP authorization spec asks of a
remote MCP server: its metadata document (RFC 9728) names the identity providers that issue
tokens for it, and every 401 says where that document is (`WWW-Authenticate`, RFC 6750 and
RFC 9728 section 5.1), so a client that holds no token can discover how to get one. Tokens
are accepted only with this server's own URL as their audience (RFC 8707), and a client's
token is never passed on to anything else.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from auth.config import IdentityConfig

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def metadata_path(resource: str) -> str:
    """Where RFC 9728 puts the metadata of `resource`: the well-known prefix before its path
    (`https://h/mcp` -> `/.well-known/oauth-protected-resource/mcp`)."""
    path = urlsplit(resource).path.rstrip("/")
    return WELL_KNOWN + path


def metadata_url(resource: str) -> str:
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{metadata_path(resource)}"


def protected_resource_metadata(identity: IdentityConfig) -> dict | None:
    """The RFC 9728 document, or None when the identity file names no resource."""
    if identity.resource is None:
        return None
    return {"resource": identity.resource, "authorization_servers": [i.issuer for i in identity.issuers],
            "scopes_supported": list(identity.scopes_supported), "bearer_methods_supported": ["header"],
            "resource_name": "Quarry"}


def challenge(identity: IdentityConfig | None, reason: str | None = None) -> str:
    """The `WWW-Authenticate` value of a 401: the scheme, the metadata's URL when there is one,
    and `invalid_token` with the reason class when a token was refused (never its content)."""
    parts = []
    if identity is not None and identity.resource is not None:
        parts.append(f'resource_metadata="{metadata_url(identity.resource)}"')
    if reason is not None:
        parts.append('error="invalid_token"')
        parts.append(f'error_description="{reason}"')
    return "Bearer" + (" " + ", ".join(parts) if parts else "")
