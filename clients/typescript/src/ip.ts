// Client addresses, resolved as Tollgate resolves them for its own per-IP
// ceilings (and as the Go client's ByIP does): IPv4 addresses as they are,
// IPv6 addresses by their network (default /64), forwarding headers
// believed only from trusted proxies.

/** An IP address: 4 bytes (IPv4, IPv4-mapped IPv6 unmapped) or 16. */
type Addr = Uint8Array;

/** A network: an address and a prefix length in bits. */
interface Prefix {
  addr: Addr;
  bits: number;
}

/** parseAddr parses an address without port ("192.0.2.1", "2001:db8::1",
 * "fe80::1%eth0"); the zone is dropped, IPv4-mapped IPv6 is IPv4. */
export function parseAddr(s: string): Addr | undefined {
  const zone = s.indexOf("%");
  if (zone >= 0) {
    if (!s.includes(":") || zone === s.length - 1) return undefined;
    s = s.slice(0, zone);
  }
  const v4 = parseV4(s);
  if (v4) return v4;
  const v6 = parseV6(s);
  if (!v6) return undefined;
  return isMapped(v6) ? v6.slice(12) : v6;
}

function parseV4(s: string): Addr | undefined {
  const parts = s.split(".");
  if (parts.length !== 4) return undefined;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const p = parts[i]!;
    // Go's netip takes no leading zero: "010" could be octal elsewhere.
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p) || Number(p) > 255) return undefined;
    out[i] = Number(p);
  }
  return out;
}

function parseV6(s: string): Addr | undefined {
  if (!s.includes(":")) return undefined;
  let tail: Addr | undefined;
  const lastColon = s.lastIndexOf(":");
  if (s.slice(lastColon + 1).includes(".")) {
    tail = parseV4(s.slice(lastColon + 1));
    if (!tail) return undefined;
    s = s.slice(0, lastColon + 1) + "0:0";
  }
  const halves = s.split("::");
  if (halves.length > 2) return undefined;
  const groups = (h: string) => (h === "" ? [] : h.split(":"));
  const head = groups(halves[0]!);
  const rest = halves.length === 2 ? groups(halves[1]!) : [];
  const missing = 8 - head.length - rest.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...rest];
  const out = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    const g = all[i]!;
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
    const n = Number.parseInt(g, 16);
    out[2 * i] = n >> 8;
    out[2 * i + 1] = n & 0xff;
  }
  if (tail) out.set(tail, 12);
  return out;
}

function isMapped(a: Addr): boolean {
  for (let i = 0; i < 10; i++) if (a[i] !== 0) return false;
  return a[10] === 0xff && a[11] === 0xff;
}

/** parseHop parses one forwarding hop as proxies write it: an address, an
 * address and a port ("192.0.2.1:4711", "[2001:db8::1]:4711"), or a
 * bracketed IPv6 address. A port, like a zone, names no other client. */
export function parseHop(s: string): Addr | undefined {
  s = s.trim();
  const a = parseAddr(s);
  if (a) return a;
  const v4port = /^([0-9.]+):([0-9]{1,5})$/.exec(s);
  if (v4port && Number(v4port[2]) <= 65535) return parseV4(v4port[1]!);
  const bracketed = /^\[([^\]]+)\](?::([0-9]{1,5}))?$/.exec(s);
  if (bracketed && (bracketed[2] === undefined || Number(bracketed[2]) <= 65535) && bracketed[1]!.includes(":")) {
    return parseAddr(bracketed[1]!);
  }
  return undefined;
}

/** parsePrefix parses "10.0.0.0/8", "2001:db8::/32" or a lone address. */
export function parsePrefix(s: string): Prefix | undefined {
  const [a, b, extra] = s.trim().split("/");
  if (extra !== undefined) return undefined;
  const addr = parseAddr(a!);
  if (!addr) return undefined;
  const max = addr.length * 8;
  if (b === undefined) return { addr, bits: max };
  if (!/^[0-9]{1,3}$/.test(b) || Number(b) > max) return undefined;
  return { addr: mask(addr, Number(b)), bits: Number(b) };
}

function mask(a: Addr, bits: number): Addr {
  const out = new Uint8Array(a);
  for (let i = 0; i < out.length; i++) {
    const keep = Math.max(0, Math.min(8, bits - 8 * i));
    out[i]! &= (0xff << (8 - keep)) & 0xff;
  }
  return out;
}

function contains(p: Prefix, a: Addr): boolean {
  if (p.addr.length !== a.length) return false;
  const m = mask(a, p.bits);
  return m.every((v, i) => v === p.addr[i]);
}

