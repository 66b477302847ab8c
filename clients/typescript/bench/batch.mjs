// Checks a second through the client's batching, one Node.js process, as
// scripts/bench-batch.sh measures the Go client: CALLERS (64) callers, each
// checking a random subject among 100,000 one check at a time for SECONDS
// (8), against the Tollgate at TOLLGATE_URL, once per batch size given
// (default: 16 and 100) and once without batching. Not a test: run it by
// hand,
//   npm run build && TOLLGATE_URL=… TOLLGATE_KEY=… node bench/batch.mjs [size…]
// and say the machine's load average with the numbers. Per row: checks a
// second, requests a check, Node's CPU (user+system) a check in µs, and
// p50/p99 a check.
import { Client } from "../dist/index.js";

const url = process.env.TOLLGATE_URL ?? "";
const key = process.env.TOLLGATE_KEY ?? "";
const callers = Number(process.env.CALLERS ?? 64);
const seconds = Number(process.env.SECONDS ?? 8);
const sizes = process.argv.slice(2).map(Number);
const policy = "bench";

await new Client({ url, key, timeoutMs: 5000 }).putPolicy(policy, {
  limit: 1_000_000_000,
  window: "1h",
  algorithm: "fixed_window",
});

// run drives the callers through a client of batch size size (0: none) for
// ms milliseconds.
async function run(size, ms) {
  let requests = 0;
  const counting = (input, init) => {
    requests++;
    return fetch(input, init);
  };
  const c = new Client({
    url,
    key,
    timeoutMs: 5000,
    fetch: counting,
    ...(size > 0 ? { batching: { maxDelayMs: 1, maxChecks: size } } : {}),
  });
  const lat = [];
  const end = performance.now() + ms;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (performance.now() < end) {
        const t = performance.now();
        await c.check({ policy, subject: `user-${Math.floor(Math.random() * 100_000)}` });
        lat.push(performance.now() - t);
      }
    }),
  );
  const took = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  lat.sort((a, b) => a - b);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))];
  return {
    size,
    perSecond: lat.length / took,
    perRequest: lat.length / requests,
    cpuUs: (cpu.user + cpu.system) / lat.length,
    p50: q(0.5),
    p99: q(0.99),
  };
}

console.log("batch  checks/s  checks/req  node_cpu_us  p50_ms  p99_ms");
for (const size of [0, ...(sizes.length > 0 ? sizes : [16, 100])]) {
  await run(size, 2000); // warm: connections, JIT
  const r = await run(size, seconds * 1000);
  console.log(
    `${String(r.size || "none").padEnd(6)} ${r.perSecond.toFixed(0).padStart(8)} ${r.perRequest.toFixed(1).padStart(11)} ${r.cpuUs.toFixed(1).padStart(12)} ${r.p50.toFixed(2).padStart(7)} ${r.p99.toFixed(2).padStart(7)}`,
  );
}
