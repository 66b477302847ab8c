import {
  APIError,
  LeaseGoneError,
  PaymentRequiredError,
  type Problem,
  RateLimitedError,
  ReservationGoneError,
  SettledOtherwiseError,
  type TollgateError,
  UnavailableError,
  failModeDecides,
  rateLimited,
  str,
} from "./errors.js";
import * as shapes from "./answer.js";
import { Batcher, type BatchingOptions } from "./batch.js";
import type { components } from "./openapi.js";
import { subjectOf } from "./subject.js";

type Schemas = components["schemas"];
export type Policy = Schemas["Policy"];
export type PolicyInput = Schemas["PolicyInput"];
export type Override = Schemas["Override"];
export type OverrideInput = Schemas["OverrideInput"];
export type Usage = Schemas["Usage"];
export type CheckResponse = Schemas["CheckResponse"];
export type CheckResponseItem = Schemas["CheckResponseItem"];
export type LeaseResponse = Schemas["LeaseResponse"];
export type ReservationResponse = Schemas["ReservationResponse"];
/** Tollgate's answer to a settlement or a release of a reservation. */
export type Settlement = Schemas["SettleResponse"];

/** How long one check, peek or lease call to Tollgate may take unless
 * `timeoutMs` says otherwise: it sits in the path of a request of the app's
 * own, so an outage should cost the app milliseconds, not seconds. */
export const DEFAULT_TIMEOUT_MS = 100;

/** How long any other call (configuration, verify, usage, reset) may take
 * unless `configTimeoutMs` says otherwise: it is made at start-up or by an
 * operator, where a busy machine's second is better than an error. */
export const DEFAULT_CONFIG_TIMEOUT_MS = 5000;

/** How long a client's first call may spend opening its connection to
 * Tollgate before the call's own timeout starts, unless `connectTimeoutMs`
 * says otherwise: a cold process's first fetch (on Node.js, loading fetch
 * itself; DNS, TCP, TLS) took 0.3–1.3 s on 2 cores at a load average of 17,
 * against Tollgate on the same machine. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 2000;

/** The most bytes read of one answer of Tollgate's: the largest, a check of
 * 32 items, is a few kilobytes. */
const maxAnswerBytes = 1 << 20;

/**
 * What the decision-making calls (check, peek, acquire) answer when Tollgate
 * is unavailable, or its own ceilings or billing refuse the tenant for now;
 * never when it refuses a call as wrong. "open" allows, "closed" refuses;
 * both mark the answer degraded.
 */
export type FailMode = "open" | "closed";

export interface ClientOptions {
  /** Tollgate's base URL, such as "https://tollgate.internal:8080". */
  url: string;
  /** An API key, tg_live_… or tg_test_…. */
  key: string;
  /** Bounds each check, peek, acquire, renew and release (each attempt,
   * when retrying); default 100 ms. */
  timeoutMs?: number;
  /** Bounds each other call (policies, overrides, verify, usage, reset);
   * default 5,000 ms, or timeoutMs when that is longer. */
  configTimeoutMs?: number;
  /** What a client's first call may spend opening its connection before its
   * own timeout starts; default 2,000 ms. The client opens it with a GET of
   * Tollgate's /healthz, which carries no key; concurrent first calls wait
   * for the same one, and each call's signal still ends its wait. */
  connectTimeoutMs?: number;
  /** Default "open": an outage of Tollgate does not become an outage of the app. */
  failMode?: FailMode;
  /** Retry a call that Tollgate's own ceilings refuse (429) after its
   * Retry-After, up to `attempts` tries in all, when that wait is at most
   * `maxWaitMs` and the caller's signal has not aborted. Nothing else is
   * retried. Off by default. */
  retry?: { attempts: number; maxWaitMs: number };
  /** The fetch to send with; default globalThis.fetch. */
  fetch?: typeof fetch;
  /** Makes concurrent `check` and `peek` calls travel together. A call that
   * finds no other waiting and no request in flight is sent at once, alone,
   * to /v1/check; calls made while a request is in flight wait up to
   * `maxDelayMs` (default 1), or until `maxChecks` (default 100, at most
   * 1,000) wait, or the request in flight returns, and go as one POST
   * /v1/check/batch. Each call still gets its own Decision or error, fail
   * mode and all, and returns when its own signal aborts even while its
   * batch is in flight. Needs a Tollgate that serves /v1/check/batch. */
  batching?: BatchingOptions;
}

