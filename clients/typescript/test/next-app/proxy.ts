// The Next.js recipe of README.md for Next.js 16, whose proxy.ts (on the
// Node.js runtime) replaces middleware.ts, as an app behind a proxy of its
// own uses it (with a timeout for a machine that runs other tests besides,
// and its errors logged, for the tests to show).
import { rateLimit } from "@tollgate/client/next";

export const proxy = rateLimit({
  policy: "next-api",
  header: "x-real-ip",
  timeoutMs: 5000,
  onError: (err) => console.error("tollgate proxy:", err.message),
});

export const config = { matcher: "/api/:path*" };
