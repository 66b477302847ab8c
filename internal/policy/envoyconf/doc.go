// Package envoyconf reads a tenant's configuration file of
// envoyproxy/ratelimit (its YAML format: domain, nested descriptors,
// rate_limit, unlimited, shadow_mode, replaces, …) and matches the
// descriptors of Envoy's rate limit requests against it exactly as
// envoyproxy/ratelimit does, so that a gateway team can move to Tollgate
// with the file it has (issue 39). Each rate_limit becomes a Tollgate
// policy (Rule.Policy); Match and MatchAll say which one a descriptor
// meets, and under which subject it counts.
//
// Tenants upload such files by domain (Service: at most MaxDomains of them
// and MaxTenantRules rules together), and every instance keeps them parsed
// in memory (Catalog), so that a request of Envoy's finds its domain's
// Config without a database round trip. The Store they are kept in is
// declared here and implemented by pgstore: no storage, no HTTP, no gRPC
// here. It imports the standard library, internal/policy, internal/limit,
// internal/kit/cache and gopkg.in/yaml.v3 only.
//
// # What envoyproxy/ratelimit does
//
// Read from its source at commit f2fb157 (July 2026); the function names are
// its own.
//
//   - Loading (src/config/config_impl.go, loadDescriptors): a descriptor's
//     key is required; its value is optional, and an empty value is no
//     value. A list keeps its descriptors by composite key, the key or the
//     key, "_" and the value, so two that join to the same text are a
//     duplicate and refuse the file, whatever the split ("a" with value
//     "b_c" and "a_b" with value "c").
//   - Units (loadDescriptors, and UnitToDivider in src/utils/utilities.go):
//     the unit is upper-cased and looked up in the Unit enum of Envoy's rate
//     limit service, so "Second" and "SECOND" are second; UNKNOWN and
//     anything else refuse the file. The enum has SECOND, MINUTE, HOUR,
//     DAY, WEEK, MONTH and YEAR, although its README names only the first
//     four. Every unit is a fixed window aligned to the Unix epoch: a week
//     runs from Thursday 00:00 UTC, a month is 30 days and a year 365.
//   - unlimited with a valid unit refuses the file; unlimited with an
//     invalid unit, or with requests_per_unit, is accepted and the rest
//     ignored. A missing requests_per_unit is 0, and 0 is over the limit at
//     every request (README Example 3, "Black list IP").
//   - replaces: an entry with an empty name, or the rule's own name,
//     refuses the file; a name no rule has is accepted.
//   - share_threshold on a descriptor without "*" refuses the file.
//   - Unknown fields (validateYamlKeys): one flat list of the format's
//     field names, checked at every level, so a misspelled field refuses
//     the file but a field in the wrong place ("unit" in a descriptor) is
//     accepted and ignored. Floats anywhere refuse the file.
//   - Matching (GetLimit): for each entry of the descriptor, in order, in
//     the current list: key "_" value exactly; else the first descriptor
//     of the list, in the file's order, whose composite key holds "*" and
//     matches key "_" value (wildcardMatch: each "*" any run of bytes,
//     anywhere, several allowed, in the key as well as the value); else the
//     key alone. A descriptor found without a limit and without a list under
//     it ends the walk with no limit: it does not fall back to the key alone
//     (its "white-list"). A limit applies only when the descriptor ends at
//     it: a rule at depth 1 does not apply to a descriptor of two entries,
//     nor one at depth 2 to a descriptor of one (README Example 4).
//   - The counter (GenerateCacheKey in src/limiter/cache_key.go) is named by
//     the domain and every entry's key and value, so a key without value
//     counts each value apart; share_threshold puts the wildcard in place of
//     the value, so all the values it matches share one counter.
//   - replaces (constructLimitsToCheck in src/service/ratelimit.go): the
//     names in the replaces of every rule a request's descriptors meet,
//     unlimited rules' and replaced rules' included, take out every other
//     matched rule of those names. An unlimited rule is answered OK with
//     LimitRemaining MaxUint32 whatever replaces it.
//   - shadow_mode (GetResponseDescriptorStatus in
//     src/limiter/base_limiter.go): a rule over its limit answers OK, after
//     counting as usual.
//   - detailed_metric and value_to_metric name statistics only, and
//     quota_mode makes a request over the limit only when all its quota
//     descriptors are.
//
// # What Tollgate does otherwise
//
// Parse matches as above and refuses, with the line and a reason (Error),
// what Tollgate cannot express and what the reference would silently
// ignore: a unit of year without a window (Tollgate's windows end at 30
// days); requests_per_unit above limit.MaxLimit or missing; unlimited
// beside a unit or requests_per_unit; a replaces name no rule of the file
// has; unknown or misplaced fields (naming the one meant); quota_mode
// (Tollgate refuses a request all or nothing) and metadata (it sends no
// dynamic metadata); YAML aliases, merge keys and a second document. A unit
// of month is the calendar month in UTC (window: 30d is the reference's
// month). requests_per_unit 0 is a Deny rule, refused without counting.
//
// Tollgate's own fields may stand beside unit and requests_per_unit:
// algorithm (fixed_window, the default, sliding_window or token_bucket),
// window (as policy.Parse reads it: it overrides unit, and requests_per_unit
// is then per window), fail_mode (open, the default, or closed) and scope
// (subject, the default, or global: one counter for the rule whatever the
// descriptor's values).
package envoyconf
