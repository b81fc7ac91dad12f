// The admin port: /metrics (Prometheus), /healthz (process is up), /readyz (database and chain answer).
import uws from 'uWebSockets.js'
import type { Logger } from './logger.ts'
import { registry } from './metrics.ts'

export interface ReadinessCheck {
  name: string
  check(): Promise<{ ok: boolean; detail?: string }>
}

export interface AdminServer {
  port: number
  close(): void
}

export async function startAdminServer(options: {
  host: string
  port: number
  checks: ReadinessCheck[]
  logger: Logger
  /** Extra routes, e.g. the reconcile report. */
  routes?: Record<string, () => Promise<{ status: number; body: unknown }>>
}): Promise<AdminServer> {
  const app = uws.App()
  app.get('/healthz', (res) => {
    res.writeHeader('content-type', 'application/json').end('{"status":"ok"}')
  })
  app.get('/metrics', (res) => {
    const state = onAbort(res)
    registry.metrics().then(
      (text) => reply(res, state, 200, registry.contentType, text),
      (err) => reply(res, state, 500, 'text/plain', String(err)),
    )
  })
  app.get('/readyz', (res) => {
    const state = onAbort(res)
    Promise.all(
      options.checks.map(async (c) => {
        try {
          return { name: c.name, ...(await c.check()) }
        } catch (err) {
          return { name: c.name, ok: false, detail: (err as Error).message }
        }
      }),
    ).then((results) => {
      const ready = results.every((r) => r.ok)
      const body = JSON.stringify({ status: ready ? 'ready' : 'not_ready', checks: results })
      reply(res, state, ready ? 200 : 503, 'application/json', body)
    })
  })
  for (const [path, route] of Object.entries(options.routes ?? {})) {
    app.get(path, (res) => {
      const state = onAbort(res)
      route().then(
        (r) => reply(res, state, r.status, 'application/json', JSON.stringify(r.body, bigintToString)),
        (err) =>
          reply(res, state, 500, 'application/json', JSON.stringify({ error: (err as Error).message })),
      )
    })
  }
  app.any('/*', (res) => {
    res
      .writeStatus('404 Not Found')
      .writeHeader('content-type', 'application/json')
      .end('{"error":"not_found"}')
  })
  return new Promise((resolve, reject) => {
    app.listen(options.host, options.port, (socket) => {
      if (!socket) return reject(new Error(`admin port ${options.host}:${options.port} is not available`))
      resolve({
        port: uws.us_socket_local_port(socket),
        close: () => uws.us_listen_socket_close(socket),
      })
    })
  })
}

function onAbort(res: uws.HttpResponse): { aborted: boolean } {
  const state = { aborted: false }
  res.onAborted(() => {
    state.aborted = true
  })
  return state
}

function reply(
  res: uws.HttpResponse,
  state: { aborted: boolean },
  status: number,
  type: string,
  body: string,
) {
  if (state.aborted) return
  res.cork(() => {
    res.writeStatus(String(status)).writeHeader('content-type', type).end(body)
  })
}

function bigintToString(_k: string, v: unknown) {
  return typeof v === 'bigint' ? v.toString() : v
}
