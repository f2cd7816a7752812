// The static server of the demo and the browser tests: files under each prefix, nothing
// outside them, and a bad request answered, not a crash.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { WEB, serve } from '../tools/serve.mjs';

const get = (port, path) =>
  new Promise((resolve, reject) => {
    // Raw paths: the client must not normalise `..` away before the server sees it.
    const req = http.request({ host: '127.0.0.1', port, path, method: 'GET' }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, type: res.headers['content-type'], body }));
    });
    req.on('error', reject);
    req.end();
  });

test('files under their prefix, and nothing outside it', async () => {
  const server = await serve({ '/': WEB, '/fixtures/': new URL('../../fixtures/minilm/', import.meta.url).pathname });
  const { port } = server.address();
  try {
    const page = await get(port, '/demo/minilm/');
    assert.equal(page.status, 200);
    assert.match(page.type, /text\/html/);
    assert.equal((await get(port, '/fixtures/tokens.json')).status, 200);
    for (const bad of ['/../Cargo.toml', '/fixtures/../../Cargo.toml', '/fixtures/%2e%2e/%2e%2e/Cargo.toml', '/fixtures/..%2f..%2fCargo.toml', '/no/such/file']) {
      assert.equal((await get(port, bad)).status, 404, bad);
    }
    assert.equal((await get(port, '/%')).status, 400);
    // Still serving after the bad requests.
    assert.equal((await get(port, '/demo/minilm/demo.js')).status, 200);
  } finally {
    server.close();
  }
});