/** Options of one call. */
export interface CallOptions {
  /** Ends the call (and any wait before a retry) when it aborts. */
  signal?: AbortSignal;
}

/** One question of a check: may `subject` spend `cost` of `policy` now? */
export interface Item {
  policy: string;
  /** Whom the policy counts (a client address, an account, …); Tollgate
   * stores only an HMAC digest of it. A global policy takes none. Any
   * length: one Tollgate would refuse is sent as its SHA-256 digest. */
  subject?: string;
  /** What the item spends; default 1. */
  cost?: number;
}

/**
 * Tollgate's answer to a check, as the API gives it. When Tollgate gave no
 * decision and the client's fail mode did, `degraded` is true, `items` is
 * empty and `error` says why (an UnavailableError, RateLimitedError or
 * PaymentRequiredError).
 */
export interface Decision extends CheckResponse {
  error?: TollgateError;
}

/** A lease of a concurrency policy, as the API gives it; when the client's
 * fail mode decided, `degraded` is true, there is no `lease_id`, and
 * `error` says why. */
export interface Lease extends LeaseResponse {
  error?: TollgateError;
}

/** A reservation of a budget policy, as the API gives it. When the client's
 * fail mode decided, `degraded` is true, there is no `reservation_id`, and
 * `error` says why; a degraded reservation holds nothing, and settling or
 * releasing it sends nothing. */
export interface Reservation extends ReservationResponse {
  error?: TollgateError;
}

/** What to reserve: `amount` of `policy`'s budget for `subject`. */
export interface ReservationRequest {
  policy: string;
  /** Whom the budget counts; sent as a check's subject is. A global policy
   * takes none. */
  subject?: string;
  /** What to hold, in the policy's unit: 1 to 1,000,000,000. */
  amount: number;
  /** How long the reservation waits for its settlement (1 ms to 24 h);
   * Tollgate's default, 5 minutes, when absent. Past it, it settles by
   * itself by the policy's `on_expiry`. */
  ttlSeconds?: number;
  /** Names the reservation (1 to 255 bytes of printable ASCII): a reserve
   * with a key used before answers the reservation made then, `repeat`
   * true. Without one, each reserve makes a key of its own, which the
   * client's own retries reuse. */
  idempotencyKey?: string;
}

/** What `withReservation` did: whether its function ran (`allowed`), the
 * reservation, and its settlement when the function's `used` was settled. */
export interface Spent {
  allowed: boolean;
  reservation: Reservation;
  settlement?: Settlement;
}

/** How long until a refused check would be allowed, in milliseconds: the
 * longest wait among its refused enforced items; 0 when allowed. */
export function retryAfterMs(d: CheckResponse): number {
  let r = 0;
  for (const it of d.items) {
    if (!it.allowed && !it.shadow) r = Math.max(r, it.retry_after_ms);
  }
  return r;
}

/**
 * Client calls one Tollgate service with one API key, with fetch alone: it
 * runs on Node.js 18+, Cloudflare Workers, Vercel and Next.js Edge, Deno and
 * Bun. Make one and share it.
 */
export class Client {
  readonly failMode: FailMode;
  readonly timeoutMs: number;
  readonly configTimeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly #base: string;
  readonly #key: string;
  readonly #fetch: typeof fetch;
  readonly #attempts: number;
  readonly #maxWaitMs: number;
  readonly #batcher: Batcher | undefined;
  /** The opening of the connection, while it runs; undefined before and once done. */
  #warming: Promise<void> | undefined;
  #warm = false;

