// @ts-check
// The package on Bun and Deno, the versions package.json pins, installed
// from npm as dev dependencies: each runs test/fixtures/smoke.js against the
// real Tollgate, and the tests here check what it printed.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { env, leaks } from "./support.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const pinned = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).devDependencies;
const smoke = join("test", "fixtures", "smoke.js");
// Deno's own cache, empty as on a new machine, and removed after.
const denoDir = mkdtempSync(join(tmpdir(), "tollgate-deno-"));
after(() => rmSync(denoDir, { recursive: true, force: true }));

const runtimes = [
  { name: "Bun", version: pinned.bun, bin: join(root, "node_modules", ".bin", "bun"), args: [smoke] },
  {
    name: "Deno",
    version: pinned.deno,
    bin: join(root, "node_modules", ".bin", "deno"),
    // The permissions the client needs: Tollgate and the test's own server
    // on the loopback, and the variables it reads.
    args: [
      "run",
      "--quiet",
      "--no-prompt",
      "--no-lock",
      "--allow-net=127.0.0.1",
      "--allow-env=TOLLGATE_URL,TOLLGATE_KEY,TOLLGATE_DOWN_URL",
      smoke,
    ],
  },
];

/**
 * Runs bin args in the package's folder, where its node_modules is, and
 * returns the JSON line it printed.
 * @param {string} bin @param {string[]} args
 * @returns {Promise<Record<string, any>>}
 */
function run(bin, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, {
      cwd: root,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        TOLLGATE_URL: env.url,
        TOLLGATE_KEY: env.key,
        TOLLGATE_DOWN_URL: env.downURL,
        DENO_DIR: denoDir,
        DENO_NO_UPDATE_CHECK: "1",
        DO_NOT_TRACK: "1",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (b) => (stdout += b));
    child.stderr.on("data", (b) => (stderr += b));
    // Not a timing assertion: a runtime that never exits fails here rather
    // than hang the suite.
    const limit = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("error", reject);
    child.on("close", (code, signal) => {
      clearTimeout(limit);
      const line = stdout.trim().split("\n").pop() ?? "";
      if (code !== 0 || !line.startsWith("{")) {
        reject(new Error(`${bin} ${args.join(" ")} exited ${code ?? signal}:\n${stdout}\n${stderr}`));
        return;
      }
      resolve(JSON.parse(line));
    });
  });
}

for (const rt of runtimes) {
  describe(`${rt.name} ${rt.version}`, () => {
    /** @type {Record<string, any>} */
    let r = {};

    before(async () => {
      r = await run(rt.bin, rt.args);
    });

    test("it ran in the pinned runtime", () => {
      assert.equal(r.runtime, `${rt.name.toLowerCase()} ${rt.version}`);
    });

    test("a check is allowed, then refused by a policy of limit 1", () => {
      assert.deepEqual({ ...r.check, retryAfterMs: r.check.retryAfterMs > 0 }, {
        first: true,
        second: false,
        degraded: false,
        retryAfterMs: true,
      });
    });

    test("the Hono middleware on the runtime's server answers 429 with Retry-After, keyed by the TCP peer", () => {
      const { first, second, peerSpent } = r.hono;
      assert.equal(first.status, 200, JSON.stringify(r.hono));
      assert.equal(JSON.parse(first.body).hello, "world");
      assert.match(first.rateLimitPolicy ?? "", /^"smoke-hono-[0-9a-f]+";q=1;w=60$/);
      assert.equal(second.status, 429, "a client's X-Forwarded-For changes nothing");
      assert.ok(Number(second.retryAfter) >= 1, `Retry-After ${second.retryAfter}`);
      assert.equal(second.contentType, "application/problem+json");
      assert.deepEqual(leaks(second.body), []);
      assert.equal(peerSpent, true, "the requests were counted under the peer's address");
    });

    test("the guard answers 429 with Retry-After", () => {
      const { first, second } = r.guard;
      assert.equal(first.status, 200, JSON.stringify(r.guard));
      assert.equal(first.body, "hello");
      assert.equal(second.status, 429);
      assert.ok(Number(second.retryAfter) >= 1, `Retry-After ${second.retryAfter}`);
      assert.deepEqual(leaks(second.body), []);
    });

    test("a stopped Tollgate: the client fails open, marked degraded; the guard lets requests on", () => {
      assert.deepEqual(r.failOpen, { allowed: true, degraded: true, error: "UnavailableError", guardLetsOn: true });
    });

    test("a wrong key throws APIError 401; the guard answers 500 and says why", () => {
      assert.deepEqual(r.wrongKey, { threw: true, status: 401, guardStatus: 500, heard: ["APIError"] });
    });
  });
}
