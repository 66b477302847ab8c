// @ts-check
// The plain guard, the Fetch API's (Request) => Response | undefined, on
// Node.js against a real Tollgate.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Client, RateLimitedError, guard, protect, withHeaders } from "../dist/index.js";
import { env, leaks, newPolicy } from "./support.js";

const req = (/** @type {Record<string, string>} */ headers = {}) => new Request("http://app.test/api", { headers });

describe("guard", () => {
  test("allows up to the limit, then answers 429 with Retry-After and a problem body", async () => {
    const policy = await newPolicy("guard", { limit: 2, window: "1m" });
    const g = guard({ policy, url: env.url, key: env.key, timeoutMs: 5000 });
    assert.equal(await g(req(), "192.0.2.1"), undefined);
    assert.equal(await g(req(), "192.0.2.1"), undefined);
    const res = await g(req(), "192.0.2.1");
    assert.ok(res);
    assert.equal(res.status, 429);
    const retry = Number(res.headers.get("retry-after"));
    assert.ok(retry >= 1 && retry <= 60, `Retry-After ${retry}`);
    assert.equal(res.headers.get("content-type"), "application/problem+json");
    assert.match(res.headers.get("ratelimit-policy") ?? "", new RegExp(`^"${policy}";q=2;w=60$`));
    assert.equal(res.headers.get("ratelimit"), `"${policy}";r=0;t=${retry}`);
    const body = await res.text();
    assert.equal(JSON.parse(body).status, 429);
    assert.deepEqual(leaks(body + JSON.stringify([...res.headers])), []);
    assert.equal(await g(req(), "192.0.2.2"), undefined, "another address has its own count");
  });

  test("IPv6 clients are keyed by their /64", async () => {
    const policy = await newPolicy("v6", { limit: 1, window: "1m" });
    const g = guard({ policy, url: env.url, key: env.key, timeoutMs: 5000 });
    assert.equal(await g(req(), "2001:db8:1:2::1"), undefined);
    assert.equal((await g(req(), "2001:db8:1:2:ffff::9"))?.status, 429);
    assert.equal(await g(req(), "2001:db8:1:3::1"), undefined);
  });

  test("forwarding headers are believed from trusted proxies only", async () => {
    const policy = await newPolicy("xff", { limit: 1, window: "1m" });
    const g = guard({ policy, url: env.url, key: env.key, timeoutMs: 5000, trustedProxies: ["10.0.0.0/8"] });
    // Through the proxy: the client is the first untrusted hop from the right.
    assert.equal(await g(req({ "x-forwarded-for": "198.51.100.7, 10.1.1.1" }), "10.0.0.1"), undefined);
    assert.equal((await g(req({ "x-forwarded-for": "203.0.113.5, 198.51.100.7" }), "10.0.0.1"))?.status, 429);
    // Straight from a client: its own X-Forwarded-For is ignored.
    assert.equal(await g(req({ "x-forwarded-for": "198.51.100.7" }), "192.0.2.50"), undefined);
  });

  test("a platform's header is read only when told", async () => {
    const policy = await newPolicy("platform", { limit: 1, window: "1m" });
    const cf = guard({ policy, url: env.url, key: env.key, timeoutMs: 5000, platform: "cloudflare" });
    assert.equal(await cf(req({ "cf-connecting-ip": "198.51.100.9" })), undefined);
    assert.equal((await cf(req({ "cf-connecting-ip": "198.51.100.9" })))?.status, 429);
    const vercel = guard({ policy, url: env.url, key: env.key, timeoutMs: 5000, platform: "vercel" });
    assert.equal(await vercel(req({ "x-real-ip": "198.51.100.10" })), undefined);
    assert.equal((await vercel(req({ "x-forwarded-for": "198.51.100.10" })))?.status, 429);
    const plain = guard({ policy, url: env.url, key: env.key, timeoutMs: 5000 });
    assert.equal(await plain(req({ "cf-connecting-ip": "198.51.100.9" }), "192.0.2.77"), undefined, "not told: the header is the client's own");
  });

  test("keyed by a header or a function; requests without a key share one counter", async () => {
    const policy = await newPolicy("byhdr", { limit: 1, window: "1m" });
    const g = guard({ policy, url: env.url, key: env.key, timeoutMs: 5000, by: { header: "x-api-key" } });
    assert.equal(await g(req({ "x-api-key": "k1" })), undefined);
    assert.equal((await g(req({ "x-api-key": "k1" })))?.status, 429);
    assert.equal(await g(req({ "x-api-key": "k2" })), undefined);
    assert.equal(await g(req()), undefined);
    assert.equal((await g(req()))?.status, 429, "the unkeyed share a limit");
    const policy2 = await newPolicy("byfn", { limit: 1, window: "1m" });
    const f = guard({ policy: policy2, url: env.url, key: env.key, timeoutMs: 5000, by: (r) => new URL(r.url).pathname });
    assert.equal(await f(req()), undefined);
    assert.equal((await f(req()))?.status, 429);
  });

  test("unavailable Tollgate: open lets requests on, closed answers 503; a wrong key answers 500", async () => {
    const policy = "any";
    assert.equal(await guard({ policy, url: env.downURL, key: env.key })(req(), "192.0.2.1"), undefined);
    assert.equal(await guard({ policy, url: env.slowURL, key: env.key })(req(), "192.0.2.1"), undefined);
    const closed = await guard({ policy, url: env.slowURL, key: env.key, failMode: "closed" })(req(), "192.0.2.1");
    assert.equal(closed?.status, 503);
    assert.equal(closed?.headers.get("retry-after"), "1", "an outage: ask again soon");
    const down = await guard({ policy, url: env.downURL, key: env.key, failMode: "closed" })(req(), "192.0.2.1");
    assert.equal(down?.status, 503);
    assert.equal(down?.headers.get("retry-after"), "1");
    /** @type {unknown[]} */
    const heard = [];
    const wrong = await guard({
      policy,
      url: env.url,
      key: "tg_live_wrong",
      timeoutMs: 5000,
      onError: (e) => heard.push(e),
    })(req(), "192.0.2.1");
    assert.equal(wrong?.status, 500);
    assert.equal(heard.length, 1);
    for (const r of [closed, wrong]) assert.deepEqual(leaks(await (r?.text() ?? "")), []);
  });

  test("fail closed on Tollgate's own ceiling: 503 with the ceiling's Retry-After", async () => {
    const c = new Client({ url: env.url, key: env.tinyKey, timeoutMs: 5000, failMode: "closed" });
    /** @type {unknown[]} */
    const heard = [];
    const g = guard({ policy: env.tinyPolicy, client: c, onError: (e) => heard.push(e) });
    // Each check spends the tiny tenant's quota of 3 calls a minute, until its ceiling refuses.
    let res;
    for (let i = 0; i < 10 && res?.status !== 503; i++) res = await g(req(), "192.0.2.1");
    assert.equal(res?.status, 503);
    assert.ok(heard.at(-1) instanceof RateLimitedError, String(heard.at(-1)));
    const retry = Number(res?.headers.get("retry-after"));
    assert.ok(retry >= 1 && retry <= 3600, `Retry-After ${retry}`);
  });

  test("decide gives an allowed request's RateLimit fields, and a refused one's answer", async () => {
    const policy = await newPolicy("decide", { limit: 2, window: "1m" });
    const g = guard({ policy, url: env.url, key: env.key, timeoutMs: 5000 });
    const a = await g.decide(req(), "192.0.2.60");
    assert.equal(a.response, undefined);
    assert.equal(a.decision.allowed, true);
    assert.equal(a.headers.get("ratelimit-policy"), `"${policy}";q=2;w=60`);
    assert.match(a.headers.get("ratelimit") ?? "", new RegExp(`^"${policy}";r=1;t=\\d+$`));
    const res = withHeaders(new Response("hi"), a.headers);
    assert.equal(res.headers.get("ratelimit-policy"), `"${policy}";q=2;w=60`);
    assert.equal(await g(req(), "192.0.2.60"), undefined, "the guard and its decide count alike");
    const refused = await g.decide(req(), "192.0.2.60");
    assert.equal(refused.response?.status, 429);
    assert.equal(refused.headers.get("ratelimit"), `"${policy}";r=0;t=${refused.response?.headers.get("retry-after")}`);
  });

  test("protect adds the RateLimit fields to the handler's answer", async () => {
    const policy = await newPolicy("protect", { limit: 5, window: "1m" });
    const client = new Client({ url: env.url, key: env.key, timeoutMs: 5000 });
    const fetch = protect({ policy, client, platform: "cloudflare" }, () => new Response("hi"));
    const res = await fetch(req({ "cf-connecting-ip": "192.0.2.9" }), {}, {});
    assert.equal(await res.text(), "hi");
    assert.equal(res.headers.get("ratelimit-policy"), `"${policy}";q=5;w=60`);
    assert.match(res.headers.get("ratelimit") ?? "", new RegExp(`^"${policy}";r=4;t=\\d+$`));
  });
});
