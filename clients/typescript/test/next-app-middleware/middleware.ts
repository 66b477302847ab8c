// The Next.js recipe of README.md for Next.js 14 and 15, or for the Edge
// runtime on 16: middleware.ts, as an app behind a proxy of its own uses it
// (with a timeout for a machine that runs other tests besides, and its
// errors logged, for the tests to show).
import { rateLimit } from "@tollgate/client/next";

export const middleware = rateLimit({
  policy: "next-middleware-api",
  header: "x-real-ip",
  timeoutMs: 5000,
  onError: (err) => console.error("tollgate middleware:", err.message),
});

export const config = { matcher: "/api/:path*" };
