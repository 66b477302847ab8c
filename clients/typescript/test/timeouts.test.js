// @ts-check
// What each call may take: a check 100 ms, once the client's connection is
// open; the opening a budget of its own; configuration calls 5 s.
import assert from "node:assert/strict";
import { connect, createServer } from "node:net";
import { after, describe, test } from "node:test";
import { Client, UnavailableError } from "../dist/index.js";
import { env, newPolicy } from "./support.js";

/** Timers alive in this process: a client's must not outlive its calls. */
const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;

/** How long the cold proxy holds its first connection; and, for a loaded
 * machine, a check's timeout well under it and an opening's well over it,
 * as the defaults are (100 ms and 2,000 ms) to what a cold process spends. */
const coldMs = 2000;
const timeoutMs = 1000;
const connectTimeoutMs = 10_000;

/**
 * A proxy to Tollgate whose first connection goes through only after
 * coldMs, as a cold process's first fetch takes on a busy machine (Node.js
 * loading fetch itself, DNS, TCP, TLS); later connections, and one once
 * open, are as fast as Tollgate. A proxy of its own for each test: Node's
 * fetch keeps connections open across clients, by origin.
 */
async function coldProxy() {
  const target = new URL(env.url);
  let opened = 0;
  /** @type {Set<import("node:net").Socket>} */
  const sockets = new Set();
  const server = createServer((c) => {
    opened++;
    sockets.add(c);
    c.pause();
    setTimeout(
      () => {
        const up = connect(Number(target.port), target.hostname, () => {
          sockets.add(up);
          c.pipe(up).pipe(c);
          c.resume();
        });
        up.on("error", () => c.destroy());
        c.on("error", () => up.destroy());
      },
      opened === 1 ? coldMs : 0,
    );
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(undefined)));
  const a = server.address();
  if (!a || typeof a !== "object") throw new Error("no address");
  after(() => {
    server.close();
    for (const s of sockets) s.destroy();
  });
  return { url: `http://127.0.0.1:${a.port}`, opened: () => opened };
}

describe("timeouts", () => {
  test("the defaults: a check 100 ms, a configuration call 5 s, the opening 2 s", () => {
    const c = new Client({ url: env.url, key: env.key });
    assert.deepEqual([c.timeoutMs, c.configTimeoutMs, c.connectTimeoutMs], [100, 5000, 2000]);
  });

  test("a client's first check opens the connection under its own budget, not the check's", async () => {
    const policy = await newPolicy("first", { limit: 100, window: "1h" });
    const proxy = await coldProxy();
    const c = new Client({ url: proxy.url, key: env.key, timeoutMs, connectTimeoutMs });
    const first = await c.check({ policy, subject: "s" });
    assert.equal(first.degraded, false, String(first.error));
    assert.equal(first.items[0]?.remaining, 99);
    assert.equal(proxy.opened(), 1, "the check went on the connection opened for it");
    const second = await c.check({ policy, subject: "s" });
    assert.equal(second.degraded, false, String(second.error));
  });

  test("concurrent first checks wait for the one opening", async () => {
    const policy = await newPolicy("first-many", { limit: 100, window: "1h" });
    const proxy = await coldProxy();
    const c = new Client({ url: proxy.url, key: env.key, timeoutMs, connectTimeoutMs });
    const ds = await Promise.all([1, 2, 3].map((i) => c.check({ policy, subject: `s${i}` })));
    for (const d of ds) assert.equal(d.degraded, false, String(d.error));
  });

  test("configuration calls have 5 s; a check on the same client still 100 ms", async () => {
    // Tollgate behind a proxy that delays every answer by 600 ms and more.
    const c = new Client({ url: env.slowURL, key: env.key });
    const name = `${await newPolicy("config", { limit: 5, window: "1m" })}`;
    const p = await c.putPolicy(name, { limit: 7, window: "1m" });
    assert.equal(p.limit, 7);
    await c.verify([name]);
    assert.equal((await c.usage()).plan, "enterprise");
    const d = await c.check({ policy: name, subject: "s" });
    assert.equal(d.degraded, true, "a check past 100 ms is the fail mode's");
    assert.ok(d.error instanceof UnavailableError);
    assert.match(d.error.message, /no answer within 100 ms/);
  });

  test("an explicit timeoutMs longer than 5 s holds for configuration calls too", () => {
    assert.equal(new Client({ url: env.url, key: env.key, timeoutMs: 8000 }).configTimeoutMs, 8000);
    assert.equal(new Client({ url: env.url, key: env.key, configTimeoutMs: 50 }).configTimeoutMs, 50);
  });

  test("a hung Tollgate: the first check is the fail mode's, after the opening's budget and its own", async () => {
    const before = timers();
    const c = new Client({ url: env.hungURL, key: env.key, connectTimeoutMs: 200, failMode: "closed" });
    const d = await c.check({ policy: "p", subject: "s" });
    assert.equal(d.allowed, false);
    assert.equal(d.degraded, true);
    assert.match(String(d.error?.message), /no answer within 100 ms/);
    assert.equal(timers(), before, "a timer of the client's outlives its call");
  });

  test("the caller's signal ends a first call while the connection opens, leaving no timer", async () => {
    const before = timers();
    const c = new Client({ url: env.hungURL, key: env.key, connectTimeoutMs: 60_000 });
    const ctl = new AbortController();
    const pending = c.check({ policy: "p", subject: "s" }, { signal: ctl.signal });
    await new Promise((resolve) => setImmediate(resolve));
    ctl.abort();
    const d = await pending;
    assert.equal(d.degraded, true);
    assert.match(String(d.error?.message), /aborted by the caller/);
    assert.equal(timers(), before, "a timer of the client's outlives its call");
  });
});
