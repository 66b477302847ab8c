// What an answer must be to be Tollgate's, checked here for every call and
// nowhere else: its status, its content type, and the fields the client
// reads of it. Whatever is not Tollgate's (the wrong service at that URL, a
// captive portal, a load balancer's redirect or page, JSON cut short) is an
// UnavailableError, which the fail mode answers, never a decision read from
// someone else's JSON.

import { APIError, PaymentRequiredError, type Problem, UnavailableError, rateLimited, str } from "./errors.js";

/**
 * A shape an answer's JSON must have: what is wrong with v, found at path
 * `at` of the answer, or "" when nothing is.
 */
export type Shape = (v: unknown, at: string) => string;

/** The shape of an answer without a body (204): DELETE's. */
export const none: Shape = () => "";

const string: Shape = (v, at) => (typeof v === "string" ? "" : want(at, "a string", v));
const number: Shape = (v, at) => (typeof v === "number" && Number.isFinite(v) ? "" : want(at, "a number", v));
const boolean: Shape = (v, at) => (typeof v === "boolean" ? "" : want(at, "a boolean", v));

function nullable(s: Shape): Shape {
  return (v, at) => (v === null ? "" : s(v, at));
}

function optional(s: Shape): Shape {
  return (v, at) => (v === undefined ? "" : s(v, at));
}

/** An object with at least these fields (others are Tollgate's to add). */
function object(fields: Record<string, Shape>): Shape {
  return (v, at) => {
    if (!isObject(v)) return want(at, "an object", v);
    for (const [k, s] of Object.entries(fields)) {
      const fault = s(v[k], at ? `${at}.${k}` : k);
      if (fault) return fault;
    }
    return "";
  };
}

/** A list of `of`, of exactly n elements when n is given. */
function list(of: Shape, n?: number): Shape {
  return (v, at) => {
    if (!Array.isArray(v)) return want(at, "a list", v);
    if (n !== undefined && v.length !== n) return `${at}: want ${n} of them, got ${v.length}`;
    for (let i = 0; i < v.length; i++) {
      const fault = of(v[i], `${at}[${i}]`);
      if (fault) return fault;
    }
    return "";
  };
}

const checkItem = object({
  policy: string,
  allowed: boolean,
  limit: number,
  remaining: number,
  window_seconds: number,
  reset_at: string,
  retry_after_ms: number,
  shadow: boolean,
  degraded: optional(boolean),
});

/** The answer to a check of n items (POST /v1/check): one item each. */
export function decision(n: number): Shape {
  return object({ allowed: boolean, degraded: boolean, items: list(checkItem, n) });
}

/** A result of a batch that Tollgate's own ceilings or billing refused. */
const refusal = object({ status: number });

/** The answer to a batch of checks of these many items each (POST
 * /v1/check/batch): one result a check, a decision or a refusal. */
export function batch(items: number[]): Shape {
  return object({
    results: (v, at) => {
      const fault = list(() => "", items.length)(v, at);
      if (fault) return fault;
      const rs = v as unknown[];
      for (let i = 0; i < rs.length; i++) {
        const r = rs[i];
        const s = isObject(r) && "status" in r ? refusal : decision(items[i] ?? 0);
        const f = s(r, `${at}[${i}]`);
        if (f) return f;
      }
      return "";
    },
  });
}

export const lease = object({
  allowed: boolean,
  degraded: boolean,
  lease_id: optional(string),
  expires_at: optional(string),
  in_flight: number,
  limit: number,
  retry_after_ms: number,
});

export const reservation = object({
  allowed: boolean,
  reservation_id: optional(string),
  amount: number,
  limit: number,
  retry_after_ms: number,
  unit: string,
  degraded: boolean,
});

export const settlement = object({
  reservation_id: string,
  amount: number,
  used: number,
  returned: number,
  excess: number,
  remaining: number,
  limit: number,
  reset_at: string,
  overdrawn: number,
  unit: string,
  repeat: boolean,
});

/** The answer to a batch of n reservations or settlements (POST
 * /v1/reservations/batch, /v1/reservations/settle): one result an entry,
 * of shape, or a problem with its status. */
