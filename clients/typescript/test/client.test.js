// @ts-check
// The client against a real Tollgate: the whole tenant API, its errors and
// its fail modes.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  APIError,
  Client,
  LeaseGoneError,
  RateLimitedError,
  UnavailableError,
  retryAfterMs,
} from "../dist/index.js";
import { client, env, newPolicy, unique } from "./support.js";

describe("checks", () => {
  test("check counts, refuses past the limit, and says when to retry", async () => {
    const policy = await newPolicy("chk", { limit: 2, window: "1h" });
    const c = client();
    const a = await c.check({ policy, subject: "alice" });
    assert.equal(a.allowed, true);
    assert.equal(a.degraded, false);
    assert.equal(a.items[0]?.remaining, 1);
    assert.equal(a.items[0]?.window_seconds, 3600);
    assert.equal((await c.check({ policy, subject: "alice" })).allowed, true);
    const refused = await c.check({ policy, subject: "alice" });
    assert.equal(refused.allowed, false);
    assert.equal(refused.error, undefined);
    assert.ok(retryAfterMs(refused) > 0);
    assert.equal((await c.check({ policy, subject: "bob" })).allowed, true, "subjects are counted apart");
  });

  test("peek counts nothing", async () => {
    const policy = await newPolicy("peek", { limit: 1, window: "1h" });
    const c = client();
    for (let i = 0; i < 3; i++) assert.equal((await c.peek({ policy, subject: "s" })).allowed, true);
    assert.equal((await c.check({ policy, subject: "s" })).allowed, true);
    assert.equal((await c.peek({ policy, subject: "s" })).allowed, false);
  });

  test("a multi-item check counts all items or none", async () => {
    const small = await newPolicy("multi-a", { limit: 1, window: "1h" });
    const big = await newPolicy("multi-b", { limit: 10, window: "1h" });
    const c = client();
    const both = await c.check([
      { policy: small, subject: "u" },
      { policy: big, subject: "u", cost: 3 },
    ]);
    assert.equal(both.allowed, true);
    assert.deepEqual(
      both.items.map((i) => [i.policy, i.remaining]),
      [
        [small, 0],
        [big, 7],
      ],
    );
    const again = await c.check([
      { policy: big, subject: "u", cost: 3 },
      { policy: small, subject: "u" },
    ]);
    assert.equal(again.allowed, false);
    const after = await c.peek({ policy: big, subject: "u" });
    assert.equal(after.items[0]?.remaining, 7, "the refused check counted nothing of the other item");
  });

  test("subjects Tollgate would refuse are sent as their digest, and distinct ones stay distinct", async () => {
    const policy = await newPolicy("digest", { limit: 1, window: "1h" });
    const c = client();
    const long = "x".repeat(600);
    assert.equal((await c.check({ policy, subject: long })).allowed, true);
    assert.equal((await c.check({ policy, subject: long })).allowed, false);
    assert.equal((await c.check({ policy, subject: `${long}y` })).allowed, true);
    assert.equal((await c.check({ policy, subject: "bad\u0000byte" })).allowed, true);
    assert.equal((await c.check({ policy, subject: "lone \ud800" })).allowed, true);
    await c.reset(policy, long);
    assert.equal((await c.check({ policy, subject: long })).allowed, true, "reset sends the same digest");
  });

  test("reset forgets what a subject spent", async () => {
    const policy = await newPolicy("reset", { limit: 1, window: "1h" });
    const c = client();
    await c.check({ policy, subject: "acct-1" });
    assert.equal((await c.check({ policy, subject: "acct-1" })).allowed, false);
    await c.reset(policy, "acct-1");
    assert.equal((await c.check({ policy, subject: "acct-1" })).allowed, true);
  });
});

