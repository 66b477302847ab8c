// @ts-check
// Batching against a real Tollgate: concurrent checks travel together,
// each caller still gets its own decision, error and fail mode, and a lone
// caller is sent as without batching.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { APIError, Client, UnavailableError } from "../dist/index.js";
import { env, newPolicy } from "./support.js";

/** A fetch that counts the requests made to each path. */
function countingFetch() {
  /** @type {Map<string, number>} */
  const paths = new Map();
  /** @type {typeof fetch} */
  const f = (input, init) => {
    const path = new URL(input instanceof Request ? input.url : String(input)).pathname;
    paths.set(path, (paths.get(path) ?? 0) + 1);
    return globalThis.fetch(input, init);
  };
  return { fetch: f, paths, total: () => [...paths.values()].reduce((a, b) => a + b, 0) };
}

describe("batching", () => {
  test("concurrent checks travel in few requests, each admitted exactly, a mistake its caller's alone", async () => {
    const policy = await newPolicy("batch", { limit: 5, window: "1h" });
    const counted = countingFetch();
    const c = new Client({
      url: env.url,
      key: env.key,
      timeoutMs: 5000,
      fetch: counted.fetch,
      batching: { maxDelayMs: 2, maxChecks: 64 },
    });
    const users = 8;
    const each = 20;
    /** @type {Promise<void>[]} */
    const calls = [];
    const allowed = new Array(users).fill(0);
    let mistakes = 0;
    for (let u = 0; u < users; u++) {
      for (let n = 0; n < each; n++) {
        const item = { policy, subject: `user-${u}` };
        calls.push(
          (async () => {
            if (n === 7) {
              // A mistake of this caller's alone.
              await assert.rejects(c.check({ policy: "no-such-policy", subject: "x" }), (err) => {
                assert.ok(err instanceof APIError, String(err));
                assert.equal(err.status, 400);
                assert.equal(err.problem.field, "items[0].policy");
                return true;
              });
              mistakes++;
              return;
            }
            if (n === 3) {
              const d = await c.peek(item);
              assert.equal(d.degraded, false);
              assert.equal(d.items.length, 1);
              return;
            }
            const d = await c.check(item);
            assert.equal(d.degraded, false, String(d.error));
            assert.equal(d.items[0]?.limit, 5);
            if (d.allowed) allowed[u]++;
          })(),
        );
      }
    }
    await Promise.all(calls);
    assert.deepEqual(allowed, new Array(users).fill(5), "each subject admitted exactly its limit");
    assert.equal(mistakes, users);
    const requests = counted.total();
    assert.ok(requests < users * each, `${users * each} concurrent calls took ${requests} requests: no batching`);
    assert.ok((counted.paths.get("/v1/check/batch") ?? 0) > 0, "no batch was sent");
  });

  test("a lone caller goes to /v1/check, as without batching", async () => {
    const policy = await newPolicy("lone", { limit: 2, window: "1h" });
    const counted = countingFetch();
    const c = new Client({ url: env.url, key: env.key, timeoutMs: 5000, fetch: counted.fetch, batching: {} });
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push((await c.check({ policy, subject: "s" })).allowed);
    assert.deepEqual(answers, [true, true, false]);
    // The first call opened the connection (GET /healthz) before it.
    assert.deepEqual([...counted.paths], [
      ["/healthz", 1],
      ["/v1/check", 3],
    ]);
  });

  test("each caller's signal ends its own call; a check aborted before its batch left is not sent", async () => {
    const counted = countingFetch();
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
    const timersBefore = timers();
    // Tollgate behind a proxy that never answers; a timeout and a delay
    // far longer than the test, so that only the signals end the calls;
    // no opening of the connection first, so that the first check is in
    // flight when the second waits.
    const c = new Client({
      url: env.hungURL,
      key: env.key,
      timeoutMs: 60_000,
      connectTimeoutMs: 0,
      failMode: "closed",
      fetch: counted.fetch,
      batching: { maxDelayMs: 60_000 },
    });
    const first = new AbortController();
    const second = new AbortController();
    const a = c.check({ policy: "p", subject: "a" }, { signal: first.signal });
    const b = c.check({ policy: "p", subject: "b" }, { signal: second.signal });
    // Once both calls have reached the batcher: the first in flight, the
    // second waiting for it.
    await new Promise((resolve) => setImmediate(resolve));
    second.abort();
    const db = await b;
    assert.equal(db.allowed, false);
    assert.equal(db.degraded, true);
    assert.ok(db.error instanceof UnavailableError);
    assert.match(db.error.message, /aborted by the caller/);
    first.abort();
    const da = await a;
    assert.equal(da.degraded, true);
    assert.match(String(da.error?.message), /aborted by the caller/);
    assert.deepEqual([...counted.paths], [["/v1/check", 1]], "the aborted waiting check was sent");
    // Neither the call's timeout nor the batch's delay outlives the calls:
    // a timer left would keep a script (this test file too) alive.
    assert.equal(timers(), timersBefore, "a timer of the client's outlives its calls");
  });
});
