// Builds dist/ anew from src/: `npm run build`, and npm pack and npm publish
// (prepack), so that a package is never packed without its code or with
// files of a source since removed. A fresh clone has no node_modules: the
// locked dev dependencies the build needs are installed first (npm ci,
// without install scripts or the optional runtimes' binaries).
import { execFileSync } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL(".", import.meta.url));
const tsc = join(root, "node_modules", ".bin", "tsc");
// Output to stderr: npm pack --json prints its answer on stdout.
const run = (/** @type {string} */ cmd, /** @type {string[]} */ args) =>
  execFileSync(cmd, args, { cwd: root, stdio: ["ignore", 2, 2], shell: process.platform === "win32" });

if (!existsSync(tsc)) {
  console.error("@tollgate/client: no node_modules: npm ci of the dev dependencies the build needs");
  run("npm", ["ci", "--ignore-scripts", "--omit=optional", "--no-audit", "--no-fund", "--json=false"]);
}
rmSync(join(root, "dist"), { recursive: true, force: true });
run(tsc, ["-p", "tsconfig.json"]);
