// Runs a list of calls of the official `openai` npm package against a server and prints what
// each answered, as JSON, for a Python test to assert on (tests/support/node_openai.py).
//
// stdin: {"package_dir": "<dir holding node_modules/openai>",
//         "client": {<options of new OpenAI(...)>: baseURL, apiKey, maxRetries, timeout},
//         "steps": [{"name": "create", "op": "conversations.create", "args": [...]}, ...]}
// A step calls `client.<op>(...args)`. Any string argument "$ref:<step>.<path>" is replaced by
// that part of an earlier step's answer ("$ref:add.data.0.id"). A list (a page promise) or a
// stream is read to its end: its answer is {"data": [every item or event]}; with
// "first_page": true a list answers its first page only ({"data", "has_more", "last_id"}). A
// step with "expect_error": true answers {"error": {...}} instead of failing the run.
// stdout: {"results": {"<step>": <answer>, ...}}; on an unexpected error, {"failed": {...}}
// and exit status 1.

import { createRequire } from "node:module";
import { join } from "node:path";

const REF_PREFIX = "$ref:";

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function lookUp(results, reference) {
  const [step, ...path] = reference.slice(REF_PREFIX.length).split(".");
  if (!(step in results)) throw new Error(`${reference}: no earlier step named ${step}`);
  return path.reduce((value, key) => {
    if (value === undefined || value === null) throw new Error(`${reference}: no ${key}`);
    return value[key];
  }, results[step]);
}

function resolveRefs(value, results) {
  if (typeof value === "string" && value.startsWith(REF_PREFIX)) return lookUp(results, value);
  if (Array.isArray(value)) return value.map((entry) => resolveRefs(entry, results));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value).map(([key, entry]) => [key, resolveRefs(entry, results)]),
    );
  }
  return value;
}

function method(client, op) {
  const path = op.split(".");
  const owner = path.slice(0, -1).reduce((object, key) => object?.[key], client);
  const fn = owner?.[path.at(-1)];
  if (typeof fn !== "function") throw new Error(`the client has no method ${op}`);
  return fn.bind(owner);
}

const isAsyncIterable = (value) =>
  value !== null && typeof value === "object" && Symbol.asyncIterator in value;

async function readAll(iterable) {
  const data = [];
  for await (const entry of iterable) data.push(entry);
  return { data };
}

async function run(client, step, results) {
  const pending = method(client, step.op)(...resolveRefs(step.args ?? [], results));
  if (step.first_page) {
    const page = await pending;
    return { data: page.data, has_more: page.has_more, last_id: page.last_id };
  }
  if (isAsyncIterable(pending)) return readAll(pending); // a list: every page
  const answer = await pending;
  return isAsyncIterable(answer) ? readAll(answer) : answer; // a stream: every event
}

function describe(error) {
  return {
    class: error?.constructor?.name,
    status: error?.status,
    type: error?.type,
    code: error?.code,
    param: error?.param,
    message: error?.message,
    body: error?.error,
  };
}

const request = await readStdin();
const require = createRequire(join(request.package_dir, "package.json"));
const { OpenAI } = require("openai");
const client = new OpenAI(request.client);
const results = {};
for (const step of request.steps) {
  try {
    results[step.name] = await run(client, step, results);
  } catch (error) {
    if (!step.expect_error) {
      process.stdout.write(JSON.stringify({ failed: { step: step.name, error: describe(error) } }));
      process.exit(1);
    }
    results[step.name] = { error: describe(error) };
  }
}
process.stdout.write(JSON.stringify({ results }));