describe("leases", () => {
  test("acquire, renew, release", async () => {
    const policy = await newPolicy("lease", { limit: 1, algorithm: "concurrency" });
    const c = client();
    const l = await c.acquire(policy, "job", { ttlSeconds: 30 });
    assert.equal(l.allowed, true);
    assert.match(l.lease_id ?? "", /^ls_[0-9a-f]{32}$/);
    const full = await c.acquire(policy, "job");
    assert.equal(full.allowed, false);
    assert.ok(full.retry_after_ms > 0);
    const renewed = await c.renew(l, { ttlSeconds: 60 });
    assert.ok(Date.parse(renewed.expires_at ?? "") > Date.parse(l.expires_at ?? ""));
    await c.release(l);
    await c.release(l); // idempotent
    await assert.rejects(c.renew(l), LeaseGoneError);
    assert.equal((await c.acquire(policy, "job")).allowed, true);
  });
});

describe("configuration", () => {
  test("policies and overrides: create, read, list, delete", async () => {
    const c = client();
    const name = unique("crud");
    const p = await c.putPolicy(name, { limit: 5, window: "1m", alert_after: 3 });
    assert.equal(p.name, name);
    assert.equal(p.limit, 5);
    assert.equal((await c.getPolicy(name)).window, "1m");
    assert.ok((await c.listPolicies()).some((x) => x.name === name));
    const o = await c.putOverride(name, "vip-*", { limit: 50 });
    assert.equal(o.limit, 50);
    assert.equal((await c.getOverride(name, "vip-*")).pattern, "vip-*");
    assert.deepEqual(
      (await c.listOverrides(name)).map((x) => x.pattern),
      ["vip-*"],
    );
    const vip = await c.check({ policy: name, subject: "vip-42" });
    assert.equal(vip.items[0]?.limit, 50, "the override applies");
    await c.deleteOverride(name, "vip-*");
    assert.deepEqual(await c.listOverrides(name), []);
    await c.deletePolicy(name);
    const err = await c.getPolicy(name).catch((e) => e);
    assert.ok(err instanceof APIError);
    assert.equal(err.status, 404);
  });

  test("an invalid policy is an APIError naming the field", async () => {
    const err = await client()
      .putPolicy(unique("bad"), { limit: 0, window: "1m" })
      .catch((e) => e);
    assert.ok(err instanceof APIError);
    assert.equal(err.status, 400);
    assert.equal(err.problem.field, "limit");
  });

  test("usage names the plan and counts checks", async () => {
    const u = await client().usage();
    assert.equal(u.plan, "enterprise");
    assert.equal(typeof u.checks_used, "number");
    assert.ok(Date.parse(u.period_end) > Date.parse(u.period_start));
  });

  test("verify passes for a known key and policy, and fails for an unknown one", async () => {
    const policy = await newPolicy("verify", { limit: 1, window: "1m" });
    await client().verify([policy]);
    const err = await client()
      .verify([unique("nope")])
      .catch((e) => e);
    assert.ok(err instanceof APIError && err.status === 404);
  });
});

describe("errors are never a silent allow", () => {
  test("a wrong key throws 401 whatever the fail mode", async () => {
    for (const failMode of /** @type {const} */ (["open", "closed"])) {
      const c = new Client({ url: env.url, key: "tg_live_wrong", failMode, timeoutMs: 5000 });
      const err = await c.check({ policy: "any", subject: "s" }).catch((e) => e);
      assert.ok(err instanceof APIError, String(err));
      assert.equal(err.status, 401);
      const lease = await c.acquire("any", "s").catch((e) => e);
      assert.ok(lease instanceof APIError);
    }
  });

  test("an unknown policy throws 400 naming the item whatever the fail mode", async () => {
    const c = client({ failMode: "open" });
    const err = await c.check({ policy: unique("missing"), subject: "s" }).catch((e) => e);
    assert.ok(err instanceof APIError);
    assert.equal(err.status, 400);
    assert.equal(err.problem.field, "items[0].policy");
  });

  test("the client refuses a bad base URL or an empty key", () => {
    assert.throws(() => new Client({ url: "tollgate:8080", key: "k" }), TypeError);
    assert.throws(() => new Client({ url: "http://h/?q=1", key: "k" }), TypeError);
    assert.throws(() => new Client({ url: "http://h", key: " " }), TypeError);
  });
});

