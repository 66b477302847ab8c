// Batching of a Client's checks (ClientOptions.batching), as the Go
// client's WithBatching does it.

import { type Shape, batch as batchShape, decision } from "./answer.js";
import { APIError, PaymentRequiredError, type Problem, UnavailableError, rateLimited, str } from "./errors.js";
import type { components } from "./openapi.js";

type Schemas = components["schemas"];
type CheckRequest = Schemas["CheckRequest"];
type CheckResponse = Schemas["CheckResponse"];
type BatchResult = Schemas["CheckBatchResponse"]["results"][number];

/** How long a check waits for others to travel with it, unless
 * `batching.maxDelayMs` says otherwise. */
export const DEFAULT_BATCH_DELAY_MS = 1;
/** The most checks of one batch unless `batching.maxChecks` says otherwise. */
export const DEFAULT_BATCH_SIZE = 100;
/** The most checks Tollgate takes in one batch. */
export const MAX_BATCH_SIZE = 1000;

/** What ClientOptions.batching takes. */
export interface BatchingOptions {
  /** How long a check may wait for others before its batch is sent; default 1 ms. */
  maxDelayMs?: number;
  /** A batch is sent as soon as this many checks wait; default 100, at most 1,000. */
  maxChecks?: number;
}

/** Sends one request of the client's (its timeout, retries and errors),
 * whose answer must have shape. */
export type Send = (path: string, body: unknown, shape: Shape, signal?: AbortSignal) => Promise<unknown>;

/** One call waiting for its batch. */
interface Waiter {
  req: CheckRequest;
  settle: (r: CheckResponse | Error) => void;
}

/** checkField matches the field of a batch's 400 that names one check. */
const checkField = /^checks\[(\d+)\]\.?(.*)$/;

/**
 * Batcher gathers the checks of one Client: a check that finds none waiting
 * and no request in flight goes at once, alone, to /v1/check; checks made
 * while a request is in flight wait up to maxDelayMs (or until maxChecks
 * wait, or the request in flight returns) and go as one /v1/check/batch.
 */
export class Batcher {
  readonly #maxDelayMs: number;
  readonly #maxChecks: number;
  readonly #send: Send;
  #pending: Waiter[] = [];
  #inflight = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(opts: BatchingOptions, send: Send) {
    this.#maxDelayMs = opts.maxDelayMs && opts.maxDelayMs > 0 ? opts.maxDelayMs : DEFAULT_BATCH_DELAY_MS;
    this.#maxChecks = Math.min(
      opts.maxChecks && opts.maxChecks > 0 ? Math.floor(opts.maxChecks) : DEFAULT_BATCH_SIZE,
      MAX_BATCH_SIZE,
    );
    this.#send = send;
  }

  /** Tollgate's answer to req, alone or in a batch; throws the client's
   * errors. A caller's signal ends its own wait only. */
  async check(req: CheckRequest, signal?: AbortSignal): Promise<CheckResponse> {
    if (this.#inflight === 0 && this.#pending.length === 0) {
      // Alone: no reason to wait.
      this.#inflight++;
      try {
        return (await this.#send("/v1/check", req, decision(req.items.length), signal)) as CheckResponse;
      } finally {
        this.#returned();
      }
    }
    const where = "POST /v1/check/batch";
    if (signal?.aborted) throw new UnavailableError(`${where}: aborted by the caller`, { cause: signal.reason });
    const r = await new Promise<CheckResponse | Error>((resolve) => {
      const w: Waiter = {
        req,
        settle: (r) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(r);
        },
      };
      const onAbort = () => {
        // A check not yet sent is not sent: the caller has its answer.
        const i = this.#pending.indexOf(w);
        if (i >= 0) this.#pending.splice(i, 1);
        // Nothing left to send: the timer would only keep the process
        // alive for maxDelayMs (a script's, a test runner's).
        if (this.#pending.length === 0) {
          clearTimeout(this.#timer);
          this.#timer = undefined;
        }
        w.settle(new UnavailableError(`${where}: aborted by the caller`, { cause: signal?.reason }));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#pending.push(w);
      if (this.#pending.length >= this.#maxChecks) this.#flush();
      else this.#timer ??= setTimeout(() => this.#flush(), this.#maxDelayMs);
    });
    if (r instanceof Error) throw r;
    return r;
  }

  /** Notes a request that came back and sends what gathered meanwhile at
   * once: waiting longer would only add to its latency. */
  #returned(): void {
    this.#inflight--;
    if (this.#inflight === 0 && this.#pending.length > 0) this.#flush();
  }

  /** Sends the pending checks as one batch. */
  #flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pending.length === 0) return;
    const batch = this.#pending;
    this.#pending = [];
    this.#inflight++;
    void this.#sendBatch(batch).finally(() => this.#returned());
  }

  /** Makes the batch's request and answers each waiter. A 400 naming one
   * check answers that check's caller with it (as /v1/check would have,
   * the field named within the check) and sends the others again: one
   * caller's mistake is not the others'. */
  async #sendBatch(batch: Waiter[]): Promise<void> {
    while (batch.length > 0) {
      if (batch.length === 1) {
        const w = batch[0] as Waiter;
        w.settle(await this.#send("/v1/check", w.req, decision(w.req.items.length)).then((r) => r as CheckResponse, asError));
        return;
      }
      let out: Schemas["CheckBatchResponse"];
      try {
        out = (await this.#send(
          "/v1/check/batch",
          { checks: batch.map((w) => w.req) },
          batchShape(batch.map((w) => w.req.items.length)),
        )) as Schemas["CheckBatchResponse"];
      } catch (err) {
        const i = faultyCheck(err, batch.length);
        if (i >= 0) {
          const p = (err as APIError).problem;
          batch[i]?.settle(new APIError(400, { ...p, field: checkField.exec(p.field ?? "")?.[2] ?? "" }));
          batch = batch.filter((_, j) => j !== i);
          continue;
        }
        for (const w of batch) w.settle(asError(err));
        return;
      }
      // One result a check, each of its shape: the answer was checked so.
      batch.forEach((w, i) => w.settle(resultOf(out.results[i] as BatchResult)));
      return;
    }
  }
}

/** The index of the check a batch's 400 names, or -1. */
function faultyCheck(err: unknown, n: number): number {
  if (!(err instanceof APIError) || err.status !== 400) return -1;
  const m = checkField.exec(err.problem.field ?? "");
  const i = m ? Number(m[1]) : -1;
  return i < n ? i : -1;
}

/** One result of a batch, of the shape answer.ts checked: the answer
 * /v1/check would have given, or the refusal of Tollgate's own ceilings or
 * billing as the error it is. */
function resultOf(r: BatchResult): CheckResponse | Error {
  const status = (r as Problem).status;
  if (status === undefined) return r as CheckResponse;
  const p = r as Problem;
  if (status === 429) return rateLimited(new Headers(), p);
  if (status === 402) return new PaymentRequiredError(str(p.billing_url), str(p.detail));
  return new UnavailableError(`POST /v1/check/batch: a result of status ${status}`);
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new UnavailableError(String(err));
}
