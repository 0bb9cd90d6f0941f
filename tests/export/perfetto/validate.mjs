// Validates Trace Event Format JSON files against trace_event.schema.json with ajv (installed by
// `npm ci` from this folder's package-lock.json, which pins every package's sha512).
// Usage: node validate.mjs FILE...   Exit 0: all valid; 1: one is not (its first errors printed);
// 2: usage or an unreadable file.
import {readFileSync} from 'node:fs';
import {dirname, join} from 'node:path';
import {fileURLToPath} from 'node:url';
import {createRequire} from 'node:module';

// ajv from the node_modules that `npm ci` made, wherever the test put it (NODE_PATH), or beside us.
const require = createRequire(join(process.env.VRAMTRACE_AJV_DIR || dirname(fileURLToPath(import.meta.url)), 'x.js'));
const Ajv = require('ajv');

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error('usage: node validate.mjs FILE...');
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const schema = JSON.parse(readFileSync(join(here, 'trace_event.schema.json'), 'utf8'));
// strictRequired off: the branches of allOf require properties that the event's own "properties" define;
// union types: the format allows a string or a number for ids.
const ajv = new Ajv({allErrors: true, strict: true, strictRequired: false, allowUnionTypes: true});
const validate = ajv.compile(schema);
let bad = 0;
for (const f of files) {
  let doc;
  try {
    doc = JSON.parse(readFileSync(f, 'utf8'));
  } catch (e) {
    console.error(`${f}: not JSON: ${e.message}`);
    process.exit(2);
  }
  if (validate(doc)) {
    console.log(`valid: ${f} (${doc.traceEvents.length} events)`);
  } else {
    ++bad;
    console.log(`INVALID: ${f}`);
    for (const e of validate.errors.slice(0, 10)) console.log(`  ${e.instancePath || '/'}: ${e.message} ${JSON.stringify(e.params)}`);
  }
}
process.exit(bad ? 1 : 0);