describe("fail modes", () => {
  const item = { policy: "whatever", subject: "s" };

  /** @type {[string, string][]} */
  const unavailable = [
    ["stopped", env.downURL],
    ["slowed past the timeout", env.slowURL],
    ["hung", env.hungURL],
  ];
  for (const [what, url] of unavailable) {
    test(`a ${what} Tollgate: open allows, closed refuses, both degraded`, async () => {
      const open = await new Client({ url, key: env.key }).check(item);
      assert.equal(open.allowed, true);
      assert.equal(open.degraded, true);
      assert.deepEqual(open.items, []);
      assert.ok(open.error instanceof UnavailableError, String(open.error));
      const closed = await new Client({ url, key: env.key, failMode: "closed" }).check(item);
      assert.equal(closed.allowed, false);
      assert.equal(closed.degraded, true);
      const lease = await new Client({ url, key: env.key, failMode: "closed" }).acquire("p", "s");
      assert.equal(lease.allowed, false);
      assert.equal(lease.degraded, true);
      assert.equal(lease.lease_id, undefined);
    });
  }

  test("calls that are not decisions throw when Tollgate is unavailable", async () => {
    const c = new Client({ url: env.downURL, key: env.key });
    await assert.rejects(c.usage(), UnavailableError);
    await assert.rejects(c.reset("p", "s"), UnavailableError);
  });

  test("a slowed Tollgate answers within a timeout that allows for it", async () => {
    const policy = await newPolicy("slow", { limit: 5, window: "1m" });
    const d = await new Client({ url: env.slowURL, key: env.key, timeoutMs: 10_000 }).check({ policy, subject: "s" });
    assert.equal(d.degraded, false);
    assert.equal(d.allowed, true);
  });

  test("the caller's signal ends a call", async () => {
    const ctl = new AbortController();
    ctl.abort();
    const d = await new Client({ url: env.url, key: env.key, failMode: "closed" }).check(item, { signal: ctl.signal });
    assert.equal(d.allowed, false);
    assert.ok(d.error instanceof UnavailableError);
  });

  describe("Tollgate's own ceilings", () => {
    /** Spends the tiny tenant's quota until its ceiling refuses, then
     * answers a check of it. */
    async function exhaust() {
      const c = new Client({ url: env.url, key: env.tinyKey, timeoutMs: 5000, failMode: "closed" });
      for (let i = 0; i < 10; i++) {
        const err = await c.usage().then(
          () => undefined,
          (e) => e,
        );
        if (err instanceof RateLimitedError) return c.check({ policy: env.tinyPolicy, subject: "s" });
        if (err) throw err;
      }
      throw new Error("the tiny tenant's quota never refused");
    }

    test("a 429 of Tollgate's is answered by the fail mode, with the ceiling named", async () => {
      const d = await exhaust();
      assert.equal(d.allowed, false);
      assert.equal(d.degraded, true);
      assert.ok(d.error instanceof RateLimitedError, String(d.error));
      assert.equal(d.error.layer, "quota");
      assert.ok(d.error.limit > 0);
      assert.ok(d.error.retryAfterSeconds > 0);
      const open = await new Client({ url: env.url, key: env.tinyKey, timeoutMs: 5000 }).check({ policy: env.tinyPolicy, subject: "s" });
      assert.equal(open.allowed, true);
      assert.ok(open.error instanceof RateLimitedError);
    });

    test("a retry waits no longer than the caller's signal", async () => {
      await exhaust();
      const c = new Client({ url: env.url, key: env.tinyKey, timeoutMs: 5000, retry: { attempts: 3, maxWaitMs: 120_000 } });
      const started = Date.now();
      await assert.rejects(c.usage({ signal: AbortSignal.timeout(300) }), RateLimitedError);
      // Not a timing assertion of Tollgate's: the wait it named is tens of
      // seconds, and the signal ended the call long before.
      assert.ok(Date.now() - started < 30_000);
    });

    test("a retry is not made when Retry-After exceeds maxWaitMs", async () => {
      await exhaust();
      const c = new Client({ url: env.url, key: env.tinyKey, timeoutMs: 5000, retry: { attempts: 3, maxWaitMs: 0 } });
      const err = await c.usage().catch((e) => e);
      assert.ok(err instanceof RateLimitedError);
    });
  });
});
