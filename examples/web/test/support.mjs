// Shared by the example server's tests.

/** A JSON request to `server`: {status, body (parsed), headers}. `raw` sends a body as it is. */
export function requester(server) {
  return async (method, path, { body, auth, raw, headers = {} } = {}) => {
    const res = await fetch(server.url + path, {
      method,
      headers: { ...(auth ? { authorization: `Bearer ${auth}` } : {}), ...(body !== undefined || raw !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
      body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
  };
}
