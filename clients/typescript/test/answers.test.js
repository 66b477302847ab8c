// @ts-check
// Answers that are not Tollgate's: small servers that answer each wrong way
// (JSON of another shape, an HTML page, a redirect, an HTML 404, JSON cut
// short, the wrong content type, a batch of the wrong count). The client
// finds each unavailable, and the guard and the Hono middleware answer with
// the fail mode: open lets the request on, closed answers 503 with
// Retry-After; none throws or answers 500.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";
import { Hono } from "hono";
import { APIError, Client, UnavailableError, guard } from "../dist/index.js";
import { rateLimit } from "../dist/hono.js";

/** A decision of Tollgate's for a check of n items. @param {number} n */
function decision(n) {
  const item = {
    policy: "api",
    allowed: true,
    limit: 10,
    remaining: 9,
    window_seconds: 60,
    reset_at: "2030-01-01T00:00:00Z",
    retry_after_ms: 0,
    shadow: false,
  };
  return { allowed: true, degraded: false, items: Array.from({ length: n }, () => item) };
}

/**
 * How each wrong server answers, by the first segment of the path (the
 * client's base URL names it). Each is given the request's path after it
 * and its body, and answers [status, headers, body].
 * @type {Record<string, (path: string, body: any, self: string, other: string) => [number, Record<string, string>, string]>}
 */
const wrong = {
  // The wrong service at that URL, or a health check answering for everything.
  "json-other": () => [200, { "content-type": "application/json" }, `{"ok":true}`],
  // JSON whose fields are of the wrong kinds.
  "json-types": () => [200, { "content-type": "application/json" }, `{"allowed":"yes","degraded":0,"items":{}}`],
  // A decision with fewer items than the check asked.
  "json-items": () => [200, { "content-type": "application/json" }, JSON.stringify(decision(0))],
  // A captive portal, or a proxy's page.
  "html-200": () => [200, { "content-type": "text/html" }, "<html><body>Sign in to the Wi-Fi</body></html>"],
  // Tollgate's answer under another content type.
  "content-type": (_, body) => [200, { "content-type": "text/plain" }, JSON.stringify(decision(body?.items?.length ?? 1))],
  // JSON cut short, the message itself whole.
  truncated: () => [200, { "content-type": "application/json" }, `{"allowed":true,"degraded":false,"items":[{"pol`],
  // An empty 200.
  empty: () => [200, { "content-type": "application/json" }, ""],
  // A load balancer's http → https.
  "redirect-301": (path, _, self) => [301, { location: `${self.replace("http:", "https:")}/redirect-301${path}` }, ""],
  // A 307 to another host, which must hear nothing.
  "redirect-307": (path, _, __, other) => [307, { location: `${other}${path}` }, ""],
  // A wrong base URL: some web server's page.
  "html-404": () => [404, { "content-type": "text/html" }, "<html><body>Not Found</body></html>"],
  // A 404 of another JSON API.
  "json-404": () => [404, { "content-type": "application/json" }, `{"error":"not found"}`],
  // A batch answered with one result too few, and single checks as Tollgate does.
  "batch-count": (path, body) =>
    path === "/v1/check/batch"
      ? [200, { "content-type": "application/json" }, JSON.stringify({ results: body.checks.slice(1).map(() => decision(1)) })]
      : [200, { "content-type": "application/json" }, JSON.stringify(decision(body?.items?.length ?? 1))],
  // A batch whose results have the wrong number of items.
  "batch-items": (path, body) =>
    path === "/v1/check/batch"
      ? [200, { "content-type": "application/json" }, JSON.stringify({ results: body.checks.map(() => decision(2)) })]
      : [200, { "content-type": "application/json" }, JSON.stringify(decision(body?.items?.length ?? 1))],
  // A batch whose results are of another shape.
  "batch-shape": (path, body) =>
    path === "/v1/check/batch"
      ? [200, { "content-type": "application/json" }, JSON.stringify({ results: body.checks.map(() => ({ ok: true })) })]
      : [200, { "content-type": "application/json" }, JSON.stringify(decision(body?.items?.length ?? 1))],
};

