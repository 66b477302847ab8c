/**
 * The errors of Tollgate's client. Every call that fails throws one of
 * these, so that a caller can tell the three kinds apart:
 *
 * - {@link UnavailableError}: no answer from Tollgate (unreachable, past the
 *   timeout, a 5xx or 408, a redirect, an answer that is not Tollgate's);
 * - {@link RateLimitedError} and {@link PaymentRequiredError}: Tollgate's own
 *   ceilings or billing refuse the tenant for now;
 * - {@link APIError}: Tollgate refused the call as wrong (a key it does not
 *   know, a policy that does not exist, an invalid item). A fault to fix,
 *   never answered by the fail mode.
 */

/** Base class of every error the client throws. */
export class TollgateError extends Error {
  override name = "TollgateError";
}

/** No answer from Tollgate: it could not be reached, did not answer within
 * the per-call timeout or the caller's signal, answered 5xx or 408, or what
 * answered was not Tollgate: a redirect (the message says where to: set the
 * client's URL to it; the client follows none, as it would carry the API
 * key), an answer of another status, content type or shape than Tollgate's
 * (the message says which field), such as a captive portal's page, a web
 * server's HTML 404 at a wrong base URL, or JSON cut short. `cause` holds
 * the underlying error, when there is one. */
export class UnavailableError extends TollgateError {
  override name = "UnavailableError";
}

/** A refusal by one of Tollgate's own ceilings (HTTP 429): the tenant (the
 * app, not its user) asked Tollgate too much. It counted nothing; the same
 * call succeeds after `retryAfterSeconds`. */
export class RateLimitedError extends TollgateError {
  override name = "RateLimitedError";
  constructor(
    /** The ceiling that refused: "instance", "ip", "quota", "allotment", "sandbox" or "inflight". */
    readonly layer: string,
    /** The quota's window that refused ("minute" or "hour"), for the quota layer. */
    readonly scope: string,
    /** The limit that refused. */
    readonly limit: number,
    /** Tollgate's Retry-After, in whole seconds. */
    readonly retryAfterSeconds: number,
    /** Tollgate's explanation, for the app's logs. */
    readonly detail: string,
    /** Set when the ceiling decided without Tollgate's shared counter store. */
    readonly degraded: boolean,
  ) {
    super(
      `refused by Tollgate's ${layer} ceiling${scope ? ` per ${scope}` : ""} (limit ${limit}); retry after ${retryAfterSeconds} s`,
    );
  }
}

/** Tollgate's 402: a paid tenant whose billing lapsed is held to the starter
 * plan and has used its allotment. Waiting does not help; paying does, at
 * `billingURL`. */
export class PaymentRequiredError extends TollgateError {
  override name = "PaymentRequiredError";
  constructor(
    readonly billingURL: string,
    readonly detail: string,
  ) {
    super(`Tollgate requires payment: update the payment method at ${billingURL}`);
  }
}

/** An RFC 9457 problem as Tollgate writes it. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  /** The JSON member or path parameter at fault in a 400. */
  field?: string;
  [member: string]: unknown;
}

/** Any other refusal of a call by Tollgate, as its problem document
 * (application/problem+json) says: 400 for an invalid call (`problem.field`
 * names the member at fault), 401 for an API key Tollgate does not know,
 * 403 for a change made with a test key or for any call with a key of a
 * tenant the operator disabled (`tenantDisabled`), 404 for a policy or
 * lease that does not exist. */
export class APIError extends TollgateError {
  override name = "APIError";
  constructor(
    readonly status: number,
    readonly problem: Problem,
  ) {
    super(
      [`Tollgate answered ${status}`, problem.title, problem.field, problem.detail].filter(Boolean).join(": "),
    );
  }

  /** True for the 403 of a tenant Tollgate's operator disabled: every call
   * with its keys is refused so, whatever the fail mode, until the operator
   * enables it again; waiting for Tollgate does not help. */
  get tenantDisabled(): boolean {
    return this.status === 403 && this.problem.type === tenantDisabledType;
  }
}

/** The problem type of a disabled tenant's 403. */
const tenantDisabledType = "https://tollgate.dev/problems/tenant-disabled";

/** Thrown by `renew` when the lease no longer holds a place (lapsed,
 * released, dropped by a reset): acquire a new one. */
export class LeaseGoneError extends TollgateError {
  override name = "LeaseGoneError";
}

/** Thrown by `settle` and `release` of a reservation (with an APIError of
 * status 404 as its cause) when Tollgate holds no such reservation: it
 * expired unsettled (and settled by itself), its settlement is no longer
 * kept, or it never was. */
export class ReservationGoneError extends TollgateError {
  override name = "ReservationGoneError";
}

/** Thrown by `settle` and `release` of a reservation (with an APIError of
 * status 409 as its cause) when it was settled before with another `used`:
 * a settlement happens once. */
export class SettledOtherwiseError extends TollgateError {
  override name = "SettledOtherwiseError";
}

/** Whether err is one the fail mode answers: Tollgate is unavailable, or its
 * own ceilings or billing refuse the tenant for now. */
export function failModeDecides(err: unknown): boolean {
  return err instanceof UnavailableError || err instanceof RateLimitedError || err instanceof PaymentRequiredError;
}

/** A 429 of Tollgate's: the headers first (they are on every refusal,
 * whatever the body), the problem for what they lack. */
export function rateLimited(h: Headers, p: Problem): RateLimitedError {
  const limit = Number.parseInt(h.get("x-ratelimit-limit") ?? "", 10);
  const ra = Number.parseInt((h.get("retry-after") ?? "").trim(), 10);
  const secs = Number.isFinite(ra) && ra >= 0 ? ra : num(p.retry_after_seconds);
  return new RateLimitedError(
    h.get("x-ratelimit-layer") || str(p.layer),
    h.get("x-ratelimit-scope") || str(p.scope),
    Number.isFinite(limit) ? limit : num(p.limit),
    Math.min(secs, 365 * 24 * 3600),
    str(p.detail),
    p.degraded === true || h.get("x-ratelimit-degraded") === "true",
  );
}

export function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

export function num(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

