// Runs a list of calls of an official SDK npm package (`openai`, `@anthropic-ai/sdk`) against a
// server and prints what each answered, as JSON, for a Python test to assert on
// (`run_sdk_steps` in tests/support/node_openai.py).
//
// stdin: {"package_dir": "<dir holding node_modules/<package>>",
//         "package": "@anthropic-ai/sdk", "export": "Anthropic",
//         "client": {<options of new Anthropic(...)>: baseURL, apiKey, maxRetries, ...},
//         "steps": [{"name": "ask", "op": "messages.create", "args": [...]}, ...]}
// A step calls `client.<op>(...args)`. Any string argument "$ref:<step>.<path>" is replaced by
// that part of an earlier step's answer ("$ref:ask.content.0.id"). A stream is read to its
// end: its answer is {"data": [every event]}, and with "final": "<method>" also
// {"final": <what the stream helper's method answered>} (`finalMessage`,
// `finalChatCompletion`: the SDK's own accumulation of the events). With "with_response": true
// a step answers {"body": <answer>, "headers": {<response headers, lower case>}}. A step with
// "expect_error": true answers {"error": {...}} instead of failing the run.
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

async function readAll(iterable, final) {
  const data = [];
  for await (const entry of iterable) data.push(entry);
  if (!final) return { data };
  if (typeof iterable[final] !== "function") throw new Error(`the stream has no ${final}()`);
  return { data, final: await iterable[final]() };
}

async function run(client, step, results) {
  const pending = method(client, step.op)(...resolveRefs(step.args ?? [], results));
  if (step.with_response) {
    const { data, response } = await pending.withResponse();
    const body = isAsyncIterable(data) ? await readAll(data, step.final) : data;
    return { body, headers: Object.fromEntries(response.headers.entries()) };
  }
  if (isAsyncIterable(pending)) return readAll(pending, step.final); // a stream helper
  const answer = await pending;
  return isAsyncIterable(answer) ? readAll(answer, step.final) : answer; // a raw stream
}

function describe(error) {
  return {
    class: error?.constructor?.name,
    status: error?.status,
    type: error?.type,
    message: error?.message,
    body: error?.error,
  };
}

const request = await readStdin();
const require = createRequire(join(request.package_dir, "package.json"));
const Client = require(request.package)[request.export];
const client = new Client(request.client);
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