/** Serves handler on a loopback port; resolves to its base URL and the server. @param {import("node:http").RequestListener} handler */
async function listen(handler) {
  const server = createServer(handler);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(undefined)));
  const a = server.address();
  if (!a || typeof a !== "object") throw new Error("no address");
  return { server, base: `http://127.0.0.1:${a.port}` };
}

/** @type {import("node:http").Server} */
let server;
/** @type {import("node:http").Server} */
let otherServer;
let base = "";
let other = "";
/** Requests the other host heard, and whether any carried the key. */
const elsewhere = { calls: 0, keys: 0 };

before(async () => {
  ({ server: otherServer, base: other } = await listen((req, res) => {
    elsewhere.calls++;
    if (req.headers.authorization) elsewhere.keys++;
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(decision(1)));
  }));
  ({ server, base } = await listen((req, res) => {
    let raw = "";
    req.on("data", (b) => (raw += b));
    req.on("end", () => {
      const url = new URL(req.url ?? "/", "http://x");
      const [, name = "", ...rest] = url.pathname.split("/");
      const path = `/${rest.join("/")}`;
      const answer = wrong[name];
      if (!answer) {
        res.writeHead(500).end();
        return;
      }
      const [status, headers, body] = answer(path, raw ? JSON.parse(raw) : undefined, base, other);
      res.writeHead(status, headers).end(body);
    });
  }));
});
after(() => {
  server.close();
  otherServer.close();
});

const item = { policy: "api", subject: "s" };
const key = "tg_live_secret";

/** @param {string} name @param {Partial<import("../dist/index.js").ClientOptions>} [opts] */
const clientOf = (name, opts = {}) => new Client({ url: `${base}/${name}`, key, timeoutMs: 5000, ...opts });

/** The message a case's error must carry. @type {Record<string, RegExp>} */
const says = {
  "json-other": /answer 200 is not Tollgate's: allowed: want a boolean/,
  "json-types": /answer 200 is not Tollgate's: allowed: want a boolean, got a string/,
  "json-items": /answer 200 is not Tollgate's: items: want 1 of them, got 0/,
  "html-200": /answer 200 is not Tollgate's: content type text\/html, not application\/json/,
  "content-type": /answer 200 is not Tollgate's: content type text\/plain, not application\/json/,
  truncated: /answer 200 is not Tollgate's: not JSON/,
  empty: /answer 200 is not Tollgate's: no body/,
  "redirect-301": /redirected \(301\) to https:\/\/127\.0\.0\.1:\d+\/redirect-301\/v1\/check: set the URL to where it points, https:\/\/127\.0\.0\.1:\d+\/redirect-301;/,
  "redirect-307": /redirected \(307\) to http:\/\/127\.0\.0\.1:\d+\/v1\/check: set the URL to where it points, http:\/\/127\.0\.0\.1:\d+;/,
  "html-404": /answer 404 is not Tollgate's: content type text\/html, not application\/problem\+json/,
  "json-404": /answer 404 is not Tollgate's: content type application\/json, not application\/problem\+json/,
};
const single = Object.keys(says);

