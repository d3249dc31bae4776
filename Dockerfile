# queen-edge: multi-stage build. Stage 1 compiles TypeScript; stage 2 carries production
# dependencies and dist/ only, runs as a non-root user.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

FROM node:20-bookworm-slim
ENV NODE_ENV=production QUEEN_EDGE_CONFIG=/etc/queen-edge/config.yaml
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY config/default.yaml /etc/queen-edge/config.yaml
RUN mkdir -p /etc/queen-edge/tls && chown -R node:node /etc/queen-edge
USER node
EXPOSE 8443 9090
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:9090/livez').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
ENTRYPOINT ["node", "dist/cli.js"]