  constructor(opts: ClientOptions) {
    let u: URL;
    try {
      u = new URL(opts.url);
    } catch {
      throw new TypeError(`tollgate client: base URL ${JSON.stringify(opts.url)}: want an absolute http or https URL`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || u.search || u.hash || u.username || u.password) {
      throw new TypeError(
        `tollgate client: base URL ${JSON.stringify(opts.url)}: want an http or https URL with no user, query or fragment`,
      );
    }
    if (!opts.key || !opts.key.trim()) throw new TypeError("tollgate client: empty API key");
    this.#base = u.href.replace(/\/+$/, "");
    this.#key = opts.key;
    this.timeoutMs = opts.timeoutMs && opts.timeoutMs > 0 ? opts.timeoutMs : DEFAULT_TIMEOUT_MS;
    this.configTimeoutMs =
      opts.configTimeoutMs && opts.configTimeoutMs > 0
        ? opts.configTimeoutMs
        : Math.max(DEFAULT_CONFIG_TIMEOUT_MS, this.timeoutMs);
    this.connectTimeoutMs =
      opts.connectTimeoutMs !== undefined && opts.connectTimeoutMs >= 0 ? opts.connectTimeoutMs : DEFAULT_CONNECT_TIMEOUT_MS;
    this.failMode = opts.failMode ?? "open";
    this.#attempts = Math.max(1, opts.retry?.attempts ?? 1);
    this.#maxWaitMs = Math.max(0, opts.retry?.maxWaitMs ?? 0);
    // Bound late: a platform may replace globalThis.fetch after import.
    this.#fetch = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
    if (opts.batching) {
      this.#batcher = new Batcher(opts.batching, (path, body, shape, signal) =>
        this.#call("POST", path, body, shape, this.timeoutMs, { signal }),
      );
    }
  }

  /** Asks whether every item may act now and, when all allow, counts them
   * all (nothing is counted otherwise). A refusal of the tenant's own
   * policies is a Decision with `allowed` false. Throws an APIError when
   * Tollgate refuses the call as wrong (unknown key or policy, invalid
   * item), whatever the fail mode. */
  check(items: Item | Item[], opts?: CallOptions): Promise<Decision> {
    return this.#check("consume", items, opts);
  }

  /** check without counting: what a check would answer now. "Check before
   * trying, count on failure" is a peek, then a check when the attempt
   * failed. */
  peek(items: Item | Item[], opts?: CallOptions): Promise<Decision> {
    return this.#check("peek", items, opts);
  }

  /** Counts usage that happened already (a response's tokens, known once
   * it is done): each item's `cost` is added to its counter whatever is
   * left, past its limit if need be, and never refused by the tenant's
   * policies. The Decision is `allowed`; each item says whether its counter
   * is still within its limit (`remaining` 0 when it is overdrawn, and
   * checks of it are refused until that much has rolled out). A charge is
   * never batched and no fail mode decides it: when Tollgate is unavailable
   * it throws an UnavailableError, and the same charge may be sent again. */
  async charge(items: Item | Item[], opts?: CallOptions): Promise<Decision> {
    const list = Array.isArray(items) ? items : [items];
    const body = await this.#checkBody("charge", list);
    return await this.#call<CheckResponse>("POST", "/v1/check", body, shapes.decision(list.length), this.timeoutMs, opts);
  }

