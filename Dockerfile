# syntax=docker/dockerfile:1
# tollgate: build with dev dependencies, run the built output with production dependencies only, as a
# non-root user. Build: docker build -t tollgate .   Run: see deploy/compose.yaml and the README (Deployment).
# Node 20, not 22 or 24: the pinned uWebSockets.js build (@trufflesuite/uws-js-unofficial 20.30) ships native
# binaries for Node 18 and 20 only (ABI 108 and 115), and the service refuses uWS's JavaScript fallback. Moving
# to a supported LTS needs a uWS build with Node 22/24 binaries (test/deploy/node-runtime.unit.test.ts checks).
ARG NODE_VERSION=20

FROM node:${NODE_VERSION}-bookworm-slim AS build
WORKDIR /app
# Dependencies first, so a source change does not reinstall them. The install's postinstall applies the
# dependency patches (patch-package), so they come with it.
COPY package.json package-lock.json ./
COPY patches ./patches
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY config ./config
COPY src ./src
RUN npm run build
# What the runtime stage copies: production dependencies only, less the local-development runtime: anvil
# (43 MB, NETWORK=local only) and PGlite (27 MB, used only without DATABASE_URL). Without them the image
# refuses NETWORK=local (TOLLGATE_ANVIL_NOT_FOUND) and a missing DATABASE_URL
# (TOLLGATE_EMBEDDED_DATABASE_MISSING) at start-up, naming what to set.
RUN npm prune --omit=dev --no-audit --no-fund && rm -rf node_modules/@foundry-rs node_modules/@electric-sql

FROM node:${NODE_VERSION}-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/config ./config
# The embedded database's directory (used only without DATABASE_URL) must be writable by the service user.
RUN mkdir -p /app/.data && chown node:node /app/.data
# The official image's unprivileged user (uid 1000).
USER node
# Public port (PORT) and admin port (ADMIN_PORT: /metrics, /healthz, /readyz).
EXPOSE 8080 9464
# Ready = database, chain and background checks answer (GET /readyz on the admin port); Node 20 has fetch.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.ADMIN_PORT||9464)+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# SIGTERM drains: the public port closes, captures are written, jobs stop (server.shutdown_grace_ms).
STOPSIGNAL SIGTERM
# As `npm start` runs it (package.json): a young generation of up to 64 MB a semi-space (docs/operations.md).
CMD ["node", "--max-semi-space-size=64", "dist/main.js"]
