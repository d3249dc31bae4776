# queen-edge container image (docs/deploying.md).
# Stage `build` installs every dependency and compiles TypeScript; stage `runtime` (the default
# target, last) carries production dependencies, dist/ and the console's static files and runs as
# the unprivileged `node` user (uid 1000). Stage `dev-broker` is the in-memory development broker
# for docker-compose.yml's `dev` profile only (built with --target dev-broker; not for production).
# test/deploy/dockerfile.test.ts checks these instructions against the project.

ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

FROM build AS dev-broker
COPY examples/dev-broker.ts ./examples/
COPY scripts/container-dev-broker.ts ./scripts/
USER node
EXPOSE 6632
CMD ["node", "--import", "tsx", "scripts/container-dev-broker.ts"]

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    QUEEN_EDGE_CONFIG=/etc/queen-edge/config.yaml
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
# The operator console's static files (served at /console by the admin listener; uPlot comes from node_modules).
COPY console ./console
# The container's configuration (listeners on 0.0.0.0; broker, Redis and secrets from the
# environment); mount your own over it. Certificates go in /etc/queen-edge/tls/: set
# QUEEN_EDGE_TLS_CERT=/etc/queen-edge/tls/tls.crt and QUEEN_EDGE_TLS_KEY=/etc/queen-edge/tls/tls.key.
COPY config/docker.yaml /etc/queen-edge/config.yaml
RUN mkdir -p /etc/queen-edge/tls && chown -R node:node /etc/queen-edge
USER node
# HTTPS (server.https.port) and the admin listener (server.admin.port: probes, /metrics, admin API).
EXPOSE 8443 9090
# The admin listener answers /livez while the process runs; the image's config binds it to 0.0.0.0,
# which loopback reaches too.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:9090/livez').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# SIGTERM drains (server.drainTimeoutMs); give `docker stop -t` more than that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "dist/cli.js"]