  async #checkBody(mode: "consume" | "peek" | "charge", list: Item[]): Promise<Schemas["CheckRequest"]> {
    return {
      mode,
      items: await Promise.all(
        list.map(async (it) => {
          const out: Schemas["CheckRequestItem"] = { policy: it.policy };
          if (it.subject !== undefined && it.subject !== "") out.subject = await subjectOf(it.subject);
          if (it.cost) out.cost = it.cost;
          return out;
        }),
      ),
    };
  }

  async #check(mode: "consume" | "peek", items: Item | Item[], opts?: CallOptions): Promise<Decision> {
    const list = Array.isArray(items) ? items : [items];
    const body = await this.#checkBody(mode, list);
    try {
      if (this.#batcher) return await this.#batcher.check(body, opts?.signal);
      return await this.#call<CheckResponse>("POST", "/v1/check", body, shapes.decision(list.length), this.timeoutMs, opts);
    } catch (err) {
      if (!failModeDecides(err)) throw err;
      return { allowed: this.failMode === "open", degraded: true, items: [], error: err as TollgateError };
    }
  }

  /** Asks for a lease of a concurrency policy for subject, held for
   * `ttlSeconds` (Tollgate's default when absent) unless released or renewed
   * first. A subject at its limit is a Lease with `allowed` false. */
  async acquire(policy: string, subject: string, opts?: CallOptions & { ttlSeconds?: number }): Promise<Lease> {
    const body: Schemas["LeaseRequest"] = { policy };
    if (subject !== "") body.subject = await subjectOf(subject);
    if (opts?.ttlSeconds && opts.ttlSeconds > 0) body.ttl = `${Math.ceil(opts.ttlSeconds)}s`;
    try {
      return await this.#call<LeaseResponse>("POST", "/v1/leases", body, shapes.lease, this.timeoutMs, opts);
    } catch (err) {
      if (!failModeDecides(err)) throw err;
      return {
        allowed: this.failMode === "open",
        degraded: true,
        in_flight: 0,
        limit: 0,
        retry_after_ms: 0,
        error: err as TollgateError,
      };
    }
  }

  /** Extends a held lease to `ttlSeconds` from now and returns it with its
   * new `expires_at`. Throws a LeaseGoneError when the lease no longer holds
   * a place. A lease without an id (not granted, or granted by the fail
   * mode) is returned as it is. */
  async renew(lease: Lease, opts?: CallOptions & { ttlSeconds?: number }): Promise<Lease> {
    if (!lease.lease_id) return lease;
    const body: Schemas["RenewRequest"] = {};
    if (opts?.ttlSeconds && opts.ttlSeconds > 0) body.ttl = `${Math.ceil(opts.ttlSeconds)}s`;
    try {
      const out = await this.#call<Schemas["RenewResponse"]>(
        "POST",
        `/v1/leases/${encodeURIComponent(lease.lease_id)}/renew`,
        body,
        shapes.renewal,
        this.timeoutMs,
        opts,
      );
      return { ...lease, expires_at: out.expires_at };
    } catch (err) {
      if (err instanceof APIError && err.status === 404) {
        throw new LeaseGoneError(`lease ${lease.lease_id} is gone`, { cause: err });
      }
      throw err;
    }
  }

  /** Holds `amount` of a budget policy for `subject` until settled,
   * released or expired. A budget that cannot cover it is a Reservation
   * with `allowed` false (nothing is charged; `retry_after_ms` says when it
   * may). Unavailability is answered by the fail mode, as `acquire`
   * answers it; a call Tollgate refuses as wrong (an unknown policy, a
   * concurrency policy, an amount out of range) throws an APIError. */
  async reserve(req: ReservationRequest, opts?: CallOptions): Promise<Reservation> {
    const { idempotency_key: key, ...body } = await reservationBody(req);
    try {
      return await this.#call<ReservationResponse>(
        "POST",
        "/v1/reservations",
        body,
        shapes.reservation,
        this.timeoutMs,
        opts,
        key,
      );
    } catch (err) {
      if (!failModeDecides(err)) throw err;
      return this.#failed(req.amount, err as TollgateError);
    }
  }

  /** Reserves up to 100 amounts in one request (POST
   * /v1/reservations/batch): `results[i]` is what `reserve` returns for
   * `reqs[i]` alone (a Reservation, allowed or refused by the budget; the
   * fail mode's, with its `error`, for a refusal by Tollgate's own
   * ceilings), or the error it would throw (an APIError for an unknown
   * policy). The reservations are independent: each is held or refused on
   * its own, in no set order among them. Each without an `idempotencyKey`
   * gets one of its own, so that the client's retry of the batch never
   * holds an amount twice. When the batch as a whole has no answer, every
   * result is the fail mode's; a batch Tollgate cannot read throws its
   * APIError (`problem.field` names the entry: "reservations[3].amount"),
   * and nothing was reserved. */
  async reserveBatch(reqs: ReservationRequest[], opts?: CallOptions): Promise<(Reservation | TollgateError)[]> {
    const reservations = await Promise.all(reqs.map((r) => reservationBody(r)));
    let out: Schemas["ReservationBatchResponse"];
    try {
      out = await this.#call<Schemas["ReservationBatchResponse"]>(
        "POST",
        "/v1/reservations/batch",
        { reservations } satisfies Schemas["ReservationBatchRequest"],
        shapes.results(reqs.length, shapes.reservation),
        this.timeoutMs,
        opts,
      );
    } catch (err) {
      if (!failModeDecides(err)) throw err;
      return reqs.map((r) => this.#failed(r.amount, err as TollgateError));
    }
    return out.results.map((r, i) => {
      if (!("status" in r)) return r;
      const err = entryError("POST /v1/reservations/batch", r);
      return failModeDecides(err) ? this.#failed(reqs[i]?.amount ?? 0, err) : err;
    });
  }

  /** Settles up to 100 reservations in one request (POST
   * /v1/reservations/settle): `results[i]` is what `settle` returns for
   * `items[i]` alone (`used` 0 releases), a Settlement or undefined for a
   * reservation that holds nothing (not sent), or the error it would throw:
   * a ReservationGoneError, a SettledOtherwiseError, an UnavailableError
   * (the store away), a RateLimitedError. The settlements are independent,
   * and each is idempotent as `settle`'s is. When the batch as a whole has
   * no answer it throws, as `settle` does; it is safe to send again. */
  async settleBatch(
    items: { reservation: Reservation; used: number }[],
    opts?: CallOptions,
  ): Promise<(Settlement | undefined | TollgateError)[]> {
    const sent = items.flatMap((it, i) => (it.reservation.reservation_id && !it.reservation.degraded ? [i] : []));
    const results: (Settlement | undefined | TollgateError)[] = items.map(() => undefined);
    if (sent.length === 0) return results;
    const settlements = sent.map((i) => ({
      reservation_id: items[i]?.reservation.reservation_id ?? "",
      used: items[i]?.used ?? 0,
    }));
    const out = await this.#call<Schemas["SettleBatchResponse"]>(
      "POST",
      "/v1/reservations/settle",
      { settlements } satisfies Schemas["SettleBatchRequest"],
      shapes.results(sent.length, shapes.settlement),
      this.timeoutMs,
      opts,
    );
    out.results.forEach((r, j) => {
      const i = sent[j] ?? 0;
      results[i] = "status" in r ? settleError(settlements[j]?.reservation_id ?? "", entryError("POST /v1/reservations/settle", r)) : r;
    });
    return results;
  }

  /** The fail mode's reservation of amount, err saying why. */
  #failed(amount: number, err: TollgateError): Reservation {
    return {
      allowed: this.failMode === "open",
      amount,
      limit: 0,
      retry_after_ms: 0,
      unit: "",
      degraded: true,
      error: err,
    };
  }

  /** Charges `used` in place of the reservation's amount: less gives the
   * rest back, more charges the excess even past the limit (`overdrawn`).
   * Idempotent: the same `used` again answers the first settlement with
   * `repeat` true, so it is safe to send again after an error. Throws a
   * SettledOtherwiseError when it was settled with another `used`, a
   * ReservationGoneError when Tollgate holds no such reservation, an
   * UnavailableError when Tollgate is (the reservation stays held until
   * settled or expired). A reservation without an id, or degraded, holds
   * nothing: settling it sends nothing and returns undefined. */
  settle(reservation: Reservation, used: number, opts?: CallOptions): Promise<Settlement | undefined> {
    return this.#settle(reservation, "POST", "/settle", { used } satisfies Schemas["SettleRequest"], opts);
  }

  async #settle(
    r: Reservation,
    method: string,
    suffix: string,
    body: unknown,
    opts?: CallOptions,
  ): Promise<Settlement | undefined> {
    if (!r.reservation_id || r.degraded) return undefined;
    const path = `/v1/reservations/${encodeURIComponent(r.reservation_id)}${suffix}`;
    try {
      return await this.#call<Settlement>(method, path, body, shapes.settlement, this.timeoutMs, opts);
    } catch (err) {
      throw settleError(r.reservation_id, err);
    }
  }

  /**
   * Runs fn within a reservation: reserves, runs fn unless refused, and
   * settles with the `used` fn returns; when fn throws, releases the
   * reservation instead and throws fn's error. A refusal by the budget, or
   * by the fail mode "closed", does not run fn (`allowed` false, the
   * reservation says why); under "open" fn runs and nothing is settled.
   * Settling and releasing are not ended by `opts.signal`: what fn used is
   * charged even when the caller has gone. A settlement that fails after fn
   * succeeded throws its error: fn ran, and the reservation settles by
   * itself at its expiry.
   */
  async withReservation(
    req: ReservationRequest,
    fn: (reservation: Reservation) => Promise<number>,
    opts?: CallOptions,
  ): Promise<Spent> {
    const reservation = await this.reserve(req, opts);
    if (!reservation.allowed) return { allowed: false, reservation };
    let used: number;
    try {
      used = await fn(reservation);
    } catch (err) {
      // fn failed: whatever it used is not charged.
      await this.release(reservation).catch(() => undefined);
      throw err;
    }
    return { allowed: true, reservation, settlement: await this.settle(reservation, used) };
  }

  /** Gives a lease back, freeing its place at once. Idempotent: a lease
   * already gone, or one without an id, is released without error. */
  release(lease: Lease, opts?: CallOptions): Promise<void>;
  /** Gives a reservation's whole amount back unused: a settlement with
   * `used` 0, answered and thrown as `settle`'s. */
  release(reservation: Reservation, opts?: CallOptions): Promise<Settlement | undefined>;
  async release(held: Lease | Reservation, opts?: CallOptions): Promise<void | Settlement | undefined> {
    if (!("in_flight" in held)) return this.#settle(held, "DELETE", "", undefined, opts);
    const lease = held;
    if (!lease.lease_id) return;
    try {
      await this.#call("DELETE", `/v1/leases/${encodeURIComponent(lease.lease_id)}`, undefined, shapes.none, this.timeoutMs, opts);
    } catch (err) {
      if (err instanceof APIError && err.status === 404) return;
      throw err;
    }
  }

  /** Forgets what subject has spent of policy (after a successful sign-in,
   * or once support has verified the user); Tollgate audits every reset.
   * Never answered by the fail mode. */
  async reset(policy: string, subject: string, opts?: CallOptions): Promise<void> {
    const s = await subjectOf(subject);
    await this.#config("DELETE", `${policyPath(policy)}/subjects/${encodeURIComponent(s)}`, undefined, shapes.none, opts);
  }

  /** The tenant's plan and what it has used this period. */
  usage(opts?: CallOptions): Promise<Usage> {
    return this.#config<Usage>("GET", "/v1/usage", undefined, shapes.usage, opts);
  }

  /** Throws unless Tollgate knows the key and, for each name, the tenant has
   * that policy: call it when an app starts, so that a wrong key or policy
   * name stops the start rather than failing every check. */
  async verify(policies: string[] = [], opts?: CallOptions): Promise<void> {
    if (policies.length === 0) {
      await this.listPolicies(opts);
      return;
    }
    for (const p of policies) await this.getPolicy(p, opts);
  }

  async listPolicies(opts?: CallOptions): Promise<Policy[]> {
    return (await this.#config<Schemas["PolicyList"]>("GET", "/v1/policies", undefined, shapes.policyList, opts)).policies;
  }

  getPolicy(name: string, opts?: CallOptions): Promise<Policy> {
    return this.#config<Policy>("GET", policyPath(name), undefined, shapes.policy, opts);
  }

  /** Creates or replaces the policy called name. */
  putPolicy(name: string, policy: PolicyInput, opts?: CallOptions): Promise<Policy> {
    return this.#config<Policy>("PUT", policyPath(name), policy, shapes.policy, opts);
  }

  async deletePolicy(name: string, opts?: CallOptions): Promise<void> {
    await this.#config("DELETE", policyPath(name), undefined, shapes.none, opts);
  }

  async listOverrides(policy: string, opts?: CallOptions): Promise<Override[]> {
    return (
      await this.#config<Schemas["OverrideList"]>("GET", `${policyPath(policy)}/overrides`, undefined, shapes.overrideList, opts)
    ).overrides;
  }

  getOverride(policy: string, pattern: string, opts?: CallOptions): Promise<Override> {
    return this.#config<Override>("GET", overridePath(policy, pattern), undefined, shapes.override, opts);
  }

  /** Creates or replaces the override of pattern in policy. */
  putOverride(policy: string, pattern: string, override: OverrideInput, opts?: CallOptions): Promise<Override> {
    return this.#config<Override>("PUT", overridePath(policy, pattern), override, shapes.override, opts);
  }

  async deleteOverride(policy: string, pattern: string, opts?: CallOptions): Promise<void> {
    await this.#config("DELETE", overridePath(policy, pattern), undefined, shapes.none, opts);
  }

  /** A call that is not a decision's, under configTimeoutMs. */
  #config<T>(method: string, path: string, body: unknown, shape: shapes.Shape, opts?: CallOptions): Promise<T> {
    return this.#call<T>(method, path, body, shape, this.configTimeoutMs, opts);
  }

  /** One call, retried as `retry` allows when Tollgate's own ceilings
   * refuse; each attempt is bounded by ms and its answer must have shape,
   * and carries idempotencyKey when given. */
  async #call<T>(
    method: string,
    path: string,
    body: unknown,
    shape: shapes.Shape,
    ms: number,
    opts?: CallOptions,
    idempotencyKey?: string,
  ): Promise<T> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    for (let attempt = 1; ; attempt++) {
      try {
        // Every attempt carries the same key: Tollgate takes a retry for the
        // call it may have made already.
        return (await this.#once(method, path, payload, shape, ms, opts?.signal, idempotencyKey)) as T;
      } catch (err) {
        if (
          attempt >= this.#attempts ||
          !(err instanceof RateLimitedError) ||
          err.retryAfterSeconds * 1000 > this.#maxWaitMs ||
          !(await sleep(err.retryAfterSeconds * 1000, opts?.signal))
        ) {
          throw err;
        }
      }
    }
  }

  /** One attempt of #call, bounded by ms and signal, once the connection
   * is open. */
  async #once(
    method: string,
    path: string,
    body: string | undefined,
    shape: shapes.Shape,
    ms: number,
    signal?: AbortSignal,
    idempotencyKey?: string,
  ): Promise<unknown> {
    const where = `${method} ${path}`;
    if (!this.#warm) await this.#open(signal);
    if (signal?.aborted) throw new UnavailableError(`${where}: aborted by the caller`, { cause: signal.reason });
    const url = this.#base + path;
    const { signal: bounded, done } = bound(ms, signal);
    try {
      const headers: Record<string, string> = {
        authorization: `Bearer ${this.#key}`,
        accept: "application/json, application/problem+json",
      };
      if (body !== undefined) headers["content-type"] = "application/json";
      if (idempotencyKey !== undefined) headers["idempotency-key"] = idempotencyKey;
      let resp: Response;
      let text: string;
      try {
        // redirect "manual": a redirect would carry the API key to wherever it points.
        resp = await this.#fetch(url, { method, headers, body, signal: bounded, redirect: "manual" });
        text = await readCapped(resp);
      } catch (err) {
        throw new UnavailableError(`${where}: ${describe(err, bounded, signal)}`, { cause: err });
      }
      return shapes.answer(where, url, this.#base, resp, text, shape);
    } finally {
      done();
    }
  }

  /**
   * Opens the connection to Tollgate before the client's first call, so that
   * what a cold process spends on it (loading fetch, DNS, TCP, TLS) is not
   * charged to that call's timeout: a GET of /healthz, with no key, under
   * connectTimeoutMs. Whatever it answers, or if it fails, the calls then go
   * on; concurrent first calls wait for the same one, each until its own
   * signal aborts.
   */
  async #open(signal?: AbortSignal): Promise<void> {
    if (this.connectTimeoutMs === 0) {
      this.#warm = true;
      return;
    }
    this.#warming ??= (async () => {
      const { signal: bounded, done } = bound(this.connectTimeoutMs, signal);
      try {
        const resp = await this.#fetch(`${this.#base}/healthz`, { method: "GET", signal: bounded, redirect: "manual" });
        // Read to the end: a connection is kept for the next call only then,
        // and (Node.js) given back to the pool a turn of the event loop later.
        await readCapped(resp);
        await new Promise((resolve) => setTimeout(resolve, 0));
        this.#warm = true;
      } catch {
        // A caller that gave up leaves the next call to open it; an answer
        // that never came, or a refusal, leaves the calls to find out.
        if (!signal?.aborted) this.#warm = true;
      } finally {
        done();
        this.#warming = undefined;
      }
    })();
    const warming = this.#warming;
    if (!signal) return warming;
    // This caller's signal ends its own wait.
    await new Promise<void>((resolve) => {
      const onAbort = () => resolve();
      signal.addEventListener("abort", onAbort, { once: true });
      void warming.finally(() => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      });
    });
  }
}

