import { NextResponse } from "next/server.js";
import { type LimitOptions, Limiter, type Outcome } from "./limit.js";

export { type LimitOptions, UNKEYED } from "./limit.js";

/**
 * rateLimit returns a Next.js middleware (middleware.ts, Edge or Node.js
 * runtime) that checks every request it matches against opts.policy:
 * refused requests get 429 with Retry-After and a problem body; allowed
 * ones go on, their answer carrying RateLimit-Policy and RateLimit.
 * TOLLGATE_URL and TOLLGATE_KEY are read from process.env unless given.
 *
 * The client's address: on Vercel say `platform: "vercel"` (x-real-ip);
 * under `next start` the middleware sees no socket, and the address is the
 * last hop of X-Forwarded-For, which Next.js's own server appends, with
 * `trustedProxies` walked past as for any proxy.
 */
export function rateLimit(opts: LimitOptions): (req: Request) => Promise<Response> {
  const decide = nextLimiter(opts);
  return async (req) => {
    const o = await decide(req);
    return o.response ?? NextResponse.next({ headers: o.headers });
  };
}

/** nextLimiter is rateLimit's decision alone, for a middleware that does more
 * than limit: send `response` when there is one, else go on with `headers`. */
export function nextLimiter(opts: LimitOptions): (req: Request) => Promise<Outcome> {
  const l = new Limiter(opts);
  return (req) => l.decide(req, opts.platform ? undefined : lastHop(req));
}

/** The hop Next.js's server appended to X-Forwarded-For: its TCP peer. */
function lastHop(req: Request): string | undefined {
  const xff = req.headers.get("x-forwarded-for");
  if (!xff) return undefined;
  const hops = xff.split(",");
  return hops[hops.length - 1]!.trim();
}
