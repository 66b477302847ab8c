export {
  Client,
  DEFAULT_CONFIG_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_TIMEOUT_MS,
  retryAfterMs,
  type CallOptions,
  type CheckResponse,
  type CheckResponseItem,
  type ClientOptions,
  type Decision,
  type FailMode,
  type Item,
  type Lease,
  type LeaseResponse,
  type Override,
  type OverrideInput,
  type Policy,
  type PolicyInput,
  type Usage,
} from "./client.js";
export { DEFAULT_BATCH_DELAY_MS, DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE, type BatchingOptions } from "./batch.js";
export {
  APIError,
  LeaseGoneError,
  PaymentRequiredError,
  RateLimitedError,
  TollgateError,
  UnavailableError,
  type Problem,
} from "./errors.js";
export { type AddressKey, type IPOptions, clientAddress } from "./ip.js";
export {
  Limiter,
  UNKEYED,
  guard,
  protect,
  withHeaders,
  type FetchHandler,
  type Guard,
  type KeyBy,
  type LimitOptions,
  type Outcome,
  type TollgateEnv,
} from "./limit.js";
export type { components, paths } from "./openapi.js";
