// The OpenAPI 3.1 document of the example server's REST routes, made from its route table (server.mjs
// `routes`) and the kernel's own OpenRPC document (protocol/openrpc.json): a route that forwards to a
// kernel method (`rpc`) takes its body from the method's params (renamed by the route's `fields`, less
// what the server sets itself) and its answer from the method's result; a route that shapes its own
// answer says so in `request` / `response`. Nothing here describes a route by hand.

/** The error body every route answers with on failure (server.mjs `errorReply`). */
export const errorSchema = {
  type: 'object',
  required: ['error'],
  properties: {
    error: { type: 'string', description: 'what went wrong, in words' },
    reason: { type: 'string', description: "the kernel's machine-readable reason (data.reason)" },
    field: { type: 'string', description: 'the body member or query parameter concerned' },
    retryAfterMs: { type: 'integer', minimum: 0 },
  },
};

const statusWords = {
  200: 'OK', 201: 'Created', 400: 'Bad request: `field` names the member', 401: 'Missing, expired or revoked token', 403: 'Forbidden',
  404: 'Not found', 409: 'Conflict', 413: 'Body too large', 415: 'The body must be JSON', 422: 'Refused (a token or signature that does not verify)',
  429: 'Too many requests: `retryAfterMs`', 503: 'Storage unavailable: nothing was stored, retry later',
};

/** A JSON Schema object for a method's params, less `omit`, each renamed by `names` (kernel name -> route name). */
function paramsSchema(method, omit, names = {}) {
  const properties = {};
  const required = [];
  for (const p of method.params) {
    if (omit.includes(p.name)) continue;
    const name = Object.hasOwn(names, p.name) ? names[p.name] : p.name;
    properties[name] = p.description && !p.schema.description ? { ...p.schema, description: p.description } : p.schema;
    if (p.required) required.push(name);
  }
  return { type: 'object', additionalProperties: false, properties, ...(required.length ? { required } : {}) };
}

/** The statuses a route may answer besides its success, from its token kind and whether it has a body. */
function failures(route) {
  const codes = [400, 429, 503];
  if (route.auth === 'user' || route.auth === 'service') codes.push(401, 403);
  // A kernel method may refuse a token or credential in its params, find nothing, or meet a conflict.
  if (route.rpc) codes.push(401, 404, 409, 422);
  if (route.body) codes.push(413, 415);
  return [...new Set(codes)].sort();
}

/** A name a generated client calls the route by: the route's own, else its kernel method's
 *  (`screentime.upload` -> `screentimeUpload`), else its method and path (`GET /healthz` -> `getHealthz`). */
function operationId(route) {
  const camel = (s) => s.replace(/[^A-Za-z0-9]+(.)?/g, (_, c) => (c ?? '').toUpperCase());
  return route.operationId ?? (route.rpc ? camel(route.rpc) : `${route.method.toLowerCase()}${camel(route.path)}`);
}

/** One operation; `schemas` collects the components its routes name (`schema`: a result several routes share,
 *  which a generated client then knows as one type). */
