import { Client, type Decision, type FailMode, retryAfterMs } from "./client.js";
import { RateLimitedError, type TollgateError, failModeDecides } from "./errors.js";
import { type IPOptions, clientAddress } from "./ip.js";

/** The subject of the one counter every request without a key is counted
 * in: requests that cannot be told apart share a limit rather than escape it. */
export const UNKEYED = "unkeyed";

/** What a request is counted as: its client's address ("ip", the default), a
 * header's value, or any function of the request. Key by a header only when
 * the app itself has checked it or its own proxy sets it: a client chooses
 * its headers. */
export type KeyBy = "ip" | { header: string } | ((req: Request) => string | Promise<string>);

/** The variables a platform's environment may hold, read when `url` or
 * `key` is not given. */
export interface TollgateEnv {
  TOLLGATE_URL?: string;
  TOLLGATE_KEY?: string;
}

export interface LimitOptions extends IPOptions {
  /** The policy every request is checked against (a consume check). */
  policy: string;
  /** The client to check with; otherwise one is made from url and key. */
  client?: Client;
  /** Tollgate's base URL; default the environment's TOLLGATE_URL (the
   * platform's bindings on Workers, process.env elsewhere). */
  url?: string;
  /** The API key; default the environment's TOLLGATE_KEY. */
  key?: string;
  /** For the client made from url and key: each check's timeout (default 100 ms). */
  timeoutMs?: number;
  /** For the client made from url and key: what its first call may spend
   * opening the connection before the check's timeout starts (default 2,000 ms). */
  connectTimeoutMs?: number;
  /** For the client made from url and key: default "open". */
  failMode?: FailMode;
  /** What a request is counted as; default "ip". */
  by?: KeyBy;
  /** What each request spends; default 1. */
  cost?: number;
  /** The policy's name in the RateLimit-Policy and RateLimit fields the
   * app's clients see (printable ASCII); default the policy's. */
  name?: string;
  /** Hears every check that had no decision from Tollgate (to log: the error
   * never reaches the app's clients). When absent, the errors that fail a
   * request (a wrong key, an unknown policy) are logged with console.error;
   * those the fail mode answers are not. */
  onError?: (err: TollgateError, req: Request) => void;
}

/** The limiter's verdict on one request. */
export interface Outcome {
  /** The answer to send instead of the app's, when the request may not go
   * on: 429 (refused by the policy), 503 with Retry-After (fail mode
   * "closed" with no decision) or 500 (Tollgate refused the check as wrong). */
  response?: Response;
  /** The RateLimit-Policy and RateLimit fields for the app's answer. */
  headers: Headers;
  /** Tollgate's decision; `degraded` when the fail mode made it. */
  decision: Decision;
}

/**
 * Limiter checks requests against one policy and turns Tollgate's decision
 * into an HTTP answer; the guard, the Hono middleware and the Next.js helper
 * are made of it.
 */
export class Limiter {
  readonly #opts: LimitOptions;
  readonly #name: string;
  readonly #key: (req: Request, peer?: string) => string | Promise<string>;
  #client: Client | undefined;

  constructor(opts: LimitOptions) {
    if (!opts.policy) throw new TypeError("tollgate: no policy");
    if (opts.cost !== undefined && !(opts.cost >= 0)) throw new TypeError(`tollgate: cost ${opts.cost}: must be at least 0`);
    const name = opts.name ?? opts.policy;
    if (!/^[\x20-\x7e]*$/.test(name)) {
      throw new TypeError(`tollgate: name ${JSON.stringify(name)}: the RateLimit fields carry printable ASCII only`);
    }
    this.#opts = opts;
    this.#name = `"${name.replace(/["\\]/g, "\\$&")}"`;
    this.#client = opts.client;
    const by = opts.by ?? "ip";
    if (by === "ip") {
      const addr = clientAddress(opts);
      this.#key = addr;
    } else if (typeof by === "function") {
      this.#key = by;
    } else {
      const h = by.header.toLowerCase();
      this.#key = (req) => (req.headers.get(h) ?? "").trim();
    }
  }