describe("answers that are not Tollgate's", () => {
  for (const name of single) {
    test(`${name}: check is unavailable, so the fail mode answers`, async () => {
      for (const failMode of /** @type {const} */ (["open", "closed"])) {
        const d = await clientOf(name, { failMode }).check(item);
        assert.equal(d.allowed, failMode === "open", `${failMode}: ${JSON.stringify(d)}`);
        assert.equal(d.degraded, true);
        assert.deepEqual(d.items, []);
        assert.ok(d.error instanceof UnavailableError, `${failMode}: ${d.error}`);
        assert.match(d.error.message, says[name] ?? /^$/);
      }
    });
  }

  for (const name of single) {
    test(`${name}: configuration calls throw UnavailableError`, async () => {
      const c = clientOf(name);
      for (const call of [() => c.verify(["api"]), () => c.putPolicy("api", { limit: 1, window: "1m" }), () => c.usage()]) {
        const err = await call().catch((e) => e);
        assert.ok(err instanceof UnavailableError, String(err));
        assert.ok(!(err instanceof APIError));
      }
    });
  }

  test("a redirect is not followed: the host it points to hears nothing, the key goes nowhere", async () => {
    const before = elsewhere.calls;
    for (const call of ["check", "acquire", "reset"]) {
      const c = clientOf("redirect-307");
      if (call === "check") await c.check(item);
      else if (call === "acquire") assert.ok((await c.acquire("api", "s")).error instanceof UnavailableError);
      else await assert.rejects(c.reset("api", "s"), UnavailableError);
    }
    assert.equal(elsewhere.calls, before);
    assert.equal(elsewhere.keys, 0);
  });

  for (const name of ["batch-count", "batch-items", "batch-shape", "json-other", "html-200", "redirect-301"]) {
    test(`${name}: every check of a batch is unavailable, so the fail mode answers`, async () => {
      for (const failMode of /** @type {const} */ (["open", "closed"])) {
        const c = clientOf(name, { failMode, batching: { maxDelayMs: 5 } });
        // The first goes alone; the others wait for it and go as one batch.
        const ds = await Promise.all([1, 2, 3, 4].map((i) => c.check({ policy: "api", subject: `s${i}` })));
        for (const d of ds.slice(1)) {
          assert.equal(d.allowed, failMode === "open", JSON.stringify(d));
          assert.equal(d.degraded, true);
          assert.ok(d.error instanceof UnavailableError, String(d.error));
          assert.match(d.error.message, /POST \/v1\/check\/batch: /);
        }
      }
    });
  }

  test("the batch's error says what was wrong", async () => {
    /** @type {Record<string, RegExp>} */
    const batch = {
      "batch-count": /answer 200 is not Tollgate's: results: want 3 of them, got 2/,
      "batch-items": /answer 200 is not Tollgate's: results\[0\]\.items: want 1 of them, got 2/,
      "batch-shape": /answer 200 is not Tollgate's: results\[0\]\.allowed: want a boolean/,
    };
    for (const [name, re] of Object.entries(batch)) {
      const c = clientOf(name, { batching: { maxDelayMs: 5 } });
      const ds = await Promise.all([1, 2, 3, 4].map((i) => c.check({ policy: "api", subject: `s${i}` })));
      assert.match(String(ds[3]?.error?.message), re, name);
    }
  });
});

describe("the guard and the middleware apply the fail mode", () => {
  const req = () => new Request("http://app.test/api");

  for (const name of single) {
    test(`${name}: the guard lets the request on (open) or answers 503 with Retry-After (closed)`, async () => {
      /** @type {unknown[]} */
      const heard = [];
      const onError = (/** @type {unknown} */ e) => heard.push(e);
      const open = guard({ policy: "api", url: `${base}/${name}`, key, timeoutMs: 5000, onError });
      assert.equal(await open(req(), "192.0.2.1"), undefined);
      const closed = guard({ policy: "api", url: `${base}/${name}`, key, timeoutMs: 5000, failMode: "closed", onError });
      const res = await closed(req(), "192.0.2.1");
      assert.equal(res?.status, 503);
      assert.ok(Number(res?.headers.get("retry-after")) >= 1, `Retry-After ${res?.headers.get("retry-after")}`);
      assert.equal(res?.headers.get("content-type"), "application/problem+json");
      assert.doesNotMatch(await (res?.text() ?? ""), /tollgate|127\.0\.0\.1/i);
      assert.equal(heard.length, 2);
      for (const e of heard) assert.ok(e instanceof UnavailableError, String(e));
    });
  }

  for (const name of single) {
    test(`${name}: the Hono middleware lets the request on (open) or answers 503 with Retry-After (closed)`, async () => {
      for (const failMode of /** @type {const} */ (["open", "closed"])) {
        const app = new Hono();
        app.use("*", rateLimit({ policy: "api", url: `${base}/${name}`, key, timeoutMs: 5000, failMode, onError: () => {} }));
        app.get("/", (c) => c.json({ degraded: c.get("tollgate").degraded }));
        const res = await app.request("/");
        if (failMode === "open") {
          assert.equal(res.status, 200);
          assert.deepEqual(await res.json(), { degraded: true });
        } else {
          assert.equal(res.status, 503);
          assert.ok(Number(res.headers.get("retry-after")) >= 1);
        }
      }
    });
  }
});
