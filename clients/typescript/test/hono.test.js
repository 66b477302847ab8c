// @ts-check
// The Hono middleware in a real Hono app served on Node.js.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { rateLimit } from "../dist/hono.js";
import { env, leaks, newPolicy } from "./support.js";

describe("Hono on Node.js", () => {
  /** @type {ReturnType<typeof serve>} */
  let server;
  let base = "";
  let policy = "";

  before(async () => {
    policy = await newPolicy("hono", { limit: 2, window: "1m" });
    // No generic written by hand: importing the middleware types
    // c.get("tollgate") (tsc --strict checks this file).
    const app = new Hono();
    app.use("/api/*", rateLimit({ policy, url: env.url, key: env.key, timeoutMs: 5000 }));
    app.get("/api/hello", (c) => c.json({ hello: "world", degraded: c.get("tollgate").degraded }));
    app.get("/free", (c) => c.text("free"));
    const down = new Hono();
    down.use("*", rateLimit({ policy, url: env.downURL, key: env.key, failMode: "closed" }));
    down.get("/", (c) => c.text("never"));
    app.route("/down", down);
    await new Promise((resolve) => {
      server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, (info) => {
        base = `http://127.0.0.1:${info.port}`;
        resolve(undefined);
      });
    });
  });
  after(() => new Promise((resolve) => server.close(() => resolve(undefined))));

  test("allowed requests carry RateLimit-Policy and RateLimit; the third is refused", async () => {
    const a = await fetch(`${base}/api/hello`);
    assert.equal(a.status, 200);
    assert.deepEqual(await a.json(), { hello: "world", degraded: false });
    assert.equal(a.headers.get("ratelimit-policy"), `"${policy}";q=2;w=60`);
    assert.match(a.headers.get("ratelimit") ?? "", new RegExp(`^"${policy}";r=1;t=\\d+$`));
    assert.equal((await fetch(`${base}/api/hello`)).status, 200);
    const refused = await fetch(`${base}/api/hello`);
    assert.equal(refused.status, 429);
    assert.ok(Number(refused.headers.get("retry-after")) >= 1);
    assert.equal(refused.headers.get("content-type"), "application/problem+json");
    assert.deepEqual(leaks((await refused.text()) + JSON.stringify([...refused.headers])), []);
    assert.equal((await fetch(`${base}/free`)).status, 200, "routes without the middleware are not counted");
  });

  test("keyed by the TCP peer: a client's X-Forwarded-For changes nothing", async () => {
    const res = await fetch(`${base}/api/hello`, { headers: { "x-forwarded-for": "198.51.100.1" } });
    assert.equal(res.status, 429);
  });

  test("fail closed answers 503 with nothing of Tollgate", async () => {
    const res = await fetch(`${base}/down/`);
    assert.equal(res.status, 503);
    assert.deepEqual(leaks(await res.text()), []);
  });
});