/** The body of a reservation (an entry of a batch of them), its
 * idempotency key the caller's or one of the call's own, so that a retry
 * of the client's (after a 429 of Tollgate's ceilings) never holds the
 * amount twice. */
async function reservationBody(req: ReservationRequest): Promise<Schemas["ReservationBatchEntry"] & { idempotency_key: string }> {
  const body: Schemas["ReservationBatchEntry"] & { idempotency_key: string } = {
    policy: req.policy,
    amount: req.amount,
    idempotency_key: req.idempotencyKey ?? crypto.randomUUID(),
  };
  if (req.subject !== undefined && req.subject !== "") body.subject = await subjectOf(req.subject);
  if (req.ttlSeconds && req.ttlSeconds > 0) body.ttl = `${Math.ceil(req.ttlSeconds * 1000)}ms`;
  return body;
}

/** The error a batch's result p (a problem with its status) is, as the
 * call of that entry alone (where) would throw it. */
function entryError(where: string, p: Problem): TollgateError {
  const status = p.status ?? 0;
  if (status === 429) return rateLimited(new Headers(), p);
  if (status === 402) return new PaymentRequiredError(str(p.billing_url), str(p.detail));
  if (status >= 400 && status < 500 && status !== 408) return new APIError(status, p);
  return new UnavailableError(`${where}: a result of status ${status}`);
}

