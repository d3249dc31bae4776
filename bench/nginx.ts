/**
 * nginx from Debian as the reference reverse proxy: one worker, TLS 1.3 with the benchmark's
 * certificate, HTTP/1.1 keep-alive to the double (upstream keepalive). Started in the foreground
 * under a private prefix, so it touches nothing of a system nginx.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { hasCommand, spawnWithLimits, waitForPort } from './procs.js';

/** How to get nginx when it is missing. */
export const NGINX_HINT = 'nginx not found: install it with `sudo apt-get update && sudo apt-get install -y nginx` (Debian/Ubuntu) to run the nginx scenario';

/** The nginx binary, or null when it is not installed (Debian puts it in /usr/sbin, often off a user's PATH). */
export function nginxBinary(): string | null {
  if (hasCommand('nginx')) return 'nginx';
  return existsSync('/usr/sbin/nginx') ? '/usr/sbin/nginx' : null;
}

/** The configuration file's text. */
export function nginxConfig(o: { dir: string; port: number; upstreamPort: number; cert: string; key: string; runAsRoot: boolean }): string {
  const temp = (name: string) => `${name}_temp_path ${join(o.dir, `${name}-temp`)};`;
  return `${o.runAsRoot ? 'user root root;\n' : ''}worker_processes 1;
worker_rlimit_nofile 65536;
pid ${join(o.dir, 'nginx.pid')};
error_log ${join(o.dir, 'error.log')} warn;
events { worker_connections 20000; multi_accept on; }
http {
  access_log off;
  ${temp('client_body')} ${temp('proxy')} ${temp('fastcgi')} ${temp('uwsgi')} ${temp('scgi')}
  upstream broker { server 127.0.0.1:${o.upstreamPort}; keepalive 128; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:${o.port} ssl;
    ssl_certificate ${o.cert};
    ssl_certificate_key ${o.key};
    ssl_protocols TLSv1.3;
    keepalive_requests 1000000;
    keepalive_timeout 65s;
    client_max_body_size 16m;
    client_body_buffer_size 64k;
    location / {
      proxy_pass http://broker;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header X-Forwarded-Proto https;
      proxy_read_timeout 120s;
    }
  }
}
`;
}

/** Starts nginx in the foreground (master + 1 worker) and waits until it listens. */
export async function startNginx(bin: string, o: { dir: string; port: number; upstreamPort: number; cert: string; key: string }): Promise<ChildProcess> {
  await mkdir(o.dir, { recursive: true });
  const conf = join(o.dir, 'nginx.conf');
  await writeFile(conf, nginxConfig({ ...o, runAsRoot: process.getuid?.() === 0 }));
  const child = spawnWithLimits([bin, '-p', o.dir, '-e', join(o.dir, 'error.log'), '-c', conf, '-g', 'daemon off;'], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  await waitForPort(o.port, 5000, child);
  return child;
}
