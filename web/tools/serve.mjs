// A static file server for the demo and the browser tests (node built-ins only): `web/` at `/`
// and any other folders at the prefixes given. WebGPU needs a secure context, which
// `localhost` is. Usage: node web/tools/serve.mjs [--port N] [/prefix/=DIR ...]
//   node web/tools/serve.mjs /program/=target/web/minilm   then open http://localhost:8080/demo/minilm/

import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wgsl': 'text/plain; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.png': 'image/png',
};

export const WEB = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

/**
 * Serve `routes` (URL prefix -> folder; the longest prefix wins) on `port` (0: any free one).
 * Resolves to the server, listening on 127.0.0.1.
 */
export function serve(routes, port = 0) {
  const table = Object.entries(routes)
    .map(([prefix, dir]) => [prefix, path.resolve(dir)])
    .sort((a, b) => b[0].length - a[0].length);
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://localhost');
    let pathname;
    try {
      pathname = decodeURIComponent(url.pathname);
    } catch {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(`bad path: ${url.pathname}\n`);
      return;
    }
    if (pathname.endsWith('/')) pathname += 'index.html';
    const route = table.find(([prefix]) => pathname.startsWith(prefix));
    const file = route && path.resolve(route[1], '.' + pathname.slice(route[0].length - 1));
    // Never outside the folder a prefix names.
    if (!file || !(file === route[1] || file.startsWith(route[1] + path.sep)) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end(`not found: ${url.pathname}\n`);
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream', 'cache-control': 'no-store' });
    fs.createReadStream(file)
      .on('error', (e) => res.destroy(e))
      .pipe(res);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  let port = 8080;
  const routes = { '/': WEB };
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--port') port = Number(args[++i]);
    else if (args[i].includes('=')) {
      const [prefix, dir] = args[i].split('=');
      routes[prefix.endsWith('/') ? prefix : prefix + '/'] = dir;
    } else {
      console.error(`serve: unknown argument ${args[i]}`);
      process.exit(1);
    }
  }
  const server = await serve(routes, port);
  console.log(`serving ${Object.entries(routes).map(([p, d]) => `${p} -> ${d}`).join(', ')} at http://localhost:${server.address().port}/`);
}
