// The first call of a cold process: PROCS (20) fresh node processes, one
// after another, each makes a Client with the default timeouts and times
// its first call, against the Tollgate at TOLLGATE_URL. The calls: "check"
// (one check of a policy of its own), "put" (putPolicy), "verify" (verify
// of that policy) and, to compare with, "warm" (a second check, the
// process's first having been made a moment before). BURN (0) processes spin on the CPU meanwhile,
// each a busy loop, to load the machine as a busy server is. Not a test:
// run it by hand,
//   npm run build && TOLLGATE_URL=… TOLLGATE_KEY=… BURN=8 node bench/firstcall.mjs [check warm put verify]
// and say the machine's load average with the numbers. Per call: how many
// of the first calls had Tollgate's answer (for a check: not degraded),
// and the p50 and max of their latency in ms. DIST names another build
// of the package to measure (default ../dist).
import { spawn, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Client } from "../dist/index.js";

const url = process.env.TOLLGATE_URL ?? "";
const key = process.env.TOLLGATE_KEY ?? "";
const procs = Number(process.env.PROCS ?? 20);
const burn = Number(process.env.BURN ?? 0);
const dist = process.env.DIST ?? fileURLToPath(new URL("../dist/", import.meta.url));
const calls = process.argv.slice(2).length > 0 ? process.argv.slice(2) : ["check", "warm", "put", "verify"];
const policy = "bench-firstcall";

await new Client({ url, key, timeoutMs: 5000 }).putPolicy(policy, { limit: 1_000_000_000, window: "1h" });

// One cold process: imports the package, makes a Client and times one call.
const child = `
const { Client } = await import(process.env.DIST_INDEX);
const c = new Client({ url: process.env.TOLLGATE_URL, key: process.env.TOLLGATE_KEY });
const policy = ${JSON.stringify(policy)};
const call = process.argv[1];
const t = performance.now();
let ok = true, why = "";
try {
  if (call === "check") {
    const d = await c.check({ policy, subject: "s" + Math.random() });
    ok = !d.degraded;
    why = d.error?.message ?? "";
  } else if (call === "warm") {
    await c.check({ policy, subject: "s" + Math.random() });
    await new Promise((resolve) => setTimeout(resolve, 10));
    const t2 = performance.now();
    const d = await c.check({ policy, subject: "s" + Math.random() });
    ok = !d.degraded;
    why = d.error?.message ?? "";
    console.log(JSON.stringify({ ms: performance.now() - t2, ok, why }));
    process.exit(0);
  } else if (call === "put") {
    await c.putPolicy(policy, { limit: 1_000_000_000, window: "1h" });
  } else {
    await c.verify([policy]);
  }
} catch (err) {
  ok = false;
  why = String(err.message);
}
console.log(JSON.stringify({ ms: performance.now() - t, ok, why }));
`;

const burners = [];
for (let i = 0; i < burn; i++) {
  // Each stops by itself after ten minutes, should this script die first.
  burners.push(spawn("node", ["-e", "const end = Date.now() + 600000; while (Date.now() < end);"], { stdio: "ignore" }));
}
try {
  for (const call of calls) {
    const rows = [];
    for (let i = 0; i < procs; i++) {
      const r = spawnSync("node", ["--input-type=module", "-e", child, call], {
        encoding: "utf8",
        env: { ...process.env, DIST_INDEX: `${dist.replace(/\/?$/, "/")}index.js` },
      });
      if (r.status !== 0) throw new Error(`child exited ${r.status}: ${r.stderr}`);
      rows.push(JSON.parse(r.stdout.trim().split("\n").pop() ?? ""));
    }
    const ms = rows.map((r) => r.ms).sort((a, b) => a - b);
    const ok = rows.filter((r) => r.ok).length;
    const whys = [...new Set(rows.filter((r) => !r.ok).map((r) => r.why))];
    console.log(
      `${call}: ${ok} of ${procs} answered; ms p50 ${ms[Math.floor(ms.length / 2)]?.toFixed(1)} max ${ms.at(-1)?.toFixed(1)}${whys.length ? `; failed: ${whys.join(" | ")}` : ""}`,
    );
  }
} finally {
  for (const b of burners) b.kill();
}
