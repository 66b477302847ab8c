// @ts-check
// Reservations against a real Tollgate: reserve, settle, release,
// withReservation and its fail modes, and the README's budget example run
// as it is written there.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { APIError, ReservationGoneError, SettledOtherwiseError, UnavailableError } from "../dist/index.js";
import { client, env, newPolicy } from "./support.js";

/** A budget of 10,000 tokens an hour. */
const budget = () => newPolicy("budget", { limit: 10000, window: "1h", algorithm: "fixed_window", unit: "tokens" });

describe("charges", () => {
  test("charge counts past the limit, and the next check is refused", async () => {
    const policy = await newPolicy("charged", { limit: 1000, window: "1h", unit: "tokens" });
    const c = client();
    const d = await c.charge({ policy, subject: "user-1", cost: 1200 });
    assert.equal(d.allowed, true);
    assert.equal(d.items[0]?.allowed, false);
    assert.equal(d.items[0]?.remaining, 0);
    assert.equal((await c.check({ policy, subject: "user-1" })).allowed, false);
    await assert.rejects(client({ url: env.downURL }).charge({ policy, subject: "user-1", cost: 1 }), UnavailableError);
  });
});

describe("reservations", () => {
  test("reserve, settle, settle again, release", async () => {
    const policy = await budget();
    const c = client();
    const r = await c.reserve({ policy, subject: "user-1", amount: 4000, ttlSeconds: 600 });
    assert.equal(r.allowed, true);
    assert.match(r.reservation_id ?? "", /^rs_[0-9a-f]{32}$/);
    assert.equal(r.remaining, 6000);
    assert.equal(r.unit, "tokens");
    assert.equal(r.degraded, false);
    const expires = Date.parse(r.expires_at ?? "") - Date.now();
    assert.ok(expires > 540_000 && expires <= 600_000, `expires in ${expires} ms`);

    const s = await c.settle(r, 2750);
    assert.equal(s?.returned, 1250);
    assert.equal(s?.remaining, 7250);
    assert.equal(s?.repeat, false);
    assert.equal((await c.settle(r, 2750))?.repeat, true, "the same settlement again is a repeat");
    await assert.rejects(c.settle(r, 100), SettledOtherwiseError);

    const refused = await c.reserve({ policy, subject: "user-1", amount: 8000 });
    assert.equal(refused.allowed, false);
    assert.equal(refused.reservation_id, undefined);
    assert.ok(refused.retry_after_ms > 0);
    assert.equal(refused.error, undefined);

    const rest = await c.reserve({ policy, subject: "user-1", amount: 7000 });
    const released = await c.release(rest);
    assert.equal(released?.returned, 7000);
    assert.equal(released?.remaining, 7250);
    await assert.rejects(c.release({ ...rest, reservation_id: `rs_${"0".repeat(32)}` }), ReservationGoneError);
  });

  test("an idempotency key reserves once; without one each reserve is its own", async () => {
    const policy = await budget();
    const c = client();
    const first = await c.reserve({ policy, subject: "u", amount: 1000, idempotencyKey: "call-1" });
    const again = await c.reserve({ policy, subject: "u", amount: 1000, idempotencyKey: "call-1" });
    assert.equal(again.repeat, true);
    assert.equal(again.reservation_id, first.reservation_id);
    const other = await c.reserve({ policy, subject: "u", amount: 1000 });
    assert.notEqual(other.reservation_id, first.reservation_id);
    assert.equal(other.remaining, 8000);
  });

  test("a concurrency policy is a fault whatever the fail mode", async () => {
    const policy = await newPolicy("conc", { limit: 1, algorithm: "concurrency" });
    const err = await client({ failMode: "open" })
      .reserve({ policy, subject: "s", amount: 1 })
      .catch((e) => e);
    assert.ok(err instanceof APIError, String(err));
    assert.equal(err.status, 400);
  });
});

