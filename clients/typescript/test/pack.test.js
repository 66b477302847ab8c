// @ts-check
// The package as npm ships it: npm pack, then installed by an app outside
// this tree that imports it by name and checks against Tollgate.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, describe, test } from "node:test";
import { client, env } from "./support.js";

const root = fileURLToPath(new URL("..", import.meta.url));

describe("npm pack", () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-client-example-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  test("the tarball holds dist, README and package.json only, and an app installs and uses it", async () => {
    const [packed] = JSON.parse(
      execFileSync("npm", ["pack", "--json", "--pack-destination", dir], { cwd: root, encoding: "utf8" }),
    );
    console.log(`tarball ${packed.filename}: ${packed.size} bytes packed, ${packed.unpackedSize} unpacked, ${packed.entryCount} files`);
    for (const f of packed.files) assert.match(f.path, /^(dist\/[a-z]+\.(js|d\.ts)|README\.md|package\.json)$/, f.path);
    const app = join(dir, "app");
    execFileSync("mkdir", ["-p", app]);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "example", private: true, type: "module" }));
    // --prefer-offline: npm's cache answers for the optional peers (Hono,
    // Next.js) whose metadata npm reads, without asking the registry again.
    execFileSync("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", join(dir, packed.filename)], { cwd: app });
    await client().putPolicy("example", { limit: 1, window: "1m" });
    writeFileSync(
      join(app, "main.js"),
      `import { Client, guard } from "@tollgate/client";
import { rateLimit } from "@tollgate/client/hono";
const c = new Client({ url: process.env.TOLLGATE_URL, key: process.env.TOLLGATE_KEY, timeoutMs: 5000 });
const first = await c.check({ policy: "example", subject: "example-user" });
const second = await c.check({ policy: "example", subject: "example-user" });
const degraded = first.degraded || second.degraded;
console.log(JSON.stringify({ first: first.allowed, second: second.allowed, degraded, hono: typeof rateLimit, guard: typeof guard }));
`,
    );
    const out = execFileSync("node", ["main.js"], { cwd: app, encoding: "utf8", env: { ...process.env, TOLLGATE_URL: env.url } });
    assert.deepEqual(JSON.parse(out), { first: true, second: false, degraded: false, hono: "function", guard: "function" });
  });
});