export function results(n: number, shape: Shape): Shape {
  return object({
    results: (v, at) => {
      const fault = list(() => "", n)(v, at);
      if (fault) return fault;
      const rs = v as unknown[];
      for (let i = 0; i < rs.length; i++) {
        const r = rs[i];
        const f = (isObject(r) && "status" in r ? refusal : shape)(r, `${at}[${i}]`);
        if (f) return f;
      }
      return "";
    },
  });
}

export const renewal = object({ lease_id: string, expires_at: string });

export const policy = object({ name: string, limit: number, algorithm: string, scope: string, fail_mode: string });
export const policyList = object({ policies: list(policy) });
export const override = object({ pattern: string, limit: number, expires_at: nullable(string) });
export const overrideList = object({ overrides: list(override) });
export const usage = object({
  plan: string,
  effective_plan: string,
  period_start: string,
  period_end: string,
  checks_used: number,
});

/**
 * The result of a call from its answer (`text` is its body), or the error
 * it is. `url` is where the call was sent, `base` the client's URL.
 */
export function answer(where: string, url: string, base: string, resp: Response, text: string, shape: Shape): unknown {
  const s = resp.status;
  if (resp.type === "opaqueredirect" || (s >= 300 && s < 400)) {
    throw redirected(where, url, url.slice(base.length), resp);
  }
  const type = mediaType(resp);
  const notOurs = (why: string, cause?: unknown) =>
    new UnavailableError(
      `${where}: answer ${s} is not Tollgate's: ${why}; is ${base} Tollgate's URL?`,
      cause === undefined ? undefined : { cause },
    );
  if (s >= 200 && s < 300) {
    if (shape === none && (s === 204 || text === "")) return undefined;
    if (text === "") throw notOurs("no body");
    if (type !== "application/json") throw notOurs(`content type ${type || "none"}, not application/json`);
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch (err) {
      throw notOurs(`not JSON (${(err as Error).message})`, err);
    }
    const fault = shape(v, "");
    if (fault) throw notOurs(fault);
    return v;
  }
  const p = problemOf(text);
  // Tollgate's own ceilings set their headers on every refusal, whatever
  // the body; a proxy's 429 is as much a reason to wait.
  if (s === 429) throw rateLimited(resp.headers, p);
  if (s === 402) throw new PaymentRequiredError(str(p.billing_url), str(p.detail));
  // A 408 is a proxy's or server's timeout, as unavailable as a 504.
  if (s >= 500 || s === 408) throw new UnavailableError(`${where}: Tollgate answered ${s}`);
  // Tollgate refuses a call as wrong with a problem document; anything else
  // (a web server's HTML 404 at a wrong base URL) is not Tollgate's refusal.
  if (type !== "application/problem+json") {
    throw notOurs(`content type ${type || "none"}, not application/problem+json`);
  }
  throw new APIError(s, p);
}

/** The error of a redirect, which the client does not follow: it would
 * carry the API key to wherever it points. */
function redirected(where: string, url: string, path: string, resp: Response): UnavailableError {
  const why = "the client follows no redirect: it would carry the API key";
  if (resp.type === "opaqueredirect") {
    // A browser's: status 0, and no Location to read.
    return new UnavailableError(`${where}: redirected, to where the runtime does not say: set the URL to where it points; ${why}`);
  }
  const location = resp.headers.get("location");
  if (!location) {
    return new UnavailableError(`${where}: redirected (${resp.status}) with no Location: set the URL to Tollgate's own; ${why}`);
  }
  let to = location;
  try {
    to = new URL(location, url).href;
  } catch {
    // Not a URL: say it as it came.
  }
  // Where the base URL should point: the redirect's target less the call's path.
  const base = to.endsWith(path) ? to.slice(0, to.length - path.length) : to;
  return new UnavailableError(`${where}: redirected (${resp.status}) to ${to}: set the URL to where it points, ${base}; ${why}`);
}

/** The media type of resp's Content-Type, lower case, without parameters. */
function mediaType(resp: Response): string {
  return (resp.headers.get("content-type") ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
}

function problemOf(text: string): Problem {
  try {
    const v: unknown = JSON.parse(text);
    if (isObject(v)) return v as Problem;
  } catch {
    // Not a problem document: the status says it all.
  }
  return {};
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function want(at: string, what: string, v: unknown): string {
  const got = v === null ? "null" : Array.isArray(v) ? "a list" : v === undefined ? "nothing" : `a ${typeof v}`;
  return `${at || "the answer"}: want ${what}, got ${got}`;
}
