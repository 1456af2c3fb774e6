#!/usr/bin/env node
// Writes the OpenAPI document of the route table and protocol/openrpc.json (the kernel's rpc.discover,
// kept in the repo) to stdout: what the server serves at start, without starting one.
//   node examples/web/write-openapi.mjs > protocol/rest-openapi.json
// (Its own file: openapi.mjs cannot import server.mjs, which imports it.)
import { readFileSync } from 'node:fs';
import { openapiDocument } from './openapi.mjs';
import { routes } from './server.mjs';

const openrpc = JSON.parse(readFileSync(new URL('../../protocol/openrpc.json', import.meta.url), 'utf8'));
process.stdout.write(`${JSON.stringify(openapiDocument(routes, openrpc), null, 2)}\n`);
