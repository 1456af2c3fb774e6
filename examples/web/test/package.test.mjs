// The Node client as a package: `npm pack` makes a tarball another app installs with no registry, and
// the example server runs from such an app with `import ... from 'healthkernel'`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { binary, env, root, temporaryDirectory, token } from '../../../clients/node/test/support.mjs';

test('npm pack: the client installs into another app, and the example server runs from there', async (t) => {
  const dir = temporaryDirectory(t);
  const npm = (args, cwd) => execFileSync('npm', [...args, '--offline', '--no-audit', '--no-fund', '--loglevel=error'],
    { cwd, env: { ...process.env, npm_config_cache: join(dir, 'npm-cache') } }).toString();
  const packed = JSON.parse(npm(['pack', join(root, 'clients/node'), '--pack-destination', dir, '--json'], dir))[0];
  const version = JSON.parse(readFileSync(join(root, 'clients/node/package.json'), 'utf8')).version;
  assert.equal(packed.version, version);
  assert.deepEqual(packed.files.map((f) => f.path).sort(), ['LICENSE', 'README.md', 'index.d.ts', 'index.mjs', 'package.json'],
    'only the client, its types and documents: no tests or scripts');

  const app = join(dir, 'app');
  execFileSync('mkdir', [app]);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'an-app', private: true, type: 'module' }));
  npm(['install', join(dir, packed.filename)], app);
  const manifest = JSON.parse(readFileSync(join(app, 'package.json'), 'utf8'));
  assert.match(manifest.dependencies.healthkernel, /^file:.*healthkernel-.*\.tgz$/);
  const installed = JSON.parse(readFileSync(join(app, 'node_modules/healthkernel/package.json'), 'utf8'));
  assert.equal(installed.license, 'Apache-2.0');

  // The example server, copied into the app, importing the package by name.
  const server = readFileSync(join(root, 'examples/web/server.mjs'), 'utf8');
  assert.ok(server.includes("from '../../clients/node/index.mjs'"));
  writeFileSync(join(app, 'server.mjs'), server.replace("from '../../clients/node/index.mjs'", "from 'healthkernel'"));
  for (const file of ['dashboard.html', 'demo.mjs', 'openapi.mjs']) copyFileSync(join(root, 'examples/web', file), join(app, file));
  const child = spawn(process.execPath, ['server.mjs'], {
    cwd: app, stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...env, PORT: '0', DATA_DIR: join(dir, 'data'), HEALTHKERNEL_BIN: binary, SERVICE_TOKEN: token({ role: 'service_role' }) },
  });
  t.after(() => child.kill('SIGKILL'));
  let stderr = '';
  const listening = new Promise((resolve, reject) => {
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
      const url = stderr.match(/listening on (http:\/\/\S+)/)?.[1];
      if (url) resolve(url);
    });
    child.on('exit', (code) => reject(new Error(`server exited ${code}: ${stderr}`)));
  });
  const url = await listening;
  const health = await (await fetch(`${url}/healthz`)).json();
  assert.equal(health.ok, true);
  assert.equal(health.version, version);
  child.kill('SIGTERM');
  const [code] = await once(child, 'exit');
  assert.equal(code, 0, stderr);
});
