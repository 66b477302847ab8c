// @ts-check
// A tenant its operator disabled: Tollgate answers every call with that
// tenant's keys 403, problem type tenant-disabled (blackbox's
// TestDisabledTenantRefusedOnEveryInstance checks the server's side). The
// client throws an APIError whose tenantDisabled is true, whatever the fail
// mode: a disabled tenant is never allowed by the fail mode, as an outage
// is; and the guard answers 500, not its fail mode.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";
import { APIError, Client, guard } from "../dist/index.js";

const disabled = JSON.stringify({
  type: "https://tollgate.dev/problems/tenant-disabled",
  title: "This workspace is disabled by the operator: every key of it is refused until it is enabled again. Contact the operator of this Tollgate",
  status: 403,
});
const testKeyProblem = JSON.stringify({ type: "https://tollgate.dev/problems/test-key-read-only", title: "Test keys may read", status: 403 });

describe("a disabled tenant", () => {
  /** @type {import("node:http").Server} */
  let server;
  let base = "";
  before(async () => {
    server = createServer((req, res) => {
      req.resume();
      res.writeHead(403, { "content-type": "application/problem+json" });
      res.end(req.url?.startsWith("/test-key/") ? testKeyProblem : disabled);
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(undefined)));
    const addr = server.address();
    base = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  });
  after(() => server.close());

  for (const failMode of /** @type {const} */ (["open", "closed"])) {
    test(`check, peek and acquire throw tenantDisabled (fail mode ${failMode})`, async () => {
      const c = new Client({ url: base, key: "tg_live_x", timeoutMs: 5000, failMode });
      for (const call of [() => c.check({ policy: "api", subject: "s" }), () => c.peek({ policy: "api", subject: "s" }), () => c.acquire("jobs", "s")]) {
        const err = await call().then(
          (d) => assert.fail(`answered ${JSON.stringify(d)}, want an APIError`),
          (e) => e,
        );
        assert.ok(err instanceof APIError, String(err));
        assert.equal(err.status, 403);
        assert.equal(err.tenantDisabled, true);
      }
    });
  }

  test("another 403 (a test key's change) is not tenantDisabled", async () => {
    const c = new Client({ url: `${base}/test-key`, key: "tg_test_x", timeoutMs: 5000 });
    const err = await c.putPolicy("api", { limit: 1, window: "1m" }).catch((e) => e);
    assert.ok(err instanceof APIError, String(err));
    assert.equal(err.status, 403);
    assert.equal(err.tenantDisabled, false);
  });

  test("the guard answers 500, not its fail mode, and hears the APIError", async () => {
    /** @type {unknown[]} */
    const heard = [];
    const g = guard({ policy: "api", url: base, key: "tg_live_x", timeoutMs: 5000, failMode: "open", onError: (e) => heard.push(e) });
    const res = await g(new Request("http://app.test/api"), "192.0.2.1");
    assert.equal(res?.status, 500, "the guard let the request on");
    assert.equal(heard.length, 1);
    assert.ok(heard[0] instanceof APIError && heard[0].tenantDisabled, String(heard[0]));
  });
});