describe("batches", () => {
  /** @template T @param {T | Error | undefined} r @returns {T} */
  const ok = (r) => {
    if (r === undefined || r instanceof Error) throw new Error(`want an answer, got ${r}`);
    return r;
  };

  test("reserveBatch answers each as reserve would; settleBatch each as settle would", async () => {
    const policy = await budget();
    const c = client();
    const first = { policy, subject: "user-1", amount: 4000, ttlSeconds: 600, idempotencyKey: `call-${policy}` };
    const [a, b, unknown] = await c.reserveBatch([
      first,
      { policy, subject: "user-2", amount: 20000 },
      { policy: `${policy}-nope`, subject: "u", amount: 1 },
    ]);
    const held = ok(a);
    assert.equal(held.allowed, true);
    assert.match(held.reservation_id ?? "", /^rs_[0-9a-f]{32}$/);
    assert.equal(held.remaining, 6000);
    assert.equal(held.unit, "tokens");
    const refused = ok(b);
    assert.equal(refused.allowed, false);
    assert.equal(refused.reservation_id, undefined);
    assert.ok(refused.retry_after_ms > 0);
    assert.equal(refused.error, undefined);
    assert.ok(unknown instanceof APIError, String(unknown));
    assert.equal(unknown.status, 400);
    assert.equal(unknown.problem.field, "policy");

    const [again] = await c.reserveBatch([first]);
    assert.equal(ok(again).repeat, true, "the same key again is a repeat");
    assert.equal(ok(again).reservation_id, held.reservation_id);

    const gone = { ...held, reservation_id: `rs_${"0".repeat(32)}` };
    const [settled, missing, nothing] = await c.settleBatch([
      { reservation: held, used: 2750 },
      { reservation: gone, used: 1 },
      { reservation: refused, used: 5 },
    ]);
    assert.equal(ok(settled).returned, 1250);
    assert.equal(ok(settled).remaining, 7250);
    assert.equal(ok(settled).repeat, false);
    assert.ok(missing instanceof ReservationGoneError, String(missing));
    assert.equal(nothing, undefined, "a refused reservation holds nothing: nothing sent");
    const [repeat, other] = await c.settleBatch([
      { reservation: held, used: 2750 },
      { reservation: held, used: 100 },
    ]);
    assert.equal(ok(repeat).repeat, true);
    assert.ok(other instanceof SettledOtherwiseError, String(other));
  });

  test("a batch Tollgate cannot read reserves nothing and throws naming the entry", async () => {
    const policy = await budget();
    const c = client();
    const err = await c
      .reserveBatch([
        { policy, subject: "u", amount: 10 },
        { policy, subject: "u", amount: 0 },
      ])
      .catch((e) => e);
    assert.ok(err instanceof APIError, String(err));
    assert.equal(err.problem.field, "reservations[1].amount");
    assert.equal((await c.reserve({ policy, subject: "u", amount: 10000 })).allowed, true, "nothing was held");
  });

  test("without Tollgate: the fail mode reserves, a settlement throws", async () => {
    const c = client({ url: env.downURL, failMode: "open" });
    const rs = await c.reserveBatch([{ policy: "any", subject: "u", amount: 10 }]);
    const r = ok(rs[0]);
    assert.equal(r.allowed, true);
    assert.equal(r.degraded, true);
    assert.ok(r.error instanceof UnavailableError);
    await assert.rejects(
      c.settleBatch([{ reservation: { ...r, degraded: false, reservation_id: `rs_${"1".repeat(32)}` }, used: 1 }]),
      UnavailableError,
    );
  });
});