/** err, a settlement's of reservation id, as `settle` throws it. */
function settleError<E>(id: string | undefined, err: E): E | TollgateError {
  if (err instanceof APIError && err.status === 404) {
    return new ReservationGoneError(`reservation ${id} is gone`, { cause: err });
  }
  if (err instanceof APIError && err.status === 409) {
    return new SettledOtherwiseError(`reservation ${id} was settled with another used`, { cause: err });
  }
  return err;
}

/** Reads an answer's body, at most maxAnswerBytes of it. */
async function readCapped(resp: Response): Promise<string> {
  if (!resp.body) return "";
  const reader = resp.body.getReader();
  const chunks: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.byteLength;
    if (n > maxAnswerBytes) {
      await reader.cancel();
      throw new Error(`answer larger than ${maxAnswerBytes} bytes`);
    }
    chunks.push(value);
  }
  const all = new Uint8Array(n);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return new TextDecoder().decode(all);
}

/** A signal that aborts after ms or when parent does, and a function to
 * release its timer. (AbortSignal.any is missing from Node 18.) */
function bound(ms: number, parent?: AbortSignal): { signal: AbortSignal; done: () => void } {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(new TimeoutError(ms)), ms);
  const onAbort = () => ctl.abort(parent?.reason);
  parent?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: ctl.signal,
    done: () => {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onAbort);
    },
  };
}

class TimeoutError extends Error {
  override name = "TimeoutError";
  constructor(ms: number) {
    super(`no answer within ${ms} ms`);
  }
}

function describe(err: unknown, bounded: AbortSignal, parent?: AbortSignal): string {
  if (bounded.aborted) return parent?.aborted ? "aborted by the caller" : String((bounded.reason as Error).message);
  if (err instanceof Error) {
    const cause = (err as { cause?: unknown }).cause;
    return cause instanceof Error ? `${err.message}: ${cause.message}` : err.message;
  }
  return String(err);
}

/** Waits ms; false when signal aborted first. */
function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(t);
      resolve(false);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function policyPath(name: string): string {
  if (!name) throw new TypeError("tollgate client: empty policy name");
  return `/v1/policies/${encodeURIComponent(name)}`;
}

function overridePath(policy: string, pattern: string): string {
  return `${policyPath(policy)}/overrides/${encodeURIComponent(pattern)}`;
}
