import { fileURLToPath } from "node:url";

// The package root: its node_modules and dist/ sit outside this app.
const root = fileURLToPath(new URL("../..", import.meta.url));

export default {
  // The package's own tsc --strict checks this app's TypeScript.
  typescript: { ignoreBuildErrors: true },
  turbopack: { root },
  outputFileTracingRoot: root,
  experimental: {
    // Turbopack's persistent cache of the build: writing it costs more
    // than this small app's whole compilation, and a clean clone has none.
    turbopackFileSystemCacheForBuild: false,
  },
};
