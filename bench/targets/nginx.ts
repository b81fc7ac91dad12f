// Target: Debian's nginx as a plain keep-alive reverse proxy of the same upstream (no payment work), run as a
// child process with a temporary config on 127.0.0.1 and stopped by PID. Null when nginx is not installed.
import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { freePort } from './processes.ts'
import type { Target } from './target.ts'

const CANDIDATES = ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/bin/nginx']

export function findNginx(): string | null {
  return CANDIDATES.find((p) => existsSync(p)) ?? null
}

export async function startNginx(options: {
  dir: string
  upstream: string
  workers: number
}): Promise<Target | null> {
  const bin = findNginx()
  if (!bin) return null
  const port = await freePort()
  const prefix = join(options.dir, 'nginx')
  mkdirSync(join(prefix, 'logs'), { recursive: true })
  const upstream = new URL(options.upstream)
  const conf = join(prefix, 'nginx.conf')
  writeFileSync(
    conf,
    `daemon off;
master_process on;
worker_processes ${options.workers};
pid ${prefix}/nginx.pid;
error_log ${prefix}/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${prefix}/body; proxy_temp_path ${prefix}/proxy;
  fastcgi_temp_path ${prefix}/fcgi; uwsgi_temp_path ${prefix}/uwsgi; scgi_temp_path ${prefix}/scgi;
  upstream origin { server ${upstream.host}; keepalive 64; }
  server {
    listen 127.0.0.1:${port} reuseport;
    location / {
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      # Answers up to 512 KB (nginx-256k's) relayed from memory: the default 8 x 4 KB spools the rest of a
      # large answer to a temporary file, work tollgate (which never spools) does not do.
      proxy_buffers 8 64k;
      proxy_busy_buffers_size 128k;
    }
  }
}
`,
  )
  const proc = spawn(bin, ['-p', prefix, '-c', conf], { stdio: ['ignore', 'ignore', 'inherit'] })
  const kill = () => proc.kill('SIGKILL')
  process.once('exit', kill)
  const base = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 10_000
  for (;;) {
    const ok = await fetch(`${base}/data`).then(
      (r) => r.ok,
      () => false,
    )
    if (ok) break
    if (proc.exitCode !== null || Date.now() > deadline) {
      proc.kill('SIGKILL')
      throw new Error(`nginx did not start (see ${prefix}/logs/error.log)`)
    }
    await new Promise((r) => setTimeout(r, 50))
  }
  return {
    name: 'nginx',
    base,
    pid: proc.pid ?? null,
    stop: () =>
      new Promise((resolve) => {
        process.removeListener('exit', kill)
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve()
        proc.once('exit', () => resolve())
        proc.kill('SIGQUIT')
        setTimeout(() => proc.kill('SIGKILL'), 5_000).unref()
      }),
  }
}