function operation(route, methods, schemas) {
  const method = route.rpc ? methods.get(route.rpc) : undefined;
  if (route.rpc && !method) throw new Error(`${route.method} ${route.path}: no kernel method ${route.rpc}`);
  const op = {
    operationId: operationId(route),
    summary: route.summary ?? method?.summary ?? '',
    ...(route.rpc ? { 'x-kernel-method': route.rpc } : {}),
  };
  if (route.auth === 'user' || route.auth === 'service') op.security = [{ bearer: [] }];
  else if (route.rpc && method.params.some((p) => p.name === 'auth')) op.security = [{}, { bearer: [] }];
  else op.security = [];
  if (route.query) {
    op.parameters = route.query.names.map((name) => {
      const p = method.params.find((x) => x.name === name);
      const schema = p.schema;
      return { name, in: 'query', required: false, schema, ...(p.schema.type === 'array' ? { style: 'form', explode: false } : {}),
               ...(p.description ? { description: p.description } : {}) };
    });
  }
  if (route.body) {
    const schema = route.request ?? (method ? paramsSchema(method, ['auth', ...(route.serverSets ?? [])], route.fields) : { type: 'object' });
    op.requestBody = { required: route.body === true, content: { 'application/json': { schema } } };
  }
  const status = String(route.status ?? 200);
  if (route.parameters) op.parameters = route.parameters;
  const content = route.html
    ? { [route.html === true ? 'text/html' : route.html]: { schema: { type: 'string' } } }
    : { 'application/json': { schema: component(schemas, route.schema, route.response ?? method?.result.schema ?? { type: 'object' }) } };
  op.responses = { [status]: { description: statusWords[status] ?? 'OK', content } };
  for (const code of failures(route)) {
    op.responses[String(code)] = { description: statusWords[code], content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorReply' } } } };
  }
  op.responses.default = { description: 'Any other failure', content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorReply' } } } };
  return op;
}

/**
 * `schema` with a `type` beside every `enum` and `const` whose values share one (JSON Schema lets it be
 * left out, as the kernel's OpenRPC document does; code generators such as swift-openapi-generator need it
 * to make a Swift enum or string rather than an untyped value).
 */
export function typed(schema) {
  if (Array.isArray(schema)) return schema.map(typed);
  if (schema === null || typeof schema !== 'object') return schema;
  const out = {};
  for (const [key, value] of Object.entries(schema)) out[key] = key === 'enum' || key === 'const' || key === 'default' ? value : typed(value);
  const values = out.enum ?? (Object.hasOwn(out, 'const') ? [out.const] : null);
  if (values && out.type === undefined) {
    const kinds = new Set(values.map((v) => (v === null ? 'null' : Number.isInteger(v) ? 'integer' : typeof v)));
    if (kinds.size === 1 && ['string', 'integer', 'boolean'].includes([...kinds][0])) out.type = [...kinds][0];
  }
  return out;
}

/** `schema` as a component named `name` (none: as it is); one name never stands for two shapes. */
function component(schemas, name, schema) {
  if (!name) return schema;
  if (schemas[name] && JSON.stringify(schemas[name]) !== JSON.stringify(schema)) throw new Error(`schema ${name} has two shapes`);
  schemas[name] = schema;
  return { $ref: `#/components/schemas/${name}` };
}

/** `value` with every schema equal to a named component replaced by a reference to it (a route whose
 *  answer is one of several shapes, such as sign-up's, then names the shared one as the others do). */
function referenced(value, named, top = true) {
  if (Array.isArray(value)) return value.map((v) => referenced(v, named, false));
  if (value === null || typeof value !== 'object') return value;
  const name = top ? undefined : named.get(JSON.stringify(value));
  if (name) return { $ref: `#/components/schemas/${name}` };
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, referenced(v, named, false)]));
}

/** The document for `routes`, given the kernel's OpenRPC document. Deterministic: the same input, the same bytes. */
export function openapiDocument(routes, openrpc) {
  const methods = new Map(openrpc.methods.map((m) => [m.name, m]));
  const paths = {};
  const ids = new Set();
  const schemas = { ErrorReply: errorSchema };
  for (const route of routes) {
    if (route.undocumented) continue;
    paths[route.path] ??= {};
    const op = operation(route, methods, schemas);
    // Generated clients name a function per operation: two of one name would not compile.
    if (ids.has(op.operationId)) throw new Error(`${route.method} ${route.path}: operationId ${op.operationId} is taken`);
    ids.add(op.operationId);
    paths[route.path][route.method.toLowerCase()] = op;
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'healthkernel example server',
      version: openrpc.info.version,
      description: 'The REST routes of an app backend (examples/web/server.mjs), each forwarded to a healthkernel method '
        + '(x-kernel-method). Errors answer {error, reason, field}; see protocol/rest-routes.md.',
    },
    paths: referenced(typed(paths), new Map(Object.entries(schemas).map(([name, schema]) => [JSON.stringify(typed(schema)), name]))),
    components: {
      schemas: typed(schemas),
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'an access token from /api/auth/signin, signup, refresh or exchange' } },
    },
  };
}

