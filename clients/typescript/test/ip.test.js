// @ts-check
// Client addresses resolved as Tollgate (and the Go client's ByIP) resolve
// them; no Tollgate needed.
import assert from "node:assert/strict";
import { test } from "node:test";
import { clientAddress } from "../dist/index.js";

const req = (/** @type {Record<string, string>} */ headers = {}) => new Request("http://app.test/", { headers });

test("the peer's address: IPv4 as it is, IPv6 by its /64, mapped IPv4 unmapped, ports and zones dropped", () => {
  const key = clientAddress();
  /** @type {[string | undefined, string][]} */
  const cases = [
    ["192.0.2.1", "192.0.2.1"],
    ["192.0.2.1:4711", "192.0.2.1"],
    ["2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"],
    ["[2001:db8:1:2::9]:4711", "2001:db8:1:2::"],
    ["fe80::1%eth0", "fe80::"],
    ["::ffff:192.0.2.1", "192.0.2.1"],
    ["::1", "::"],
    ["2001:db8::", "2001:db8::"],
    ["192.0.2.01", ""],
    ["256.0.0.1", ""],
    ["example.com", ""],
    ["[192.0.2.1]", ""],
    ["1:2:3:4:5:6:7:8:9", ""],
    [undefined, ""],
  ];
  for (const [peer, want] of cases) assert.equal(key(req(), peer), want, String(peer));
  assert.equal(clientAddress({ ipv6Prefix: 48 })(req(), "2001:db8:1:2::1"), "2001:db8:1::");
  assert.equal(clientAddress({ ipv6Prefix: 128 })(req(), "2001:db8::1"), "2001:db8::1");
});

test("X-Forwarded-For is walked from the right past trusted proxies", () => {
  const key = clientAddress({ trustedProxies: ["10.0.0.0/8", "2001:db8:ffff::/48"] });
  const xff = (/** @type {string} */ v) => req({ "x-forwarded-for": v });
  assert.equal(key(xff("198.51.100.1, 203.0.113.9, 10.0.0.2"), "10.0.0.1"), "203.0.113.9");
  assert.equal(key(xff("10.0.0.3, 10.0.0.2"), "10.0.0.1"), "10.0.0.3", "every hop trusted: the farthest");
  assert.equal(key(xff("198.51.100.1, garbage, 10.0.0.2"), "10.0.0.1"), "10.0.0.1", "past a garbage hop nothing is believed");
  assert.equal(key(req(), "10.0.0.1"), "10.0.0.1", "a proxy that sent none is the client");
  assert.equal(key(xff("198.51.100.1"), "192.0.2.1"), "192.0.2.1", "an untrusted peer's header is ignored");
  assert.equal(key(xff("[2001:db8:1:2::1]:80"), "2001:db8:ffff::1"), "2001:db8:1:2::");
  const hdr = clientAddress({ trustedProxies: ["10.0.0.1"], header: "fly-client-ip" });
  assert.equal(hdr(req({ "fly-client-ip": "198.51.100.5" }), "10.0.0.1"), "198.51.100.5");
  assert.equal(hdr(req({ "fly-client-ip": "a, b" }), "10.0.0.1"), "", "a trusted proxy's garbage leaves the client unknown");
  assert.throws(() => clientAddress({ trustedProxies: ["10.0.0.0/33"] }), TypeError);
});

test("platform headers", () => {
  assert.equal(clientAddress({ platform: "cloudflare" })(req({ "cf-connecting-ip": "2001:db8:1:2::7" })), "2001:db8:1:2::");
  assert.equal(clientAddress({ platform: "vercel" })(req({ "x-forwarded-for": "198.51.100.3, 10.0.0.1" })), "198.51.100.3");
  assert.equal(clientAddress({ platform: "vercel" })(req({ "x-real-ip": "198.51.100.4" })), "198.51.100.4");
});
