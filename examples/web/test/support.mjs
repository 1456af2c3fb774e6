// Shared by the example server's tests (and clients/swift's test run, which starts the server with `fixtures`).
import { generateKeyPairSync, sign } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { root } from '../../../clients/node/test/support.mjs';

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

const b64url = (value) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');

/** Apple's published App Store test CA (shared/testdata), when this machine has it. */
const appleTestMaterial = [join(root, '../shared/testdata/appstore/apple-lib-test-material.json'), '/work/shared/testdata/appstore/apple-lib-test-material.json']
  .find((p) => existsSync(p));

/**
 * A kernel config in `dir` trusting a Google key made here and, when this machine has it, Apple's test CA:
 * {configPath, googleToken(claims), apple(payload) or null}, the two signing a token or transaction they trust.
 */
export function fixtures(dir) {
  const google = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const jwk = { ...google.publicKey.export({ format: 'jwk' }), kid: 'test-key', alg: 'ES256', use: 'sig' };
  writeFileSync(join(dir, 'google-jwks.json'), JSON.stringify({ keys: [jwk] }));
  const config = { auth: { providers: { google: { jwks: join(dir, 'google-jwks.json'), audiences: ['test-client.apps.googleusercontent.com'] } } } };
  let apple = null;
  if (appleTestMaterial) {
    const material = JSON.parse(readFileSync(appleTestMaterial, 'utf8'));
    const pem = `-----BEGIN CERTIFICATE-----\n${material.certs.root.match(/.{1,64}/g).join('\n')}\n-----END CERTIFICATE-----\n`;
    writeFileSync(join(dir, 'apple-test-root.pem'), pem);
    config.appStore = { bundleId: 'com.example', environments: ['Sandbox'], rootCertificates: [join(dir, 'apple-test-root.pem')] };
    apple = (payload) => {
      const input = `${b64url({ alg: 'ES256', x5c: [material.certs.leaf, material.certs.intermediate, material.certs.root] })}.${b64url(payload)}`;
      return `${input}.${sign('sha256', Buffer.from(input), { key: material.testKeys.leafEcPrivateKeyPem, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`;
    };
  }
  writeFileSync(join(dir, 'healthkernel.json'), JSON.stringify(config));
  const googleToken = (claims) => {
    const now = Math.floor(Date.now() / 1000);
    const payload = { iss: 'https://accounts.google.com', aud: 'test-client.apps.googleusercontent.com', iat: now, exp: now + 600, ...claims };
    const input = `${b64url({ alg: 'ES256', kid: 'test-key', typ: 'JWT' })}.${b64url(payload)}`;
    return `${input}.${sign('sha256', Buffer.from(input), { key: google.privateKey, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`;
  };
  return { configPath: join(dir, 'healthkernel.json'), googleToken, apple };
}
