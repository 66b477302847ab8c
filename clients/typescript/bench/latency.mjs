// The latency a protected request adds: one Hono app on Node.js, the same
// route with and without the middleware, asked one request at a time
// against the Tollgate at TOLLGATE_URL. Not a test: run it by hand,
//   TOLLGATE_URL=… TOLLGATE_KEY=… node bench/latency.mjs [requests]
// and say the machine's load average with the numbers.
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { Client } from "../dist/index.js";
import { rateLimit } from "../dist/hono.js";

const n = Number(process.argv[2] ?? 2000);
const policy = "bench-latency";
await new Client({ url: process.env.TOLLGATE_URL ?? "", key: process.env.TOLLGATE_KEY ?? "", timeoutMs: 5000 }).putPolicy(
  policy,
  { limit: 1_000_000_000, window: "1h" },
);
const app = new Hono();
app.use("/protected", rateLimit({ policy, timeoutMs: 1000 }));
app.get("/protected", (c) => c.text("ok"));
app.get("/plain", (c) => c.text("ok"));
const server = await new Promise((resolve) => {
  const s = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, (info) => resolve({ s, port: info.port }));
});
const base = `http://127.0.0.1:${server.port}`;

async function times(path) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const r = await fetch(base + path);
    await r.text();
    if (r.status !== 200) throw new Error(`${path}: ${r.status}`);
    out.push(performance.now() - t);
  }
  return out.sort((a, b) => a - b);
}
const q = (xs, p) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))];

await times("/protected"); // warm both paths: connections, JIT
const plain = await times("/plain");
const protectedT = await times("/protected");
const f = (x) => x.toFixed(2);
console.log(`requests ${n} each; ms plain p50 ${f(q(plain, 0.5))} p99 ${f(q(plain, 0.99))}; protected p50 ${f(q(protectedT, 0.5))} p99 ${f(q(protectedT, 0.99))}; added p50 ${f(q(protectedT, 0.5) - q(plain, 0.5))} p99 ${f(q(protectedT, 0.99) - q(plain, 0.99))}`);
server.s.close();
