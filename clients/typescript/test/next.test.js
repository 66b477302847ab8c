// @ts-check
// The Next.js helper in real Next.js apps: one with Next.js 16's proxy.ts
// (the Node.js runtime), one with middleware.ts (the Edge runtime), each
// built with next build (kept while its inputs are unchanged) and served
// with next start.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { client, env, leaks } from "./support.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const next = join(root, "node_modules", ".bin", "next");
// Where next runs: in a container or on CI, Next.js keeps a folder "cache"
// in its working directory, which belongs in neither the tree nor the app.
const cwd = mkdtempSync(join(tmpdir(), "tollgate-next-"));
after(() => rmSync(cwd, { recursive: true, force: true }));

/** Every file under dir but .next, sorted. @param {string} dir @returns {string[]} */
function files(dir) {
  return readdirSync(dir)
    .filter((f) => f !== ".next" && f !== "next-env.d.ts")
    .sort()
    .flatMap((f) => (statSync(join(dir, f)).isDirectory() ? files(join(dir, f)) : [join(dir, f)]));
}

/** The hash of what the build is made of: the app, the package, the lock.
 * @param {string} app */
function inputsHash(app) {
  const h = createHash("sha256");
  for (const f of [...files(app), ...files(join(root, "dist")), join(root, "package-lock.json")]) {
    h.update(f.slice(root.length)).update("\0").update(readFileSync(f)).update("\0");
  }
  return h.digest("hex");
}

/** Builds the app unless the last build was of the same inputs. @param {string} app */
function build(app) {
  const stamp = join(app, ".next", "tollgate-inputs.sha256");
  const want = inputsHash(app);
  if (existsSync(stamp) && readFileSync(stamp, "utf8") === want) return "kept";
  const r = spawnSync(next, ["build", app], { cwd, encoding: "utf8", env: { ...process.env, NEXT_TELEMETRY_DISABLED: "1" } });
  if (r.status !== 0) throw new Error(`next build failed:\n${r.stdout}\n${r.stderr}`);
  writeFileSync(stamp, want);
  return "built";
}

/** @returns {Promise<number>} */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (a && typeof a === "object" ? resolve(a.port) : reject(new Error("no port"))));
    });
  });
}

const apps = [
  { file: "proxy.ts", dir: join(root, "test", "next-app"), policy: "next-api", log: "tollgate proxy:" },
  { file: "middleware.ts", dir: join(root, "test", "next-app-middleware"), policy: "next-middleware-api", log: "tollgate middleware:" },
];

for (const { file, dir: app, policy, log: errorLine } of apps) {
  describe(`Next.js ${file} (next build + next start)`, () => {
    /** @type {import("node:child_process").ChildProcess} */
    let server;
    let base = "";
    let log = "";

    before(async () => {
      await client().putPolicy(policy, { limit: 2, window: "1m" });
      const started = Date.now();
      const how = build(app);
      console.log(`next build: ${how} in ${Date.now() - started} ms`);
      const port = await freePort();
      base = `http://127.0.0.1:${port}`;
      server = spawn(next, ["start", "-H", "127.0.0.1", "-p", String(port), app], {
        cwd,
        env: { ...process.env, TOLLGATE_URL: env.url, TOLLGATE_KEY: env.key, NEXT_TELEMETRY_DISABLED: "1" },
        stdio: ["ignore", "pipe", "pipe"],
      });
      const startedServer = Date.now();
      // Ready once it says so (or never, when it exits first); then it answers.
      await new Promise((resolve, reject) => {
        const hear = (/** @type {Buffer} */ b) => {
          log += b;
          if (log.includes("Ready in")) resolve(undefined);
        };
        server.stdout?.on("data", hear);
        server.stderr?.on("data", hear);
        server.on("exit", (code) => reject(new Error(`next start exited ${code}:\n${log}`)));
      });
      await fetch(`${base}/`);
      console.log(`next start: ready in ${Date.now() - startedServer} ms`);
    });
    after(() => {
      server?.kill("SIGTERM");
    });

    /** A request as the app's proxy passes it on, from client ip. */
    const ask = (/** @type {string} */ ip) => fetch(`${base}/api/hello`, { headers: { "x-real-ip": ip } });

    test("allowed requests carry the RateLimit fields; the third is refused with 429", async () => {
      const a = await ask("198.51.100.40");
      assert.equal(a.status, 200, log);
      assert.equal(log.includes(errorLine), false, log);
      assert.deepEqual(await a.json(), { hello: "world" });
      assert.equal(a.headers.get("ratelimit-policy"), `"${policy}";q=2;w=60`);
      assert.match(a.headers.get("ratelimit") ?? "", new RegExp(`^"${policy}";r=1;t=\\d+$`));
      assert.equal((await ask("198.51.100.40")).status, 200);
      const refused = await ask("198.51.100.40");
      assert.equal(refused.status, 429);
      assert.ok(Number(refused.headers.get("retry-after")) >= 1);
      assert.equal(refused.headers.get("content-type"), "application/problem+json");
      assert.deepEqual(leaks((await refused.text()) + JSON.stringify([...refused.headers])), []);
    });

    test("each client address has its own count; requests without one share a count", async () => {
      assert.equal((await ask("198.51.100.41")).status, 200);
      assert.equal((await fetch(`${base}/api/hello`)).status, 200);
      assert.equal((await fetch(`${base}/api/hello`)).status, 200);
      assert.equal((await fetch(`${base}/api/hello`, { headers: { "x-forwarded-for": "198.51.100.99" } })).status, 429);
    });
  });
}