/** format writes a as Go's netip does: dotted IPv4, RFC 5952 IPv6. */
export function format(a: Addr): string {
  if (a.length === 4) return a.join(".");
  const g: number[] = [];
  for (let i = 0; i < 8; i++) g.push((a[2 * i]! << 8) | a[2 * i + 1]!);
  // The longest run of two or more zero groups, the first if tied, becomes "::".
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j;
  }
  const hex = (xs: number[]) => xs.map((x) => x.toString(16)).join(":");
  if (best < 0) return hex(g);
  return `${hex(g.slice(0, best))}::${hex(g.slice(best + bestLen))}`;
}

/** How a client's address is found and believed. */
export interface IPOptions {
  /** The peers (load balancers, reverse proxies), as addresses or CIDR
   * prefixes, whose forwarding headers are believed. Empty: the peer is the
   * client, whatever the headers say, so a client can never choose its own
   * key. */
  trustedProxies?: string[];
  /** The one header trusted proxies set to the client's address (such as
   * "fly-client-ip"); otherwise X-Forwarded-For is walked from the right
   * past trusted hops. */
  header?: string;
  /** The platform the app runs on, whose edge sets the client's address in
   * a header no client can forge there: "cloudflare" (cf-connecting-ip) or
   * "vercel" (x-real-ip, else x-forwarded-for). Say it only when the app
   * runs there: elsewhere a client writes those headers itself. */
  platform?: "cloudflare" | "vercel";
  /** The IPv6 network length a client is keyed by (default 64): one host
   * holds a whole /64 and can rotate through it. */
  ipv6Prefix?: number;
}

/** A function from a request and its TCP peer's address (when the runtime
 * gives one) to the client's key: an IPv4 address or an IPv6 network such
 * as "2001:db8:1:2::"; "" when unknown. */
export type AddressKey = (req: Request, peer?: string) => string;

export function clientAddress(opts: IPOptions = {}): AddressKey {
  const bits = opts.ipv6Prefix && opts.ipv6Prefix > 0 && opts.ipv6Prefix <= 128 ? opts.ipv6Prefix : 64;
  const proxies: Prefix[] = [];
  for (const p of opts.trustedProxies ?? []) {
    const pre = parsePrefix(p);
    if (!pre) throw new TypeError(`tollgate: trusted proxy ${JSON.stringify(p)} is not an address or CIDR prefix`);
    proxies.push(pre);
  }
  const header = opts.header?.trim().toLowerCase();
  const platform = opts.platform;
  return (req, peer) => {
    const a = resolve(req, peer, proxies, header, platform);
    if (!a) return "";
    return format(a.length === 16 ? mask(a, bits) : a);
  };
}

function resolve(
  req: Request,
  peer: string | undefined,
  proxies: Prefix[],
  header: string | undefined,
  platform: IPOptions["platform"],
): Addr | undefined {
  const h = req.headers;
  if (platform === "cloudflare") return parseHop(h.get("cf-connecting-ip") ?? "");
  if (platform === "vercel") {
    // Vercel's edge overwrites both with the client's address.
    return parseHop(h.get("x-real-ip") ?? "") ?? parseHop((h.get("x-forwarded-for") ?? "").split(",")[0]!);
  }
  const p = peer === undefined ? undefined : parseHop(peer);
  if (!p) return undefined;
  if (proxies.length === 0 || !proxies.some((x) => contains(x, p))) return p;
  if (header) return parseHop(h.get(header) ?? "");
  const xff = h.get("x-forwarded-for");
  if (xff === null) return p;
  const hops = xff.split(",");
  for (let i = hops.length - 1; i >= 0; i--) {
    const a = parseHop(hops[i]!);
    // A hop that is not an address: nothing left of it can be believed.
    if (!a) return p;
    if (!proxies.some((x) => contains(x, a))) return a;
  }
  // Every hop is trusted: the farthest is the best guess.
  return parseHop(hops[0]!);
}

/** headerAddress keys a request by the address in one header that a proxy
 * in front of the app sets (x-real-ip, or the last hop of x-forwarded-for,
 * the one the proxy appended), for runtimes that show no TCP peer. */
export function headerAddress(name: string, ipv6Prefix = 64): AddressKey {
  const h = name.trim().toLowerCase();
  const bits = ipv6Prefix > 0 && ipv6Prefix <= 128 ? ipv6Prefix : 64;
  return (req) => {
    const hops = (req.headers.get(h) ?? "").split(",");
    const a = parseHop(hops[hops.length - 1]!);
    if (!a) return "";
    return format(a.length === 16 ? mask(a, bits) : a);
  };
}
