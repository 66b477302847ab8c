import { NextResponse } from "next/server.js";
import { headerAddress } from "./ip.js";
import { type LimitOptions, Limiter, type Outcome } from "./limit.js";

export { type LimitOptions, UNKEYED } from "./limit.js";

/**
 * rateLimit returns a Next.js proxy or middleware that checks every request
 * it matches against opts.policy: refused requests get 429 with Retry-After
 * and a problem body; allowed ones go on, their answer carrying
 * RateLimit-Policy and RateLimit. Next.js 16 calls it from proxy.ts
 * (`export const proxy = rateLimit(…)`, the Node.js runtime); Next.js 14 and
 * 15, or 16 on the Edge runtime, from middleware.ts (`export const
 * middleware = rateLimit(…)`). TOLLGATE_URL and TOLLGATE_KEY are read from
 * process.env unless given.
 *
 * A Next.js middleware sees no TCP peer, and `next start` passes on the
 * X-Forwarded-For a client sent, so keying by address needs one of: on
 * Vercel, `platform: "vercel"` (x-real-ip, which Vercel's edge sets); behind
 * a proxy of your own, `header` naming the header it sets to the client's
 * address ("x-real-ip", or "x-forwarded-for" whose last hop it appends).
 * Without either, rateLimit throws rather than key by what clients choose.
 */
export function rateLimit(opts: LimitOptions): (req: Request) => Promise<Response> {
  const decide = nextLimiter(opts);
  return async (req) => {
    const o = await decide(req);
    return o.response ?? NextResponse.next({ headers: o.headers });
  };
}

/** nextLimiter is rateLimit's decision alone, for a proxy or middleware
 * that does more than limit: send `response` when there is one, else go on
 * with `headers`. */
export function nextLimiter(opts: LimitOptions): (req: Request) => Promise<Outcome> {
  let o = opts;
  if ((opts.by ?? "ip") === "ip" && !opts.platform) {
    if (!opts.header) {
      throw new TypeError(
        'tollgate: a Next.js middleware sees no client address: say platform: "vercel" on Vercel, header: the header your proxy sets, or key by something else',
      );
    }
    o = { ...opts, by: headerAddress(opts.header, opts.ipv6Prefix) };
  }
  const l = new Limiter(o);
  return (req) => l.decide(req);
}
