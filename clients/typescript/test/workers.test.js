// @ts-check
// The guard inside workerd, Cloudflare Workers' runtime, as Miniflare runs it.
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { Miniflare } from "miniflare";
import { client, env, leaks } from "./support.js";

const root = fileURLToPath(new URL("..", import.meta.url));

describe("Cloudflare Workers (workerd)", () => {
  /** @type {Miniflare} */
  let mf;

  before(async () => {
    await client().putPolicy("worker-api", { limit: 2, window: "1m" });
    mf = new Miniflare({
      modules: [
        { type: "ESModule", path: `${root}test/fixtures/worker.js` },
        ...readdirSync(`${root}dist`)
          .filter((f) => f.endsWith(".js") && f !== "next.js" && f !== "hono.js")
          .map((f) => ({ type: /** @type {const} */ ("ESModule"), path: `${root}dist/${f}` })),
      ],
      modulesRoot: root,
      compatibilityDate: "2025-09-01",
      bindings: { TOLLGATE_URL: env.url, TOLLGATE_KEY: env.key },
    });
    await mf.ready;
  });
  after(() => mf?.dispose());

  test("the guard keys by cf-connecting-ip and refuses past the limit", async () => {
    const ask = (/** @type {string} */ ip) =>
      mf.dispatchFetch("http://worker.test/", { headers: { "cf-connecting-ip": ip } });
    const first = await ask("198.51.100.20");
    assert.equal(first.status, 200);
    assert.equal(await first.text(), "hello from Cloudflare-Workers", "it ran in workerd");
    assert.equal((await ask("198.51.100.20")).status, 200);
    const refused = await ask("198.51.100.20");
    assert.equal(refused.status, 429);
    assert.ok(Number(refused.headers.get("retry-after")) >= 1);
    assert.deepEqual(leaks(await refused.text()), []);
    const other = await ask("198.51.100.21");
    assert.equal(other.status, 200);
    await other.text();
  });

  test("protect adds the RateLimit fields inside workerd", async () => {
    const res = await mf.dispatchFetch("http://worker.test/wrapped", { headers: { "cf-connecting-ip": "198.51.100.30" } });
    assert.equal(await res.text(), "wrapped");
    assert.equal(res.headers.get("ratelimit-policy"), `"worker-api";q=2;w=60`);
  });
});
