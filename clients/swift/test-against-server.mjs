#!/usr/bin/env node
// Runs this package's tests (`swift test`) against a fresh example server (examples/web/server.mjs) and the
// kernel binary HEALTHKERNEL_BIN (else the repo's debug build): the server is told where its kernel's
// config trusts a Google key made here and, when this machine has shared/testdata, Apple's test CA, and
// the tests get a Google id token and a StoreKit 2 transaction signed by those.
//   node clients/swift/test-against-server.mjs [swift test arguments...]
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { start } from '../../examples/web/server.mjs';
import { fixtures } from '../../examples/web/test/support.mjs';
import { binary, env, token } from '../node/test/support.mjs';

const dir = mkdtempSync(join(tmpdir(), 'hk-swift-client-'));
const f = fixtures(dir);
const server = await start({
  port: 0, dataDir: join(dir, 'data'), binary, serviceToken: token({ role: 'service_role' }),
  env: { ...env, HEALTHKERNEL_CONFIG: f.configPath }, log: () => {},
  // Every test signs up from one address: the per-address limit of routes without a token is lifted.
  limits: { UNAUTHENTICATED_PER_MINUTE: 1_000_000, UNAUTHENTICATED_BURST: 1_000_000 },
});
// A second server whose kernel requires a verified email before sign-in (auth.requireEmailVerification).
const verifyingConfig = join(dir, 'verifying.json');
writeFileSync(verifyingConfig, JSON.stringify({ auth: { requireEmailVerification: true } }));
const verifying = await start({
  port: 0, dataDir: join(dir, 'verifying-data'), binary, serviceToken: token({ role: 'service_role' }),
  env: { ...env, HEALTHKERNEL_CONFIG: verifyingConfig }, log: () => {}, onMail: () => {},
  limits: { UNAUTHENTICATED_PER_MINUTE: 1_000_000, UNAUTHENTICATED_BURST: 1_000_000 },
});
const now = Date.now();
const transaction = f.apple?.({
  transactionId: '2000000000000101', originalTransactionId: '2000000000000101', bundleId: 'com.example', productId: 'premium',
  purchaseDate: now - 86_400_000, originalPurchaseDate: now - 86_400_000, expiresDate: now + 29 * 86_400_000, quantity: 1,
  type: 'Auto-Renewable Subscription', inAppOwnershipType: 'PURCHASED', signedDate: now - 86_400_000, environment: 'Sandbox',
  transactionReason: 'PURCHASE', storefront: 'USA',
});
const testEnv = {
  ...process.env,
  HK_SERVER_URL: server.url,
  HK_VERIFYING_SERVER_URL: verifying.url,
  HK_GOOGLE_ID_TOKEN: f.googleToken({ sub: `google-${randomUUID()}`, email: 'swift-client@example.com', email_verified: true }),
  ...(transaction ? { HK_SIGNED_TRANSACTION: transaction } : {}),
};
if (!transaction) process.stderr.write('clients/swift: shared/testdata/appstore is not on this machine: the signed-purchase test is skipped\n');
const swift = spawn('swift', ['test', ...process.argv.slice(2)], { cwd: fileURLToPath(new URL('.', import.meta.url)), env: testEnv, stdio: 'inherit' });
const [code] = await new Promise((resolve) => swift.on('exit', (...a) => resolve(a)));
await Promise.all([server.close(), verifying.close()]);
rmSync(dir, { recursive: true, force: true });
process.exit(code ?? 1);
