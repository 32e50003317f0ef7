// An OpenID Connect provider for Quarry's tests: panva's oidc-provider (OpenID-certified), run on
// 127.0.0.1 with the users, clients, resources and signing keys of a JSON file that the test writes
// (tests/idp_provider.py). oidc-provider leaves the login and consent pages to the deployer; the
// ones below are as small as a test needs: a password form, and consent given to whatever the
// client asked (the tests' users always agree; the service under test decides what they may do).
//
//   node tests/idp/provider.mjs CONFIG.json     prints "READY <issuer>" once it listens, and stops
//                                               on SIGTERM, SIGINT or the end of its stdin
//
// CONFIG.json: {issuer, port, jwks: {keys: [private JWKs, the first signs]},
//   users: {id: {password, groups: [...], email?}},
//   clients: [oidc-provider client metadata, each may add groups: [...] for its own tokens],
//   resources: [{indicator, scope}], access_token_ttl}

import { randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

import { Provider, errors } from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const users = config.users;
const resources = new Map(config.resources.map((r) => [r.indicator, r.scope]));
const signingKid = config.jwks.keys[0].kid;
// The provider lists its resources' scopes as its own (scopes_supported), as a provider that
// serves a resource server does: an MCP client names the scopes it will ask for when it
// registers (RFC 7591 `scope`, taken from the resource's metadata), and oidc-provider refuses a
// registration naming a scope it does not list.
const resourceScopes = [...new Set(config.resources.flatMap((r) => r.scope.split(' ')))];

// A client's own groups travel beside its metadata, not in it: oidc-provider would reject an
// unknown property, and a client that registers itself must not be able to claim any.
const clientGroups = new Map();
const clients = config.clients.map(({ groups, ...metadata }) => {
  if (groups) clientGroups.set(metadata.client_id, groups);
  return metadata;
});

const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function sameSecret(given, expected) {
  const a = Buffer.from(String(given));
  const b = Buffer.from(String(expected));
  return a.length === b.length && timingSafeEqual(a, b);
}

const provider = new Provider(config.issuer, {
  clients,
  jwks: config.jwks,
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  claims: { openid: ['sub'], email: ['email', 'email_verified'] },
  scopes: ['openid', 'offline_access', ...resourceScopes],
  async findAccount(ctx, id) {
    const user = users[id];
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        return user.email ? { sub: id, email: user.email, email_verified: true } : { sub: id };
      },
    };
  },
  // Groups (and the granted scope, which oidc-provider adds itself) in every JWT access token:
  // a user's from the user list, an app's from its client entry.
  async extraTokenClaims(ctx, token) {
    if (token.accountId) return { groups: users[token.accountId]?.groups ?? [] };
    const groups = clientGroups.get(token.clientId);
    return groups ? { groups } : undefined;
  },
  ttl: {
    AccessToken: config.access_token_ttl,
    ClientCredentials: config.access_token_ttl,
    IdToken: config.access_token_ttl,
    Interaction: 600,
    Grant: 3600,
    Session: 3600,
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    registration: { enabled: true, initialAccessToken: false },
    resourceIndicators: {
      enabled: true,
      // A client that names its resource at the authorization endpoint only (as an MCP client
      // may) still gets a token for it, not one for the userinfo endpoint.
      async useGrantedResource() {
        return true;
      },
      async getResourceServerInfo(ctx, indicator) {
        if (!resources.has(indicator)) throw new errors.InvalidTarget(`unknown resource ${indicator}`);
        return {
          scope: resources.get(indicator),
          accessTokenTTL: config.access_token_ttl,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256', kid: signingKid } },
        };
      },
    },
  },
});

provider.on('server_error', (ctx, err) => console.error(`server_error ${ctx.method} ${ctx.path}: ${err.message}`));

function page(res, status, title, body) {
  res.statusCode = status;
  res.setHeader('Content-Type', 'text/html; charset=utf-8');
  res.setHeader('Cache-Control', 'no-store');
  res.end(`<!DOCTYPE html><html><head><title>${escapeHtml(title)}</title></head><body>`
    + `<h1>${escapeHtml(title)}</h1>${body}</body></html>`);
}

function loginForm(uid, clientId, note = '') {
  return `${note ? `<p>${escapeHtml(note)}</p>` : ''}<p>Client ${escapeHtml(clientId)} asks you to sign in.</p>`
    + `<form method="post" action="/interaction/${escapeHtml(uid)}">`
    + '<label>Login <input name="login" autocomplete="username"></label>'
    + '<label>Password <input name="password" type="password" autocomplete="current-password"></label>'
    + '<button type="submit">Sign in</button></form>';
}

async function formBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 64 * 1024) throw new Error('form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

// Consent: grant every OIDC scope, claim and resource scope the request asked for and the
// provider found missing (prompt.details), then go back to the authorization endpoint.
async function consent(req, res, details) {
  const { prompt, params, session, grantId } = details;
  const grant = grantId
    ? await provider.Grant.find(grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
  if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const saved = await grant.save();
  const result = grantId ? { consent: {} } : { consent: { grantId: saved } };
  await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: true });
}

async function interaction(req, res, uid) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params } = details;
  if (prompt.name === 'consent') return consent(req, res, details);
  if (prompt.name !== 'login') return page(res, 400, 'Unsupported interaction', `<p>${escapeHtml(prompt.name)}</p>`);
  if (req.method === 'GET') return page(res, 200, 'Sign in', loginForm(uid, params.client_id));
  if (req.method !== 'POST') return page(res, 405, 'Method not allowed', '');

  const form = await formBody(req);
  const login = form.get('login') ?? '';
  const user = Object.hasOwn(users, login) ? users[login] : undefined;
  if (!user || !sameSecret(form.get('password') ?? '', user.password)) {
    return page(res, 401, 'Sign in', loginForm(uid, params.client_id, 'Wrong login or password.'));
  }
  return provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
}

const handleProvider = provider.callback();
const server = createServer((req, res) => {
  const match = /^\/interaction\/([\w-]+)$/.exec(new URL(req.url, config.issuer).pathname);
  if (!match) return handleProvider(req, res);
  return interaction(req, res, match[1]).catch((err) => {
    // SessionNotFound and friends: an expired or unknown interaction, a missing cookie.
    const status = err instanceof errors.OIDCProviderError ? err.status : 500;
    if (status >= 500) console.error(`interaction error: ${err.message}`);
    if (!res.headersSent) page(res, status, 'Interaction failed', `<p>${escapeHtml(err.error_description ?? err.message)}</p>`);
    else res.end();
  });
});

// oidc-provider checks a static client's metadata when the client is first used; check them all
// now, so a wrong entry in the test's configuration stops the start rather than one test later.
for (const { client_id: id } of clients) {
  try {
    await provider.Client.find(id);
  } catch (err) {
    console.error(`client ${id}: ${err.error_description ?? err.message}`);
    process.exit(1);
  }
}

server.listen(config.port, '127.0.0.1', () => console.log(`READY ${config.issuer}`));

const stop = () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
// The test holds stdin open: when its process ends, however it ends, this one ends too.
process.stdin.on('end', stop);
process.stdin.resume();
