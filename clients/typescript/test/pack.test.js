// @ts-check
// The package as npm ships it, from a clone: the package's folder as git
// has it (no dist) is copied and packed with npm pack, whose prepack builds
// it; the tarball is installed into an empty app outside the tree, which
// imports it by name with node against Tollgate, and type-checks against
// its declarations with tsc --strict.
//
// The copy's node_modules is this folder's, the dev dependencies npm ci
// installed: on a clone without one, prepack runs that npm ci first (by
// hand: 77 packages, 318 MB, 21-31 s from npm's cache on the 2-core box),
// too much to repeat in every run of the suite.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, describe, test } from "node:test";
import { env, newPolicy } from "./support.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const pinned = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).devDependencies;
const tsc = join(root, "node_modules", ".bin", "tsc");
// npm's cache answers for what the lock pins and for the optional peers
// whose metadata npm reads, without asking the registry again.
const npmEnv = { ...process.env, npm_config_prefer_offline: "true", npm_config_audit: "false", npm_config_fund: "false" };

describe("npm pack", () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-client-pack-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  test("a clone packs its code: the tarball holds dist, README, LICENSE and package.json", async () => {
    const clone = join(dir, "clone");
    // What a clone has: the files git tracks (and new ones not ignored).
    const files = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard"], { cwd: root, encoding: "utf8" })
      .split("\n")
      .filter(Boolean);
    assert.ok(!files.some((f) => f.startsWith("dist/") || f.startsWith("node_modules/")));
    for (const f of files) {
      mkdirSync(dirname(join(clone, f)), { recursive: true });
      copyFileSync(join(root, f), join(clone, f));
    }
    symlinkSync(join(root, "node_modules"), join(clone, "node_modules"), "dir");
    const [packed] = JSON.parse(
      execFileSync("npm", ["pack", "--json", "--pack-destination", dir], { cwd: clone, encoding: "utf8", env: npmEnv }),
    );
    console.log(`tarball ${packed.filename}: ${packed.size} bytes packed, ${packed.unpackedSize} unpacked, ${packed.entryCount} files`);
    const paths = packed.files.map((/** @type {{ path: string }} */ f) => f.path).sort();
    for (const p of paths) assert.match(p, /^(dist\/[a-z]+\.(js|d\.ts)|README\.md|LICENSE|package\.json)$/, p);
    for (const m of ["index", "client", "answer", "hono", "next"]) {
      assert.ok(paths.includes(`dist/${m}.js`) && paths.includes(`dist/${m}.d.ts`), `dist/${m} missing: ${paths.join(" ")}`);
    }
    assert.ok(paths.includes("LICENSE"));

    const app = join(dir, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "example", private: true, type: "module" }));
    execFileSync("npm", ["install", join(dir, packed.filename), `hono@${pinned.hono}`], { cwd: app, env: npmEnv });
    const manifest = JSON.parse(readFileSync(join(app, "node_modules", "@tollgate", "client", "package.json"), "utf8"));
    assert.equal(manifest.license, "Apache-2.0");
    assert.match(manifest.repository?.url ?? "", /github\.com\/tollgate\/tollgate/);
    assert.equal(manifest.types, "./dist/index.d.ts");
    assert.deepEqual(manifest.dependencies ?? {}, {}, "no runtime dependencies");

    const policy = await newPolicy("example", { limit: 1, window: "1m" });
    writeFileSync(
      join(app, "main.js"),
      `import { Client, guard } from "@tollgate/client";
import { rateLimit } from "@tollgate/client/hono";
const c = new Client({ url: process.env.TOLLGATE_URL, key: process.env.TOLLGATE_KEY, timeoutMs: 5000 });
const first = await c.check({ policy: ${JSON.stringify(policy)}, subject: "example-user" });
const second = await c.check({ policy: ${JSON.stringify(policy)}, subject: "example-user" });
const degraded = first.degraded || second.degraded;
console.log(JSON.stringify({ first: first.allowed, second: second.allowed, degraded, hono: typeof rateLimit, guard: typeof guard }));
`,
    );
    const out = execFileSync("node", ["main.js"], { cwd: app, encoding: "utf8", env: { ...process.env, TOLLGATE_URL: env.url } });
    assert.deepEqual(JSON.parse(out), { first: true, second: false, degraded: false, hono: "function", guard: "function" });

    // The declarations as an app under tsc --strict reads them: the README's
    // uses compile, and a wrong one does not (the types are read, not any).
    writeFileSync(
      join(app, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          target: "ES2022",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          lib: ["ES2022", "DOM", "DOM.Iterable"],
          types: [],
          noEmit: true,
        },
        files: ["app.ts"],
      }),
    );
    writeFileSync(
      join(app, "app.ts"),
      `import { Client, type Decision, UnavailableError, guard, withHeaders } from "@tollgate/client";
import { type RateLimitEnv, rateLimit } from "@tollgate/client/hono";
import { type Context, Hono } from "hono";

const client = new Client({ url: "https://tollgate.example.com", key: "tg_live_example" });

export async function allowed(): Promise<boolean> {
  const d: Decision = await client.check({ policy: "api", subject: "user-1" });
  if (d.error instanceof UnavailableError) console.error(d.error.message);
  // @ts-expect-error allowed is a boolean
  const n: number = d.allowed;
  return d.allowed && n !== 1;
}

const limited = guard({ policy: "api", url: "https://tollgate.example.com", key: "tg_live_example" });
export async function serve(req: Request): Promise<Response> {
  const o = await limited.decide(req);
  return o.response ?? withHeaders(new Response("hello"), o.headers);
}

const app = new Hono();
app.use("/api/*", rateLimit({ policy: "api" }));
app.get("/api/hello", (c) => c.json({ degraded: c.get("tollgate").degraded }));
export const named = (c: Context<RateLimitEnv>): boolean => c.get("tollgate").allowed;
export default app;
`,
    );
    execFileSync(tsc, ["-p", "tsconfig.json"], { cwd: app, encoding: "utf8" });
  });
});