describe("withReservation", () => {
  /** @param {import("../dist/index.js").Client} c @param {string} policy @param {string} subject */
  const remaining = async (c, policy, subject) => (await c.peek({ policy, subject })).items[0]?.remaining;

  test("settles what the function used", async () => {
    const policy = await budget();
    const c = client();
    const spent = await c.withReservation({ policy, subject: "u", amount: 4000 }, async (r) => {
      assert.equal(await remaining(c, policy, "u"), 6000, "held while the function runs");
      assert.ok(r.reservation_id);
      return 2750;
    });
    assert.equal(spent.allowed, true);
    assert.equal(spent.settlement?.used, 2750);
    assert.equal(await remaining(c, policy, "u"), 7250);
  });

  test("releases when the function throws, and throws its error", async () => {
    const policy = await budget();
    const c = client();
    const failed = new Error("model unavailable");
    await assert.rejects(
      c.withReservation({ policy, subject: "u", amount: 4000 }, async () => {
        throw failed;
      }),
      (err) => err === failed,
    );
    assert.equal(await remaining(c, policy, "u"), 10000);
  });

  test("does not run the function when the budget refuses", async () => {
    const policy = await budget();
    const spent = await client().withReservation({ policy, subject: "u", amount: 20000 }, async () => {
      assert.fail("the function ran though the budget refused");
    });
    assert.equal(spent.allowed, false);
    assert.ok(spent.reservation.retry_after_ms > 0);
    assert.equal(spent.settlement, undefined);
  });

  test("fail modes: open runs the function and settles nothing, closed does not run it", async () => {
    const req = { policy: "any", subject: "u", amount: 10 };
    let ran = false;
    const open = await client({ url: env.downURL, failMode: "open" }).withReservation(req, async () => {
      ran = true;
      return 5;
    });
    assert.equal(ran, true);
    assert.equal(open.allowed, true);
    assert.equal(open.reservation.degraded, true);
    assert.equal(open.reservation.reservation_id, undefined);
    assert.ok(open.reservation.error instanceof UnavailableError);
    assert.equal(open.settlement, undefined);
    const closed = await client({ url: env.downURL, failMode: "closed" }).withReservation(req, async () => {
      assert.fail("the function ran though failing closed");
    });
    assert.equal(closed.allowed, false);
    assert.ok(closed.reservation.error instanceof UnavailableError);
  });
});

describe("the README's budget example", () => {
  const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
  const readme = readFileSync(join(pkg, "..", "..", "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1] ?? "");
  const snippet = blocks.find((b) => b.includes("withReservation")) ?? "";
  // An app outside the tree that finds the package by its name.
  const app = mkdtempSync(join(tmpdir(), "tollgate-readme-"));
  after(() => rmSync(app, { recursive: true, force: true }));

  test("is under 15 lines", () => {
    assert.ok(snippet, "README.md has a js block that calls withReservation");
    const lines = snippet.trimEnd().split("\n").length;
    assert.ok(lines < 15, `${lines} lines`);
  });

  test("runs as written: the model's tokens are charged, and a spent budget refuses the next call", () => {
    mkdirSync(join(app, "node_modules", "@tollgate"), { recursive: true });
    symlinkSync(pkg, join(app, "node_modules", "@tollgate", "client"), "dir");
    writeFileSync(join(app, "package.json"), JSON.stringify({ type: "module" }));
    writeFileSync(join(app, "snippet.js"), snippet);
    writeFileSync(
      join(app, "main.js"),
      `import { Client } from "@tollgate/client";
let tokens = 0, calls = 0;
globalThis.fakeModel = async (prompt) => {
  calls++;
  return { text: "echo " + prompt, usage: { total_tokens: tokens } };
};
const { ask } = await import("./snippet.js");
const tg = new Client({ url: process.env.TOLLGATE_URL, key: process.env.TOLLGATE_KEY, timeoutMs: 5000 });
const left = async (subject) => (await tg.peek({ policy: "llm-tokens", subject })).items[0].remaining;
const out = [];
tokens = 3000;
out.push(await ask("user-1", "hi"), await left("user-1"));
tokens = 97000;
out.push(await ask("user-1", "more"), await left("user-1"));
out.push(await ask("user-1", "again"), calls);
out.push(await ask("user-2", "hi"), await left("user-2"));
console.log(JSON.stringify(out));
`,
    );
    const out = execFileSync("node", ["main.js"], { cwd: app, encoding: "utf8" });
    assert.deepEqual(JSON.parse(out), [
      "echo hi",
      97000,
      "echo more",
      0,
      "You have used this month's tokens.",
      2,
      "echo hi",
      3000,
    ]);
  });
});