  /** The client, made on first use from the options or env. */
  client(env?: TollgateEnv): Client {
    if (this.#client) return this.#client;
    const url = this.#opts.url ?? env?.TOLLGATE_URL ?? processEnv("TOLLGATE_URL");
    const key = this.#opts.key ?? env?.TOLLGATE_KEY ?? processEnv("TOLLGATE_KEY");
    if (!url || !key) throw new TypeError("tollgate: no url and key given, and no TOLLGATE_URL and TOLLGATE_KEY in the environment");
    const c = new Client({
      url,
      key,
      timeoutMs: this.#opts.timeoutMs,
      connectTimeoutMs: this.#opts.connectTimeoutMs,
      failMode: this.#opts.failMode,
    });
    this.#client = c;
    return c;
  }

  /** Checks req, whose TCP peer's address is peer when the runtime tells it. */
  async decide(req: Request, peer?: string, env?: TollgateEnv): Promise<Outcome> {
    const headers = new Headers();
    const subject = (await this.#key(req, peer)) || UNKEYED;
    let decision: Decision;
    try {
      decision = await this.client(env).check(
        { policy: this.#opts.policy, subject, cost: this.#opts.cost },
        { signal: req.signal },
      );
    } catch (err) {
      // Tollgate refused the check as wrong: a limit that is silently off
      // would be found only when it was needed.
      this.#hear(err as TollgateError, req, true);
      return {
        response: problem(500, "The request cannot be served now."),
        headers,
        decision: { allowed: false, degraded: true, items: [], error: err as TollgateError },
      };
    }
    if (decision.error) {
      this.#hear(decision.error, req, !failModeDecides(decision.error));
      if (decision.allowed) return { headers, decision };
      // When to ask again: Tollgate's own ceiling says; an outage, soon.
      const e = decision.error;
      const retry = e instanceof RateLimitedError ? Math.max(1, e.retryAfterSeconds) : 1;
      const response = problem(503, `The request cannot be admitted now; try again in ${retry} s.`);
      response.headers.set("Retry-After", String(retry));
      return { response, headers, decision };
    }
    // The one item is the quota the fields name; when it refuses,
    // RateLimit's t and Retry-After are both its wait.
    const retry = decision.allowed ? 0 : Math.max(1, Math.ceil(retryAfterMs(decision) / 1000));
    const it = decision.items.length === 1 ? decision.items[0]! : undefined;
    // A shadow policy limits nobody yet, and a degraded answer has no exact
    // count: neither is published.
    if (it && !it.shadow && !it.degraded) {
      const t = decision.allowed ? Math.max(0, Math.ceil((Date.parse(it.reset_at) - Date.now()) / 1000)) : retry;
      headers.append(
        "RateLimit-Policy",
        `${this.#name};q=${it.limit}${it.window_seconds > 0 ? `;w=${it.window_seconds}` : ""}`,
      );
      headers.append("RateLimit", `${this.#name};r=${it.remaining};t=${t}`);
    }
    if (decision.allowed) return { headers, decision };
    const response = problem(429, `Too many requests; retry in ${retry} s.`, headers);
    response.headers.set("Retry-After", String(retry));
    return { response, headers, decision };
  }

  #hear(err: TollgateError, req: Request, refused: boolean): void {
    if (this.#opts.onError) this.#opts.onError(err, req);
    else if (refused) console.error(`tollgate: check of policy ${this.#opts.policy} refused:`, err);
  }
}

/** A guard: undefined when the request may go on, else the answer to send. */
export interface Guard {
  (req: Request, peer?: string, env?: TollgateEnv): Promise<Response | undefined>;
  /** The same check, with what an allowed request's answer should carry:
   * send `response` when there is one, else the app's answer with
   * `headers` (the RateLimit-Policy and RateLimit fields) added, as
   * `withHeaders(res, outcome.headers)` does. */
  decide(req: Request, peer?: string, env?: TollgateEnv): Promise<Outcome>;
}

/** guard checks every request it is given against opts.policy, for any
 * runtime that speaks the Fetch API: it resolves to undefined when the
 * request may go on, or the answer to send instead (429 with Retry-After,
 * 503 with Retry-After or 500, each a problem+json body that says nothing of
 * Tollgate). Pass the TCP peer's address when the runtime gives one, and
 * the platform's env when TOLLGATE_URL and TOLLGATE_KEY live there. Its
 * `decide` also gives the RateLimit fields of an allowed request. */
export function guard(opts: LimitOptions): Guard {
  const l = new Limiter(opts);
  const decide = (req: Request, peer?: string, env?: TollgateEnv) => l.decide(req, peer, env);
  const g = async (req: Request, peer?: string, env?: TollgateEnv) => (await decide(req, peer, env)).response;
  return Object.assign(g, { decide });
}

/** A fetch handler of Workers, Deno or Bun: (request, env or info, ctx). */
export type FetchHandler<E> = (req: Request, env: E, ctx: unknown) => Response | Promise<Response>;

/** protect wraps a fetch handler (a Worker's `fetch`, say): refused requests
 * get the guard's answer, allowed ones the handler's with the RateLimit
 * fields added. The handler's second argument is read for TOLLGATE_URL and
 * TOLLGATE_KEY (a Worker's bindings). */
export function protect<E>(opts: LimitOptions, handler: FetchHandler<E>): FetchHandler<E> {
  const l = new Limiter(opts);
  return async (req, env, ctx) => {
    const o = await l.decide(req, undefined, env as TollgateEnv | undefined);
    if (o.response) return o.response;
    return withHeaders(await handler(req, env, ctx), o.headers);
  };
}

/** res with the fields of h appended (a copy when res's are immutable, as a
 * fetched answer's are on Workers). */
export function withHeaders(res: Response, h: Headers): Response {
  if ([...h.keys()].length === 0) return res;
  let out = res;
  try {
    h.forEach((v, k) => out.headers.append(k, v));
  } catch {
    out = new Response(res.body, res);
    h.forEach((v, k) => out.headers.append(k, v));
  }
  return out;
}

/** An RFC 9457 problem of the app's: the status and a sentence, nothing of Tollgate. */
function problem(status: number, detail: string, headers?: Headers): Response {
  const titles: Record<number, string> = {
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
  };
  const h = new Headers(headers);
  h.set("Content-Type", "application/problem+json");
  h.set("Cache-Control", "no-store");
  return new Response(JSON.stringify({ type: "about:blank", title: titles[status], status, detail }), {
    status,
    headers: h,
  });
}

function processEnv(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name];
}
