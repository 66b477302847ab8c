import type { Context, MiddlewareHandler } from "hono";
import type { Decision } from "./client.js";
import { type LimitOptions, Limiter, type TollgateEnv, withHeaders } from "./limit.js";

export { type LimitOptions, UNKEYED } from "./limit.js";
export type { Decision } from "./client.js";

/** The variable of the Hono context that holds Tollgate's decision. */
export const DECISION = "tollgate";

/** The context variables rateLimit sets: `c.get("tollgate")` is the decision. */
export interface RateLimitVariables {
  tollgate: Decision;
}

/** The Hono env of an app or route behind rateLimit, for code that names its
 * env: `new Hono<RateLimitEnv>()`, `Context<RateLimitEnv>`. */
export interface RateLimitEnv {
  Variables: RateLimitVariables;
}

// As Hono's own middleware do: importing this module types
// c.get("tollgate") in every app, no generic written by hand.
declare module "hono" {
  interface ContextVariableMap extends RateLimitVariables {}
}

/**
 * rateLimit is Hono middleware that checks every request against
 * opts.policy: refused requests get 429 with Retry-After and a problem body,
 * allowed ones go on and their answer carries RateLimit-Policy and
 * RateLimit, and the decision is in `c.get("tollgate")`. It runs wherever
 * Hono does: Node.js (@hono/node-server), Cloudflare Workers, Deno, Bun.
 * TOLLGATE_URL and TOLLGATE_KEY are read from the platform's env (a
 * Worker's bindings, process.env on Node) unless given.
 *
 * The client's address is the TCP peer's where the runtime tells it
 * (Node.js, Bun, Deno), or, with `platform: "cloudflare"`, cf-connecting-ip.
 */
export function rateLimit(opts: LimitOptions): MiddlewareHandler<RateLimitEnv> {
  const l = new Limiter(opts);
  return async (c, next) => {
    const o = await l.decide(c.req.raw, peerOf(c), c.env as TollgateEnv | undefined);
    if (o.response) return o.response;
    c.set(DECISION, o.decision);
    await next();
    const res = withHeaders(c.res, o.headers);
    if (res !== c.res) c.res = res;
  };
}

/** The TCP peer's address as each of Hono's adapters gives it. */
function peerOf(c: Context): string | undefined {
  const env = c.env as
    | {
        incoming?: { socket?: { remoteAddress?: string } }; // @hono/node-server
        requestIP?: (r: Request) => { address?: string } | null; // Bun's server
        remoteAddr?: { hostname?: string }; // Deno.serve's info
      }
    | undefined;
  if (!env || typeof env !== "object") return undefined;
  if (env.incoming?.socket?.remoteAddress) return env.incoming.socket.remoteAddress;
  if (typeof env.requestIP === "function") return env.requestIP(c.req.raw)?.address ?? undefined;
  return env.remoteAddr?.hostname;
}
