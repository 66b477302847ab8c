// @ts-check
// What every test file shares: the Tollgate under test, named by the
// environment the Go test (npm_test.go) sets, and a policy of its own.
import { randomBytes } from "node:crypto";
import { Client } from "../dist/index.js";

/** @param {string} name */
function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is unset: run these tests with go test ./clients/typescript/, which starts Tollgate`);
  return v;
}

export const env = {
  /** A running Tollgate. */
  url: need("TOLLGATE_URL"),
  /** A live key of a tenant on a plan with room. */
  key: need("TOLLGATE_KEY"),
  /** A live key of a tenant whose plan allows 3 calls a minute. */
  tinyKey: need("TOLLGATE_TINY_KEY"),
  /** A policy of that tenant's. */
  tinyPolicy: need("TOLLGATE_TINY_POLICY"),
  /** Where no Tollgate listens (a stopped one). */
  downURL: need("TOLLGATE_DOWN_URL"),
  /** The Tollgate behind a proxy that delays every answer past 100 ms. */
  slowURL: need("TOLLGATE_SLOW_URL"),
  /** A proxy that accepts and never answers. */
  hungURL: need("TOLLGATE_HUNG_URL"),
};

/** @param {Partial<import("../dist/index.js").ClientOptions>} [opts] */
export function client(opts = {}) {
  // A generous timeout for set-up calls: the machine is shared.
  return new Client({ url: env.url, key: env.key, timeoutMs: 5000, ...opts });
}

/** A policy name no other test uses. @param {string} prefix */
export function unique(prefix) {
  return `${prefix}-${randomBytes(4).toString("hex")}`;
}

/**
 * Creates a policy of its own for a test and returns its name.
 * @param {string} prefix
 * @param {import("../dist/index.js").PolicyInput} input
 */
export async function newPolicy(prefix, input) {
  const name = unique(prefix);
  await client().putPolicy(name, input);
  return name;
}

/** Strings of Tollgate's that must never reach an app's clients. */
export function leaks(/** @type {string} */ text) {
  const l = text.toLowerCase();
  return [env.url, env.key, env.slowURL, env.downURL, "tollgate", "tg_live_"].filter((s) => l.includes(s.toLowerCase()));
}
