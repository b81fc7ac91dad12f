// The admin port: /metrics (Prometheus), /healthz (process is up), /readyz (database and chain answer).
import uws from 'uWebSockets.js'
import { writeError } from '../errors.ts'
import { requestIdFrom } from '../request-id.ts'
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
  app.get('/healthz', (res, req) => {
    res
      .writeHeader('content-type', 'application/json')
      .writeHeader('x-request-id', requestIdFrom(req.getHeader('x-request-id')))
      .end('{"status":"ok"}')
  })
  app.get('/metrics', (res, req) => {
    const state = onAbort(res, req)
    registry.metrics().then(
      (text) => reply(res, state, 200, registry.contentType, text),
      (err) => reply(res, state, 500, 'text/plain', String(err)),
    )
  })
  app.get('/readyz', (res, req) => {
    const state = onAbort(res, req)
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
    app.get(path, (res, req) => {
      const state = onAbort(res, req)
      route().then(
        (r) => reply(res, state, r.status, 'application/json', JSON.stringify(r.body, bigintToString)),
        (err) => {
          options.logger.error('admin route failed', { request_id: state.requestId, path, err })
          if (state.aborted) return
          res.cork(() => writeError(res, 'internal_error', state.requestId))
        },
      )
    })
  }
  app.any('/*', (res, req) => {
    writeError(res, 'route_not_found', requestIdFrom(req.getHeader('x-request-id')), {
      message: `no admin route ${req.getMethod().toUpperCase()} ${req.getUrl()}`,
    })
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

function onAbort(res: uws.HttpResponse, req: uws.HttpRequest): { aborted: boolean; requestId: string } {
  const state = { aborted: false, requestId: requestIdFrom(req.getHeader('x-request-id')) }
  res.onAborted(() => {
    state.aborted = true
  })
  return state
}

function reply(
  res: uws.HttpResponse,
  state: { aborted: boolean; requestId: string },
  status: number,
  type: string,
  body: string,
) {
  if (state.aborted) return
  res.cork(() => {
    res
      .writeStatus(String(status))
      .writeHeader('content-type', type)
      .writeHeader('x-request-id', state.requestId)
      .end(body)
  })
}

function bigintToString(_k: string, v: unknown) {
  return typeof v === 'bigint' ? v.toString() : v
}
