// Drives headless Chromium over --remote-debugging-pipe (the DevTools protocol as NUL-terminated JSON on
// fds 3 and 4), with Node built-ins only.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The Chromium binary: $CHROMIUM, else the first of Debian's names on PATH; null when none is installed. */
export function findChromium() {
  if (process.env.CHROMIUM) return process.env.CHROMIUM;
  for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
    try {
      return execFileSync('sh', ['-c', `command -v ${name}`]).toString().trim();
    } catch {}
  }
  return null;
}

export class Browser {
  #child;
  #profile;
  #nextId = 1;
  #calls = new Map();
  #buffer = '';
  /** Console messages and uncaught exceptions of every page, as text. */
  messages = [];
  /** The URL of every request any page made (what a server's access log would record). */
  requests = [];

  static async launch(path = findChromium()) {
    const browser = new Browser();
    browser.#profile = mkdtempSync(join(tmpdir(), 'hk-chromium-'));
    browser.#child = spawn(path, [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
      '--no-default-browser-check', '--remote-debugging-pipe', `--user-data-dir=${browser.#profile}`, 'about:blank',
    ], { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'], detached: true });
    // Its own process group so close() can reach the helpers too; never outlive the test process.
    const killGroup = () => browser.#killGroup();
    process.once('exit', killGroup);
    browser.#child.once('exit', () => process.off('exit', killGroup));
    browser.#child.stderr.resume();
    browser.#child.stdio[4].setEncoding('utf8');
    browser.#child.stdio[4].on('data', (chunk) => browser.#read(chunk));
    browser.#child.on('exit', () => {
      for (const { reject } of browser.#calls.values()) reject(new Error('chromium exited'));
      browser.#calls.clear();
    });
    await browser.send('Browser.getVersion');
    return browser;
  }

  /** Sends a DevTools command (to a page when `sessionId` is given) and resolves with its result. */
  send(method, params = {}, sessionId) {
    const id = this.#nextId++;
    const message = JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) });
    return new Promise((resolve, reject) => {
      this.#calls.set(id, { resolve, reject, method });
      this.#child.stdio[3].write(message + '\0');
    });
  }

  #read(chunk) {
    this.#buffer += chunk;
    let end;
    while ((end = this.#buffer.indexOf('\0')) >= 0) {
      const message = JSON.parse(this.#buffer.slice(0, end));
      this.#buffer = this.#buffer.slice(end + 1);
      if (message.id !== undefined) {
        const call = this.#calls.get(message.id);
        this.#calls.delete(message.id);
        if (!call) continue;
        if (message.error) call.reject(new Error(`${call.method}: ${message.error.message}`));
        else call.resolve(message.result);
      } else if (message.method === 'Network.requestWillBeSent') {
        this.requests.push(message.params.request.url);
      } else if (message.method === 'Runtime.consoleAPICalled') {
        this.messages.push(`console.${message.params.type}: ${message.params.args.map((a) => a.value ?? a.description).join(' ')}`);
      } else if (message.method === 'Runtime.exceptionThrown') {
        const d = message.params.exceptionDetails;
        this.messages.push(`exception: ${d.exception?.description ?? d.text}`);
      }
    }
  }

  /** Opens `url` in a new tab (`width` px wide, 1280 by default); resolves with a page handle once it has loaded. */
  async open(url, { width = 1280, mobile = false } = {}) {
    const { targetId } = await this.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await this.send('Target.attachToTarget', { targetId, flatten: true });
    await this.send('Runtime.enable', {}, sessionId);
    await this.send('Page.enable', {}, sessionId);
    await this.send('Network.enable', {}, sessionId);
    await this.send('Emulation.setDeviceMetricsOverride', { width, height: 900, deviceScaleFactor: 1, mobile }, sessionId);
    await this.send('Page.navigate', { url }, sessionId);
    const page = {
      /** The value of a JavaScript expression in the page (awaited when it is a promise). */
      evaluate: async (expression) => {
        const { result, exceptionDetails } = await this.send('Runtime.evaluate',
          { expression, awaitPromise: true, returnByValue: true }, sessionId);
        if (exceptionDetails) throw new Error(`page: ${exceptionDetails.exception?.description ?? exceptionDetails.text}`);
        return result.value;
      },
      /** Polls `expression` until it is truthy; rejects after `ms` with the page's console output. */
      waitFor: async (expression, ms = 15_000) => {
        const deadline = Date.now() + ms;
        for (;;) {
          const value = await page.evaluate(expression).catch(() => undefined);
          if (value) return value;
          if (Date.now() > deadline) throw new Error(`timed out waiting for ${expression}; page said: ${this.messages.join(' / ')}`);
          await new Promise((r) => setTimeout(r, 50));
        }
      },
      /** A PNG of the whole page. */
      screenshot: async () => Buffer.from((await this.send('Page.captureScreenshot', { format: 'png', captureBeyondViewport: true }, sessionId)).data, 'base64'),
    };
    await page.waitFor('document.readyState === "complete"');
    return page;
  }

  #killGroup() {
    try { process.kill(-this.#child.pid, 'SIGKILL'); } catch {}
  }

  /** Asks Chromium to quit, kills its whole process group if it lingers, then removes the profile. */
  async close() {
    const exited = new Promise((r) => (this.#child.exitCode !== null || this.#child.signalCode ? r() : this.#child.once('exit', r)));
    await Promise.race([this.send('Browser.close').catch(() => {}), new Promise((r) => setTimeout(r, 2_000))]);
    const timer = setTimeout(() => this.#killGroup(), 5_000);
    await exited;
    clearTimeout(timer);
    // Chromium's helper processes (crashpad, zygote) can still be writing into the profile for a moment
    // after the browser exits; kill the group, then retry the removal instead of failing the test over it.
    this.#killGroup();
    rmSync(this.#profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  }
}
